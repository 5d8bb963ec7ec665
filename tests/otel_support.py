"""Shared by the OpenTelemetry tests: an in-memory tracer provider and span lookups."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

__all__ = ["Spans", "stored_meta", "trace_id_of"]


class Spans:
    """A tracer provider of its own (never the global one) whose spans end up in memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("tests")

    def finished(self) -> tuple[ReadableSpan, ...]:
        return self.exporter.get_finished_spans()

    def process(self, job_id: int) -> list[ReadableSpan]:
        """The finished execution spans of ``job_id``, in the order they ended."""
        return [
            s
            for s in self.finished()
            if s.kind is SpanKind.CONSUMER
            and (s.attributes or {}).get("messaging.message.id") == str(job_id)
        ]

    def producers(self) -> list[ReadableSpan]:
        return [s for s in self.finished() if s.kind is SpanKind.PRODUCER]

    def waiter(self, job_id: int, count: int) -> Callable[[], list[ReadableSpan]]:
        """For ``poll``: the job's execution spans once there are ``count`` of them."""

        def ready() -> list[ReadableSpan]:
            found = self.process(job_id)
            return found if len(found) >= count else []

        return ready


def trace_id_of(span: ReadableSpan) -> int:
    context = span.get_span_context()
    assert context is not None
    return context.trace_id


def stored_meta(conn: psycopg.Connection[Any], job_id: int) -> dict[str, Any]:
    """The job's ``meta`` column, read back from the database."""
    row = conn.execute("SELECT meta FROM drover_jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    meta: dict[str, Any] = row[0]
    return meta
