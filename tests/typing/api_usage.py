"""Type-checked contract for drover's public API (mypy --strict; never executed by pytest).

Lines marked ``type: ignore[code]`` must stay errors: with warn_unused_ignores
mypy fails if one of them ever stops being an error.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta

import psycopg

import drover


class SendEmail(drover.JobArgs, kind="send_email", queue="email", max_attempts=5):
    to: str
    subject: str = "hello"


class Resize(drover.JobArgs, kind="resize", priority=-5):
    image_id: int


class SendEmailWorker(drover.Worker[SendEmail]):
    timeout = timedelta(seconds=30)

    def work(self, job: drover.Job[SendEmail]) -> None:
        to: str = job.args.to
        attempt: int = job.attempt
        if job.context.cancelled or job.context.wait(0.1):
            return
        print(to, attempt)
        _ = job.args.nope  # type: ignore[attr-defined]


workers = drover.Workers()
worker: SendEmailWorker = workers.add(SendEmailWorker())


@workers.register
def resize(job: drover.Job[Resize]) -> None:
    image_id: int = job.args.image_id
    print(image_id)


@workers.register(args=SendEmail)
def send_again(job: drover.Job[SendEmail]) -> None:
    print(job.args.subject)


def inserts(client: drover.Client, conn: psycopg.Connection[tuple[object, ...]]) -> None:
    row: drover.JobRow = client.insert(SendEmail(to="a"))
    state: drover.JobState = row.state
    print(state)
    client.insert(
        Resize(image_id=1),
        drover.InsertOpts(queue="bulk", scheduled_at=datetime.now(UTC), unique_key="k"),
    )
    client.insert_tx(conn, SendEmail(to="b"))
    rows: list[drover.JobRow] = client.insert_many(
        [SendEmail(to="c"), (Resize(image_id=2), drover.InsertOpts(queue="bulk", priority=9))]
    )
    priority: int = rows[0].priority
    print(rows, priority)
    client.insert_many_tx(conn, [Resize(image_id=3)])
    SendEmail(to=1)  # type: ignore[arg-type]
    SendEmail(tx="x")  # type: ignore[call-arg]
    client.insert({"to": "x"})  # type: ignore[call-overload]


def migrations(url: str) -> None:
    applied: list[drover.Migration] = drover.migrate(url)
    status: drover.MigrationStatus = drover.migration_status(url)
    print(applied, status.current_version, status.pending)


def audit(next_handler: drover.Handler) -> drover.Handler:
    def handle(ctx: drover.JobContext, row: drover.JobRow) -> None:
        ctx.values["audited"] = row.id
        next_handler(ctx, row)

    return handle


def running(url: str) -> None:
    config = drover.Config(
        workers=workers,
        concurrency=4,
        queues={
            "default": 4,
            "bulk": 1,
            "images": drover.Queue(weight=2, max_workers=2, limits=drover.Limit(rate=10)),
        },
        poll_interval=timedelta(milliseconds=500),
        lease_duration=30,
        middleware=[audit, drover.Timeout(timedelta(seconds=30))],
        retry_policy=drover.ExponentialRetryPolicy(),
    )
    cap: int | None = config.queues["images"].max_workers
    weight: int = config.queues["default"].weight
    print(cap, weight)
    with drover.Client(url, config) as client:
        client.pause_queue("bulk")
        client.resume_queue("bulk")
        states: list[drover.QueueState] = client.queue_states()
        print(states)
    try:
        client.stop(timedelta(seconds=5))
    except drover.DrainIncomplete as exc:
        ids: tuple[int, ...] = exc.job_ids
        print(ids, exc.count)
    drover.Config(concurrency="4")  # type: ignore[arg-type]


class Housekeeping(drover.Plugin):
    name = "housekeeping"

    def __init__(self, *, interval: drover.Duration = 300, table: str = "sessions") -> None:
        super().__init__(interval=interval)
        self.table = table

    def run_once(self, context: drover.PluginContext) -> int:
        with context.connection(timeout=5) as conn:
            cur = conn.execute("SELECT 1")
        if context.stopped or context.wait(0.1):
            return 0
        context.logger.info("housekept for %s", context.client_id)
        return cur.rowcount

    def not_ready(self, status: drover.PluginStatus) -> str | None:
        since: float | None = status.since_success
        return None if since is None or since < 600 else "housekeeping stale"


def plugins() -> None:
    nightly = drover.PeriodicJob("nightly", "30 2 * * *", Resize(image_id=1))
    config = drover.Config(
        plugins=[
            drover.plugins.Pruner(retention=drover.Retention(completed=3600), interval=60),
            drover.plugins.HealthProbe(interval=0),
            drover.plugins.QueueStats(interval=timedelta(seconds=30)),
            drover.plugins.Periodic(jobs=[nightly]),
            Housekeeping(interval=timedelta(minutes=10)),
        ]
    )
    found: drover.Plugin | None = config.plugin("pruner")
    every: tuple[drover.Plugin, ...] = config.effective_plugins
    interval: timedelta | None = every[0].interval
    print(found, interval)
    drover.Config(plugins=drover.plugins.Pruner())  # type: ignore[arg-type]
    drover.plugins.Pruner(retention=3600)  # type: ignore[arg-type]

    class MyPruner(drover.plugins.Pruner):  # type: ignore[misc]
        pass


def signals(job: drover.Job[SendEmail]) -> None:
    if job.attempt > 3:
        raise drover.Cancel("gave up")
    raise drover.Snooze(timedelta(minutes=5))


class Tenant:
    """An insert middleware (ADR 0047): an object with ``around_insert``."""

    @contextlib.contextmanager
    def around_insert(self, batch: drover.InsertBatch) -> Iterator[None]:
        operation: str = batch.operation
        first: drover.InsertParams = batch[0]
        queue: str = first.queue
        batch.add_meta({"tenant": operation, "queue": queue})
        batch.add_tags("tenant")
        batch.replace(0, priority=5)
        yield
        rows: Sequence[drover.JobRow] = batch.rows
        print(len(rows))


async def insert_middleware(url: str, conn: psycopg.AsyncConnection[tuple[object, ...]]) -> None:
    middleware: drover.InsertMiddleware = Tenant()
    config = drover.Config(middleware=[audit, middleware])
    async with drover.AsyncClient(url, config) as client:
        row: drover.JobRow = await client.insert(SendEmail(to="a"))
        flow: drover.InsertedWorkflow = await client.insert(
            drover.chain(SendEmail(to="b"), Resize(image_id=1))
        )
        in_tx: drover.InsertedWorkflow = await client.insert_tx(
            conn, drover.group(SendEmail(to="c"))
        )
        print(row, flow.id, in_tx.last)
    with drover.Inspector(url, middleware=[middleware]) as inspector:
        inspector.enqueue("send_email", '{"to": "d"}')
    drover.Config(middleware=[object()])  # type: ignore[list-item]
