"""The insert funnel in a started client (ADR 0047): periodic ticks go through the insert
middleware, an insert-only middleware stays out of the execution chain, and a workflow an
``AsyncClient`` inserted runs in order."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from otel_support import Spans, stored_meta, trace_id_of

import drover
from drover.contrib.otel import TracingMiddleware

Conn = psycopg.Connection[tuple[Any, ...]]
MakeClient = Callable[..., drover.Client]
Poll = Callable[..., Any]


class Beat(drover.JobArgs, kind="funnel_beat"):
    pass


class Recorder:
    """Records each batch it saw (operation, jobs, rows) and tags every job it sees."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[str, list[drover.InsertParams], list[drover.JobRow]]] = []

    @contextlib.contextmanager
    def around_insert(self, batch: drover.InsertBatch) -> Iterator[None]:
        batch.add_tags("recorded")
        before = list(batch)
        yield
        with self.lock:
            self.seen.append((batch.operation, before, list(batch.rows)))


def _eager(queue: str = "parked") -> drover.PeriodicJob:
    # A queue no client works: the tick stays waiting, so it can be read.
    return drover.PeriodicJob(
        "funnel_eager", "@yearly", Beat(), drover.InsertOpts(queue=queue), run_on_start=True
    )


def test_a_periodic_tick_goes_through_the_insert_middleware(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    recorder = Recorder()
    client = make_client(
        plugins=[drover.plugins.Periodic(jobs=[_eager()])],
        middleware=[recorder],
        poll_interval=0.1,
    )
    client.start()
    seen = poll(lambda: list(recorder.seen), message="the tick's batch")
    client.stop()
    ((operation, params, rows),) = seen
    assert operation == "periodic"
    assert [(p.kind, p.queue) for p in params] == [("funnel_beat", "parked")]
    assert params[0].unique_key is not None and params[0].unique_key.startswith("funnel_eager/")
    assert params[0].tags == ("recorded",)
    (row,) = rows
    stored = conn.execute("SELECT tags, unique_key FROM drover_jobs WHERE id = %s", (row.id,))
    assert stored.fetchone() == (["recorded"], params[0].unique_key)


def test_a_traced_client_traces_its_periodic_ticks(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    spans = Spans()
    client = make_client(
        plugins=[drover.plugins.Periodic(jobs=[_eager()])],
        middleware=[TracingMiddleware(spans.provider)],
        poll_interval=0.1,
    )
    client.start()
    (producer,) = poll(spans.producers, message="the tick's producer span")
    client.stop()
    assert producer.name == "periodic parked"
    found = conn.execute("SELECT id FROM drover_jobs WHERE kind = 'funnel_beat'").fetchone()
    assert found is not None
    assert int(stored_meta(conn, found[0])["traceparent"].split("-")[1], 16) == trace_id_of(
        producer
    )


def test_an_insert_only_middleware_is_not_an_execution_middleware(
    make_client: MakeClient,
) -> None:
    ran = threading.Event()
    workers = drover.Workers()

    @workers.register
    def work(job: drover.Job[Beat]) -> None:
        ran.set()

    recorder = Recorder()
    client = make_client(workers=workers, middleware=[recorder], poll_interval=0.1)
    row = client.insert(Beat())
    client.start()
    done = client.result(row, timeout=10)
    client.stop()
    assert ran.is_set() and done is None
    assert [operation for operation, _, _ in recorder.seen] == ["insert"]


class Step(drover.JobArgs, kind="funnel_step"):
    name: str


def test_a_workflow_an_async_client_inserted_runs_in_order(
    make_client: MakeClient, db_url: str
) -> None:
    order: list[str] = []
    lock = threading.Lock()
    workers = drover.Workers()

    @workers.register
    def step(job: drover.Job[Step]) -> str:
        with lock:
            order.append(job.args.name)
        return job.args.name

    async def insert() -> tuple[drover.InsertedWorkflow, drover.JobRow]:
        async with (
            drover.AsyncClient(db_url) as producer,
            await psycopg.AsyncConnection.connect(db_url) as conn,
        ):
            flow = await producer.insert_tx(
                conn, drover.chain(Step(name="a"), drover.group(Step(name="b1"), Step(name="b2")))
            )
            await conn.commit()
            after = await producer.insert(
                Step(name="c"), drover.InsertOpts(depends_on=list(flow.last))
            )
            return flow, after

    flow, after = asyncio.run(insert())
    client = make_client(workers=workers, poll_interval=0.1)
    client.start()
    assert client.result(after, timeout=20) == "c"
    client.stop()
    assert order[0] == "a" and sorted(order[1:3]) == ["b1", "b2"] and order[3] == "c"
    assert len(flow.jobs) == 3
