"""chancy, with its default plugins, on a queue declared for the knob under test.

- bulk enqueue: ``sync_push_many(jobs, batch_size=batch)`` (one INSERT per job,
  one transaction per batch — chancy has no multi-row insert);
- single-row enqueue: one shared app (sync pool of 10), ``sync_push`` from every thread;
- drain: a ``Worker`` on queue ``bench`` declared with ``concurrency=c``, the
  asyncio executor (an ``async def`` no-op; chancy's default executor is a
  process pool) and ``eager_polling=True`` (poll again as soon as a job
  finishes, chancy's switch for this case). Timed from ``worker.start()``
  until every handler has run and ``worker.stop()`` has flushed the outcomes;
- latency: the same worker idling with notifications on (its default),
  ``polling_interval`` 5 s (default); a sync app in another thread pushes.

chancy logs every job pulled at INFO; its logger is set to WARNING here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from chancy import Chancy, Job, Queue, Worker

from peers import Latencies, run_threads, scalar_pair, table_exists, truncate_and_vacuum

REQUIRES = "chancy"
TABLES = ["chancy_jobs"]
QUEUE = "bench"

_log = logging.getLogger("bench.chancy")
_log.setLevel(logging.WARNING)
_log.addHandler(logging.StreamHandler())

# Handlers are found by import path, so the state they report to lives here.
_drain: dict[str, Any] = {}
_recorder: list[Latencies] = []


async def noop(n: int) -> None:
    _drain["count"] += 1
    if _drain["count"] >= _drain["target"]:
        _drain["done"].set()


async def ping(i: int, sent: float) -> None:
    _recorder[0].record(i, sent)


def _app(url: str, **options: Any) -> Chancy:
    return Chancy(url, log=_log, **options)


def _jobs(numbers: range) -> list[Job]:
    template = Job.from_func(noop, queue=QUEUE)
    return [template.with_kwargs(n=i) for i in numbers]


def setup(url: str) -> None:
    if table_exists(url, "chancy_jobs"):
        return

    async def migrate() -> None:
        async with _app(url) as app:
            await app.migrate()

    asyncio.run(migrate())


def reset(url: str) -> None:
    truncate_and_vacuum(url, TABLES)


def count(url: str) -> tuple[int, int]:
    return scalar_pair(
        url, "SELECT count(*), count(*) FILTER (WHERE state = 'succeeded') FROM chancy_jobs"
    )


def fill(url: str, n: int) -> None:
    with _app(url) as app:
        for _ in app.sync_push_many(_jobs(range(n)), batch_size=5000):
            pass


def enqueue_bulk(url: str, n: int, batch: int) -> float:
    with _app(url, max_connection_pool_size=1) as app:
        app.sync_pool.wait()
        started = time.perf_counter()
        for _ in app.sync_push_many(_jobs(range(n)), batch_size=batch):
            pass
        return time.perf_counter() - started


def enqueue_single(url: str, n: int, threads: int) -> float:
    template = Job.from_func(noop, queue=QUEUE)
    with _app(url, min_connection_pool_size=threads, max_connection_pool_size=threads) as app:
        app.sync_pool.wait()

        def work(_: object, numbers: range) -> None:
            for i in numbers:
                app.sync_push(template.with_kwargs(n=i))

        return run_threads(n, threads, lambda: None, work)


def _queue(concurrency: int, **options: Any) -> Queue:
    return Queue(QUEUE, concurrency=concurrency, executor=Chancy.Executor.Async, **options)


def drain(url: str, n: int, concurrency: int) -> float:
    async def main() -> float:
        _drain.update(count=0, target=n, done=asyncio.Event())
        async with _app(url) as app:
            await app.declare(_queue(concurrency, eager_polling=True), upsert=True)
            worker = Worker(app, register_signal_handlers=False)
            started = time.perf_counter()
            await worker.start()
            await asyncio.wait_for(_drain["done"].wait(), 1800)
            await worker.stop()
            return time.perf_counter() - started

    return asyncio.run(main())


def latency(url: str, n: int, rate: float) -> list[float]:
    recorder = Latencies(n)
    _recorder[:] = [recorder]
    template = Job.from_func(ping, queue=QUEUE)

    def drive() -> list[float]:
        with _app(url) as producer:
            return recorder.drive(
                rate, lambda i, sent: producer.sync_push(template.with_kwargs(i=i, sent=sent))
            )

    async def main() -> list[float]:
        async with _app(url) as app:
            await app.declare(_queue(10), upsert=True)
            worker = Worker(app, register_signal_handlers=False)
            await worker.start()
            try:
                return await asyncio.to_thread(drive)
            finally:
                await worker.stop()

    return asyncio.run(main())
