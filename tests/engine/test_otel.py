"""OpenTelemetry tracing across a real started worker (drover.contrib.otel, ADR 0042).

Each test has a tracer provider of its own exporting to memory, given to the
``TracingMiddleware``; the producer's spans come from the same provider. The
jobs are inserted and run by started clients on the test's database, and the
assertions read the finished spans and the stored rows.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from jobdb import Conn, MakeClient, Poll, await_job_state, start_client
from opentelemetry.trace import StatusCode
from otel_support import Spans, stored_meta, trace_id_of

import drover
from drover.contrib.otel import DROVER_JOB_ATTEMPT, DROVER_JOB_OUTCOME, TracingMiddleware


class Step(drover.JobArgs, kind="otel_step"):
    action: str = "return"


class Immediate:
    """Retries are due at once, so a failed job runs again without waiting."""

    def next_retry(self, job: drover.JobRow) -> datetime:
        return datetime.now(UTC)


def _workers(kind: str, seen: list[int]) -> drover.Workers:
    """``Step`` fails or snoozes on its first attempt as its action says, then returns."""

    def act(job: drover.Job[Step]) -> None:
        seen.append(job.attempt)
        first = len(seen) == 1
        if job.args.action == "fail_once" and first:
            raise ValueError("first attempt fails")
        if job.args.action == "snooze_once" and first:
            raise drover.Snooze(0)
        if job.args.action == "fail":
            raise ValueError("always fails")
        if job.args.action == "cancel":
            raise drover.Cancel("not wanted")

    workers = drover.Workers()
    if kind == "sync":

        @workers.register
        def handle(job: drover.Job[Step]) -> None:
            act(job)

    else:

        @workers.register
        async def handle_async(job: drover.Job[Step]) -> None:
            await asyncio.sleep(0)
            act(job)

    return workers


def _worker(make_client: MakeClient, spans: Spans, kind: str, seen: list[int]) -> drover.Client:
    return start_client(
        make_client,
        _workers(kind, seen),
        middleware=[TracingMiddleware(spans.provider)],
        retry_policy=Immediate(),
    )


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_the_execution_span_is_a_child_of_the_insert_span_in_the_producers_trace(
    kind: str, make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    spans = Spans()
    worker = _worker(make_client, spans, kind, [])
    with spans.tracer.start_as_current_span("request") as request:
        row = worker.insert(Step())
    (process,) = poll(spans.waiter(row.id, 1), message="the execution span")
    (insert,) = spans.producers()

    trace_id = request.get_span_context().trace_id
    assert trace_id_of(insert) == trace_id_of(process) == trace_id
    assert insert.parent is not None and insert.parent.span_id == request.get_span_context().span_id
    assert process.parent is not None
    assert process.parent.span_id == insert.get_span_context().span_id  # type: ignore[union-attr]
    (link,) = process.links
    assert insert.get_span_context() is not None
    assert link.context.span_id == insert.get_span_context().span_id  # type: ignore[union-attr]
    assert link.context.trace_id == trace_id
    assert insert.name == "insert default"
    assert insert.attributes is not None
    assert insert.attributes["messaging.system"] == "drover"
    assert insert.attributes["messaging.message.id"] == str(row.id)
    assert insert.attributes["messaging.destination.name"] == "default"
    assert insert.attributes["drover.job.kind"] == "otel_step"
    assert process.name == "process default"
    assert process.attributes is not None
    assert process.attributes["messaging.operation.type"] == "process"
    assert process.attributes["drover.job.kind"] == "otel_step"
    assert process.attributes[DROVER_JOB_ATTEMPT] == 1
    assert process.attributes[DROVER_JOB_OUTCOME] == "completed"
    assert process.status.status_code is StatusCode.UNSET
    traceparent = stored_meta(conn, row.id)["traceparent"]
    assert traceparent.split("-")[1] == f"{trace_id:032x}"


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_retried_job_has_one_execution_span_per_attempt_in_one_trace(
    kind: str, make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    spans = Spans()
    seen: list[int] = []
    worker = _worker(make_client, spans, kind, seen)
    with spans.tracer.start_as_current_span("request"):
        row = worker.insert(Step(action="fail_once"))
    await_job_state(poll, conn, row.id, "completed")
    first, second = poll(spans.waiter(row.id, 2), message="two execution spans")

    assert seen == [1, 2]
    (insert,) = spans.producers()
    assert {trace_id_of(first), trace_id_of(second)} == {trace_id_of(insert)}
    assert first.get_span_context() != second.get_span_context()
    assert first.attributes is not None and second.attributes is not None
    assert (first.attributes[DROVER_JOB_ATTEMPT], second.attributes[DROVER_JOB_ATTEMPT]) == (1, 2)
    assert first.attributes[DROVER_JOB_OUTCOME] == "retryable"
    assert second.attributes[DROVER_JOB_OUTCOME] == "completed"
    # The failure is recorded on its attempt's span, and only there.
    assert first.status.status_code is StatusCode.ERROR
    assert "first attempt fails" in (first.status.description or "")
    (event,) = first.events
    assert event.name == "exception"
    assert event.attributes is not None
    assert event.attributes["exception.type"] == "ValueError"
    assert second.status.status_code is StatusCode.UNSET
    assert not second.events


def test_a_snoozed_job_runs_again_in_the_same_trace_and_the_snooze_is_no_error(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    spans = Spans()
    worker = _worker(make_client, spans, "sync", [])
    with spans.tracer.start_as_current_span("request"):
        row = worker.insert(Step(action="snooze_once"))
    await_job_state(poll, conn, row.id, "completed")
    first, second = poll(spans.waiter(row.id, 2), message="two execution spans")

    assert trace_id_of(first) == trace_id_of(second)
    assert first.attributes is not None
    assert first.attributes[DROVER_JOB_OUTCOME] == "snoozed"
    assert first.status.status_code is StatusCode.UNSET
    assert not first.events


@pytest.mark.parametrize(("action", "outcome"), [("fail", "dead"), ("cancel", "cancelled")])
def test_a_final_failure_says_how_the_job_ended(
    action: str, outcome: str, make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    spans = Spans()
    worker = _worker(make_client, spans, "sync", [])
    row = worker.insert(Step(action=action), drover.InsertOpts(max_attempts=1))
    await_job_state(poll, conn, row.id, "dead" if action == "fail" else "cancelled")
    (process,) = poll(spans.waiter(row.id, 1), message="the execution span")

    assert process.attributes is not None
    assert process.attributes[DROVER_JOB_OUTCOME] == outcome
    assert process.status.status_code is StatusCode.ERROR


def test_a_job_inserted_without_tracing_starts_a_trace_of_its_own(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    spans = Spans()
    producer = make_client()  # no TracingMiddleware: stores nothing
    with spans.tracer.start_as_current_span("request") as request:
        row = producer.insert(Step())
    assert stored_meta(conn, row.id) == {}

    _worker(make_client, spans, "sync", [])
    (process,) = poll(spans.waiter(row.id, 1), message="the execution span")
    assert process.parent is None
    assert not process.links
    assert trace_id_of(process) != request.get_span_context().trace_id


def test_every_job_of_an_insert_many_copy_continues_the_batch_span(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    spans = Spans()
    worker = _worker(make_client, spans, "sync", [])
    with spans.tracer.start_as_current_span("request") as request:
        rows = worker.insert_many([Step(), Step(), Step()])
    for row in rows:
        await_job_state(poll, conn, row.id, "completed")
    (batch,) = spans.producers()
    assert batch.name == "insert_many default"
    assert batch.attributes is not None
    assert batch.attributes["messaging.batch.message_count"] == 3
    trace_id = request.get_span_context().trace_id
    for row in rows:
        (process,) = poll(spans.waiter(row.id, 1), message=f"job {row.id}'s span")
        assert trace_id_of(process) == trace_id
        assert process.parent is not None
        assert process.parent.span_id == batch.get_span_context().span_id  # type: ignore[union-attr]


class Parent(drover.JobArgs, kind="otel_parent"):
    pass


def test_a_job_inserted_by_a_handler_joins_the_trace_of_the_execution(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    spans = Spans()
    workers = drover.Workers()
    clients: list[drover.Client] = []

    @workers.register
    def parent(job: drover.Job[Parent]) -> None:
        clients[0].insert(Step())

    @workers.register
    def step(job: drover.Job[Step]) -> None:
        return None

    worker = start_client(make_client, workers, middleware=[TracingMiddleware(spans.provider)])
    clients.append(worker)
    with spans.tracer.start_as_current_span("request") as request:
        first = worker.insert(Parent())
    (parent_span,) = poll(spans.waiter(first.id, 1), message="the parent's span")
    inserted = [
        s
        for s in spans.producers()
        if s.parent is not None and s.parent.span_id == parent_span.context.span_id
    ]
    (child_insert,) = inserted
    assert child_insert.attributes is not None
    child_id = int(str(child_insert.attributes["messaging.message.id"]))
    (child_span,) = poll(spans.waiter(child_id, 1), message="the child's span")
    assert trace_id_of(child_span) == request.get_span_context().trace_id


@pytest.mark.parametrize("stored", ["not a traceparent", 42])
def test_a_malformed_stored_context_starts_a_trace_of_its_own(
    stored: object, make_client: MakeClient, poll: Poll
) -> None:
    spans = Spans()
    worker = _worker(make_client, spans, "sync", [])
    row = make_client().insert(Step(), drover.InsertOpts(meta={"traceparent": stored}))
    (process,) = poll(spans.waiter(row.id, 1), message="the execution span")
    assert process.parent is None
    assert not process.links
    assert process.attributes is not None
    assert process.attributes[DROVER_JOB_OUTCOME] == "completed"
    assert worker.running
