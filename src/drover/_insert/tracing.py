"""The seam between the insert paths and a tracer (ADR 0042), and the stamping of trace context.

drover itself imports no tracing library. A ``Config.middleware`` entry that
also traces inserts (``drover.contrib.otel.TracingMiddleware``) exposes an
``InsertTracer`` as its ``drover_insert_tracer`` attribute; the client finds
it once, at construction. Without one, an insert pays a single ``is None``
test and nothing else.

With one, every public insert call runs inside ``InsertTracer.insert_span``:
the span's ``carrier`` (W3C ``traceparent`` and ``tracestate``) is merged
into each new job's metadata by the functions below, after the input is
encoded and before anything is written, so every write path (single,
combined, unique, COPY, workflow, async) stores it the same way, in the
``meta`` column the claim already returns.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from drover._records import EncodedBatch, EncodedGraph, JobInsertParams, UniformBatch
from drover.job import JobRow

__all__ = [
    "TRACE_KEYS",
    "InsertSpan",
    "InsertTracer",
    "insert_tracer_of",
    "stamp",
    "stamp_batch",
    "stamp_graph",
    "trace_members",
]

TRACE_KEYS = ("traceparent", "tracestate")
"""The metadata keys drover reserves for a job's creation context (W3C Trace Context)."""


class InsertSpan(Protocol):
    """One insert call's span, as the insert path sees it."""

    @property
    def carrier(self) -> Mapping[str, str]:
        """The context to store with each new job (empty: store nothing)."""

    def inserted(self, rows: Sequence[JobRow]) -> None:
        """The rows the call returned (called once, only when it succeeded)."""


class InsertTracer(Protocol):
    """Opens the span of one public insert call (``operation``: the method's name)."""

    def insert_span(self, operation: str) -> AbstractContextManager[InsertSpan]:
        """A context manager around the call: it ends the span, recording an error raised in it."""


def insert_tracer_of(middleware: Sequence[object]) -> InsertTracer | None:
    """The first ``drover_insert_tracer`` among ``Config.middleware``'s entries, or ``None``."""
    for entry in middleware:
        tracer = getattr(entry, "drover_insert_tracer", None)
        if tracer is not None:
            return tracer  # type: ignore[no-any-return]
    return None


# json.dumps for a str, minus the encoder object json.dumps sets up per call.
_quote: Callable[[str], str] = json.encoder.encode_basestring_ascii


def trace_members(carrier: Mapping[str, str]) -> str | None:
    """``carrier``'s reserved keys as JSON object members (no braces), or ``None`` if none."""
    members = [
        f'"{key}":{_quote(value)}'
        for key in TRACE_KEYS
        if isinstance(value := carrier.get(key), str)
    ]
    return ",".join(members) or None


def stamp(params: JobInsertParams, members: str) -> JobInsertParams:
    """``params`` with ``members`` first in its metadata.

    First, so that a ``traceparent`` the caller put in ``InsertOpts.meta``
    itself wins (jsonb keeps the last of duplicate keys).
    """
    meta = params.meta
    if meta is None or meta == "{}":
        return params._replace(meta=f"{{{members}}}")
    return params._replace(meta=f"{{{members},{meta[1:]}")


def stamp_batch(batch: EncodedBatch, members: str) -> EncodedBatch:
    """An ``insert_many`` batch with every item stamped.

    A batch with no tags or metadata of its own keeps its path: every item
    now has the same metadata, which the direct COPY writes as one more
    column (``shared_meta``). Any other batch already takes a path that
    writes each item's metadata.
    """
    params = batch.params
    if isinstance(params, UniformBatch):
        meta = f"{{{members}}}"
        stamped = UniformBatch(
            params.kind, params.queue, params.max_attempts, params.priority, params.args_json, meta
        )
        return batch._replace(params=stamped, shared_meta=meta)
    batch = batch._replace(params=[stamp(p, members) for p in params])
    if batch.decorated:
        return batch
    return batch._replace(shared_meta=f"{{{members}}}")


def stamp_graph(graph: EncodedGraph, members: str) -> EncodedGraph:
    """A workflow's (or dependent batch's) jobs, each stamped."""
    return graph._replace(params=[stamp(p, members) for p in graph.params])
