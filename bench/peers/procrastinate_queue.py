"""procrastinate, with its documented APIs and defaults except the knob under test.

- bulk enqueue: ``task.batch_defer`` per batch, sync app (``SyncPsycopgConnector``);
- single-row enqueue: one shared sync app (pool of 10), ``task.defer`` from every thread;
- drain: ``App.run_worker_async(concurrency=c, wait=False)`` over an
  ``async def`` no-op task (procrastinate's native mode; sync tasks would run
  in threads); connector pool ``max_size=10`` (drover's pool size). Timed
  from the call until it returns, i.e. the queue is caught up and every job
  has recorded its outcome;
- latency: a worker idling with ``listen_notify`` on (its default); a sync app
  in another thread defers one job at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import procrastinate

from peers import Latencies, run_threads, scalar_pair, table_exists, truncate_and_vacuum

REQUIRES = "procrastinate"
TABLES = ["procrastinate_jobs", "procrastinate_events", "procrastinate_periodic_defers"]

logging.getLogger("procrastinate").setLevel(logging.WARNING)


async def _noop(n: int) -> None:
    return None


def _sync_app(url: str, **pool: Any) -> tuple[procrastinate.App, Any]:
    app = procrastinate.App(connector=procrastinate.SyncPsycopgConnector(conninfo=url, **pool))
    task = app.task(name="bench_noop")(_noop)
    return app, task


def setup(url: str) -> None:
    if table_exists(url, "procrastinate_jobs"):
        return
    app, _ = _sync_app(url)
    with app.open():
        app.schema_manager.apply_schema()


def reset(url: str) -> None:
    truncate_and_vacuum(url, TABLES)


def count(url: str) -> tuple[int, int]:
    return scalar_pair(
        url,
        "SELECT count(*), count(*) FILTER (WHERE status = 'succeeded') FROM procrastinate_jobs",
    )


def _defer_batches(task: Any, n: int, batch: int) -> None:
    for start in range(0, n, batch):
        task.batch_defer(*({"n": i} for i in range(start, min(n, start + batch))))


def fill(url: str, n: int) -> None:
    app, task = _sync_app(url)
    with app.open():
        _defer_batches(task, n, 5000)


def enqueue_bulk(url: str, n: int, batch: int) -> float:
    app, task = _sync_app(url, min_size=1, max_size=1)
    with app.open():
        app.check_connection()
        started = time.perf_counter()
        _defer_batches(task, n, batch)
        return time.perf_counter() - started


def enqueue_single(url: str, n: int, threads: int) -> float:
    app, task = _sync_app(url, min_size=threads, max_size=threads)
    with app.open():
        app.connector.get_sync_connector().pool.wait()  # type: ignore[attr-defined]

        def work(_: object, numbers: range) -> None:
            for i in numbers:
                task.defer(n=i)

        return run_threads(n, threads, lambda: None, work)


def _async_app(url: str) -> procrastinate.App:
    return procrastinate.App(
        connector=procrastinate.PsycopgConnector(conninfo=url, min_size=1, max_size=10)
    )


def drain(url: str, n: int, concurrency: int) -> float:
    app = _async_app(url)
    app.task(name="bench_noop")(_noop)

    async def main() -> float:
        async with app.open_async():
            await app.check_connection_async()
            started = time.perf_counter()
            await app.run_worker_async(
                concurrency=concurrency, wait=False, install_signal_handlers=False
            )
            return time.perf_counter() - started

    return asyncio.run(main())


def latency(url: str, n: int, rate: float) -> list[float]:
    recorder = Latencies(n)
    app = _async_app(url)

    @app.task(name="bench_ping")
    async def ping(i: int, sent: float) -> None:
        recorder.record(i, sent)

    producer = procrastinate.App(connector=procrastinate.SyncPsycopgConnector(conninfo=url))
    send_ping = producer.task(name="bench_ping")(ping.func)
    result: list[float] = []

    def drive() -> None:
        with producer.open():
            result.extend(recorder.drive(rate, lambda i, sent: send_ping.defer(i=i, sent=sent)))

    async def main() -> None:
        async with app.open_async():
            worker = asyncio.create_task(
                app.run_worker_async(concurrency=10, install_signal_handlers=False)
            )
            try:
                await asyncio.to_thread(drive)
            finally:
                worker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await worker

    asyncio.run(main())
    return result
