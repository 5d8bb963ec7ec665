"""The trace context an insert stores with its jobs (ADR 0042), as JSON object members.

drover itself imports no tracing library. ``drover.contrib.otel.
TracingMiddleware`` is an insert middleware (ADR 0047): around each insert
call it opens a span and merges the span's W3C ``traceparent`` and
``tracestate`` into every job's metadata (``InsertBatch``), after the
input is encoded and before anything is written, so every write path
(single, combined, unique, COPY, workflow, async) stores it the same way,
in the ``meta`` column the claim already returns.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

__all__ = ["TRACE_KEYS", "trace_members"]

TRACE_KEYS = ("traceparent", "tracestate")
"""The metadata keys drover reserves for a job's creation context (W3C Trace Context)."""


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
