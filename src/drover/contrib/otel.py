"""OpenTelemetry tracing of inserts and executions (``pip install 'drover-queue[otel]'``, ADR 0042).

One line turns it on, for a producer and a worker alike:

    config = drover.Config(workers=workers, middleware=[TracingMiddleware()])

The entry is an execution middleware (with an async form, so ``async def``
handlers are traced too) and an insert middleware (``around_insert``, ADR
0047): every insert made with that config (a ``Client``'s or an
``AsyncClient``'s, and the client's periodic ticks) runs in a span that
stores its W3C trace context (``traceparent``, ``tracestate``) in every job
it inserts, under those two keys of the job's metadata. Each execution then
opens a ``process`` span that is a child of that context, so a job's
attempts (retries, snoozes) are spans of the producer's trace.

The attribute names follow OpenTelemetry's messaging semantic conventions
(``messaging.system`` is ``drover``, the destination is the queue, the
message id the job id) plus ``drover.job.*`` for what they do not cover.
This module needs ``opentelemetry-api``; drover itself never imports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any

from drover._insert.tracing import TRACE_KEYS, trace_members
from drover._kernel.disposition import find_signal
from drover._version import VERSION
from drover.context import JobContext
from drover.errors import ArgsDecodeError, Cancel, InvalidArgument, Snooze
from drover.insert_middleware import InsertBatch
from drover.job import JobRow
from drover.middleware import AsyncHandler, Handler, with_async_form

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.context import Context
    from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, TracerProvider
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError as exc:  # pragma: no cover - exercised by a subprocess test
    raise ImportError(
        "drover.contrib.otel needs OpenTelemetry: pip install 'drover-queue[otel]' "
        f"(opentelemetry-api; {exc})"
    ) from exc

__all__ = [
    "DROVER_JOB_ATTEMPT",
    "DROVER_JOB_DUPLICATE",
    "DROVER_JOB_KIND",
    "DROVER_JOB_MAX_ATTEMPTS",
    "DROVER_JOB_OUTCOME",
    "TracingMiddleware",
]

DROVER_JOB_KIND = "drover.job.kind"
DROVER_JOB_ATTEMPT = "drover.job.attempt"
"""The execution's attempt number, from 1 (a snoozed attempt is run again under its number)."""
DROVER_JOB_MAX_ATTEMPTS = "drover.job.max_attempts"
DROVER_JOB_OUTCOME = "drover.job.outcome"
"""What the attempt asked for: ``completed``, ``snoozed``, ``cancelled``, ``retryable`` or
``dead``: the state the job goes to, unless its claim was lost meanwhile or an operator
cancelled it while it ran (the job then ends ``cancelled``, ADR 0030)."""
DROVER_JOB_DUPLICATE = "drover.job.duplicate"
"""On an insert span: a unique insert returned the job already holding the identity."""

_SYSTEM = "drover"
_PROPAGATOR = TraceContextTextMapPropagator()


_NO_LINKS: tuple[Link, ...] = ()


def _parent(row: JobRow) -> tuple[Context, Sequence[Link]]:
    """The creation context stored with ``row`` and a link to it; an empty context
    (a trace of its own) and no link if it has none."""
    meta = row.meta
    if "traceparent" not in meta:
        return Context(), _NO_LINKS
    carrier = {key: meta[key] for key in TRACE_KEYS if isinstance(meta.get(key), str)}
    context = _PROPAGATOR.extract(carrier, context=Context())
    creation = trace.get_current_span(context).get_span_context()
    if not creation.is_valid:  # a malformed traceparent: extract ignored it
        return context, _NO_LINKS
    # Child of the creation context, so every attempt is in the producer's
    # trace; the link is what the messaging conventions require of a process
    # span, for backends that follow links rather than parents (ADR 0042).
    return context, (Link(creation),)


def _outcome(row: JobRow, exc: BaseException) -> str:
    # The same order as drover's disposition of a failed attempt.
    signal = find_signal(exc)
    if isinstance(signal, Cancel):
        return "cancelled"
    if isinstance(signal, Snooze):
        return "snoozed"
    if isinstance(exc, ArgsDecodeError) or row.attempt >= row.max_attempts:
        return "dead"
    return "retryable"


def _process_attributes(row: JobRow) -> dict[str, Any]:
    return {
        "messaging.system": _SYSTEM,
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": row.queue,
        "messaging.message.id": str(row.id),
        DROVER_JOB_KIND: row.kind,
        DROVER_JOB_ATTEMPT: row.attempt,
        DROVER_JOB_MAX_ATTEMPTS: row.max_attempts,
    }


def _failed(span: Span, row: JobRow, exc: BaseException) -> None:
    outcome = _outcome(row, exc)
    span.set_attribute(DROVER_JOB_OUTCOME, outcome)
    if outcome == "snoozed":
        return  # asking to run later is not a failure
    span.record_exception(exc)
    span.set_attribute("error.type", type(exc).__qualname__)
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__qualname__}: {exc}"))


class _InsertSpan:
    """An insert call's span, current while the call writes, whose context it stores with
    its jobs. A class rather than ``start_as_current_span``: its three nested generator
    context managers cost more than the span itself."""

    __slots__ = ("_batch", "_operation", "_span", "_token", "_tracer")

    def __init__(self, tracer: trace.Tracer, batch: InsertBatch) -> None:
        self._tracer = tracer
        self._batch = batch
        self._operation = batch.operation

    def __enter__(self) -> _InsertSpan:
        span = self._span = self._tracer.start_span(
            self._operation,
            kind=SpanKind.PRODUCER,
            attributes={
                "messaging.system": _SYSTEM,
                "messaging.operation.type": "send",
                "messaging.operation.name": self._operation,
            },
        )
        context = trace.set_span_in_context(span)
        self._token = otel_context.attach(context)
        if span.get_span_context().is_valid:
            carrier: dict[str, str] = {}
            _PROPAGATOR.inject(carrier, context=context)
            members = trace_members(carrier)
            if members:
                # Into every job's metadata, ahead of the job's own keys (a
                # traceparent the caller put there wins); the batch keeps its
                # COPY path (InsertBatch.add_meta, without re-encoding).
                self._batch._add_members(members)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        span = self._span
        try:
            if exc is None:
                self._inserted(self._batch.rows)
            elif span.is_recording():
                span.record_exception(exc)
                span.set_attribute("error.type", type(exc).__qualname__)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__qualname__}: {exc}"))
        finally:
            otel_context.detach(self._token)
            span.end()

    def _inserted(self, rows: Sequence[JobRow]) -> None:
        span = self._span
        if not span.is_recording() or not rows:
            return
        queues = {row.queue for row in rows}
        if len(queues) == 1:
            queue = rows[0].queue
            span.set_attribute("messaging.destination.name", queue)
            span.update_name(f"{self._operation} {queue}")
        kinds = {row.kind for row in rows}
        if len(kinds) == 1:
            span.set_attribute(DROVER_JOB_KIND, rows[0].kind)
        if len(rows) == 1 and not self._operation.startswith("insert_many"):
            span.set_attribute("messaging.message.id", str(rows[0].id))
            if rows[0].duplicate:
                span.set_attribute(DROVER_JOB_DUPLICATE, True)
        else:
            span.set_attribute("messaging.batch.message_count", len(rows))


class TracingMiddleware:
    """Traces executions (a ``process`` span each) and, on the client, inserts (a ``send`` span).

    Put one in ``Config.middleware``; it works for sync and ``async def``
    handlers. Spans go to ``tracer_provider``, by default the global one
    (``opentelemetry.trace.set_tracer_provider``): with none set, the spans
    are OpenTelemetry's no-op spans and nothing is stored with the jobs.

    Inserts: each insert call made through the insert funnel with this
    middleware (a ``Client``'s or ``AsyncClient``'s ``insert``,
    ``insert_tx``, ``insert_many``, ``insert_many_tx``, workflows and unique
    inserts included; the client's periodic ticks, ``periodic``; an
    ``Inspector`` or a helper given it) runs in a ``PRODUCER`` span named
    after the call, a child of the caller's current span; that span's
    context is stored in each inserted job's metadata (``traceparent``,
    ``tracestate``). A batch shares one span and so one stored context.
    A unique insert that returns the job already holding its identity keeps
    that job's context. A ``traceparent`` the caller puts in
    ``InsertOpts.meta`` itself wins over the span's.

    Executions: each attempt runs in a ``CONSUMER`` span that is a child of
    the stored context (a job without one starts a trace of its own), on the
    handler's thread or task, so spans the handler starts, and jobs it
    inserts, are its children. A raised exception is recorded on the span
    (status ``ERROR``) unless it is a ``Snooze``; ``drover.job.outcome``
    says what the attempt asked for. The span ends when the handler returns
    or raises: a job cancelled or timed out ends with its handler, and a
    client stopped mid-job ends no span it did not run to its end (the next
    attempt opens its own). Thread-safe: one instance serves every thread
    and task of the client.
    """

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        if tracer_provider is not None and not isinstance(tracer_provider, TracerProvider):
            raise InvalidArgument(
                "tracer_provider must be an opentelemetry TracerProvider, "
                f"not {type(tracer_provider).__qualname__}"
            )
        self._tracer = trace.get_tracer(
            "drover.contrib.otel", VERSION, tracer_provider=tracer_provider
        )
        with_async_form(self, self._async_form)

    def __call__(self, next_handler: Handler) -> Handler:
        """The sync form: wrap ``next_handler`` in a ``process`` span per execution."""
        tracer = self._tracer

        def handle(ctx: JobContext, row: JobRow) -> None:
            parent, links = _parent(row)
            with tracer.start_as_current_span(
                f"process {row.queue}",
                context=parent,
                kind=SpanKind.CONSUMER,
                attributes=_process_attributes(row),
                links=links,
                record_exception=False,
                set_status_on_exception=False,
            ) as span:
                try:
                    next_handler(ctx, row)
                except BaseException as exc:
                    _failed(span, row, exc)
                    raise
                span.set_attribute(DROVER_JOB_OUTCOME, "completed")

        return handle

    def _async_form(self, next_handler: AsyncHandler) -> AsyncHandler:
        tracer = self._tracer

        async def handle(ctx: JobContext, row: JobRow) -> None:
            parent, links = _parent(row)
            with tracer.start_as_current_span(
                f"process {row.queue}",
                context=parent,
                kind=SpanKind.CONSUMER,
                attributes=_process_attributes(row),
                links=links,
                record_exception=False,
                set_status_on_exception=False,
            ) as span:
                try:
                    await next_handler(ctx, row)
                except BaseException as exc:
                    _failed(span, row, exc)
                    raise
                span.set_attribute(DROVER_JOB_OUTCOME, "completed")

        return handle

    def around_insert(self, batch: InsertBatch) -> AbstractContextManager[object]:
        """The insert middleware (``drover.InsertMiddleware``): the span of one insert call,
        named after ``batch.operation`` and current during the write, whose context is
        stored with each job of ``batch``; the write's exception is recorded on it (status
        ``ERROR``) and goes on. Cheap: one object per call."""
        return _InsertSpan(self._tracer, batch)

    def __repr__(self) -> str:
        return "drover.contrib.otel.TracingMiddleware()"
