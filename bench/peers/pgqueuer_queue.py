"""PgQueuer, given its fastest documented setup: workers on the asyncpg pool driver.

- bulk enqueue: ``SyncQueries.enqueue`` with lists (one array-insert statement
  per batch) — the API PgQueuer offers synchronous code, on psycopg 3;
- single-row enqueue: ``SyncQueries.enqueue`` of one job, one psycopg
  connection per thread (the sync driver wraps one connection; there is no pool);
- drain: ``QueueManager.run(mode=drain)`` over ``AsyncpgPoolDriver`` (pool of
  10) with an ``async def`` entrypoint. Concurrency ``c`` is the per-worker cap
  ``max_concurrent_tasks=c`` with ``batch_size=c // 2`` (PgQueuer requires the
  cap to be at least twice the batch); for ``c = 1``, which that rule forbids,
  the entrypoint's ``concurrency_limit=1``. Timed from ``run`` until it
  returns (queue empty, in-flight jobs finished, status buffers flushed);
- latency: a ``QueueManager`` idling in continuous mode (LISTEN on its channel,
  fed by PgQueuer's table trigger); a sync connection in another thread enqueues.

With its psycopg async driver instead, which shares one connection between
LISTEN and queries, the drain ran at about 350-380 jobs/s at every
concurrency on this machine, so asyncpg is used for the worker side when it is
installed (``pip install "pgqueuer[asyncpg]"``) and psycopg otherwise.
Finished jobs leave the ``pgqueuer`` table and are logged in ``pgqueuer_log``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import psycopg
from pgqueuer.adapters.drivers.psycopg import SyncPsycopgDriver
from pgqueuer.domain.models import Job
from pgqueuer.domain.types import QueueExecutionMode
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries, SyncQueries

from peers import Latencies, run_threads, scalar_pair, table_exists, truncate_and_vacuum

REQUIRES = "pgqueuer"
TABLES = ["pgqueuer", "pgqueuer_log", "pgqueuer_statistics"]

logging.getLogger("pgqueuer").setLevel(logging.WARNING)


def setup(url: str) -> None:
    if table_exists(url, "pgqueuer"):
        return

    async def install() -> None:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await Queries.from_psycopg_connection(conn).install()

    asyncio.run(install())


def reset(url: str) -> None:
    truncate_and_vacuum(url, TABLES)


def count(url: str) -> tuple[int, int]:
    return scalar_pair(
        url,
        "SELECT (SELECT count(*) FROM pgqueuer), "
        "(SELECT count(*) FROM pgqueuer_log WHERE status = 'successful')",
    )


def _enqueue_batches(queries: SyncQueries, n: int, batch: int) -> None:
    for start in range(0, n, batch):
        numbers = range(start, min(n, start + batch))
        queries.enqueue(
            ["bench_noop"] * len(numbers),
            [json.dumps({"n": i}).encode() for i in numbers],
            [0] * len(numbers),
        )


def fill(url: str, n: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        _enqueue_batches(SyncQueries(SyncPsycopgDriver(conn)), n, 5000)


def enqueue_bulk(url: str, n: int, batch: int) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        queries = SyncQueries(SyncPsycopgDriver(conn))
        started = time.perf_counter()
        _enqueue_batches(queries, n, batch)
        return time.perf_counter() - started


def enqueue_single(url: str, n: int, threads: int) -> float:
    def connect() -> object:
        return psycopg.connect(url, autocommit=True)

    def work(conn: object, numbers: range) -> None:
        assert isinstance(conn, psycopg.Connection)
        with conn:
            queries = SyncQueries(SyncPsycopgDriver(conn))
            for i in numbers:
                queries.enqueue("bench_noop", json.dumps({"n": i}).encode())

    return run_threads(n, threads, connect, work)


@contextlib.asynccontextmanager
async def _queries(url: str) -> AsyncIterator[Queries]:
    """Worker-side queries: the asyncpg pool driver when installed, else psycopg."""
    try:
        import asyncpg
    except ImportError:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            yield Queries.from_psycopg_connection(conn)
        return
    async with asyncpg.create_pool(url, min_size=2, max_size=10) as pool:
        yield Queries.from_asyncpg_pool(pool)


def drain(url: str, n: int, concurrency: int) -> float:
    async def main() -> float:
        async with _queries(url) as queries:
            qm = QueueManager(queries)
            limit = 1 if concurrency == 1 else 0

            @qm.entrypoint("bench_noop", concurrency_limit=limit)
            async def noop(job: Job) -> None:
                json.loads(job.payload or b"{}")

            if concurrency == 1:
                options: dict[str, Any] = {"batch_size": 1}
            else:
                options = {"batch_size": concurrency // 2, "max_concurrent_tasks": concurrency}
            started = time.perf_counter()
            await qm.run(mode=QueueExecutionMode.drain, **options)
            return time.perf_counter() - started

    return asyncio.run(main())


def latency(url: str, n: int, rate: float) -> list[float]:
    recorder = Latencies(n)

    def drive() -> list[float]:
        with psycopg.connect(url, autocommit=True) as conn:
            queries = SyncQueries(SyncPsycopgDriver(conn))

            def send(i: int, sent: float) -> None:
                queries.enqueue("bench_ping", json.dumps({"i": i, "sent": sent}).encode())

            return recorder.drive(rate, send)

    async def main() -> list[float]:
        async with _queries(url) as queries:
            qm = QueueManager(queries)

            @qm.entrypoint("bench_ping")
            async def ping(job: Job) -> None:
                args = json.loads(job.payload or b"{}")
                recorder.record(args["i"], args["sent"])

            worker = asyncio.create_task(qm.run(dequeue_timeout=timedelta(seconds=30)))
            try:
                return await asyncio.to_thread(drive)
            finally:
                qm.shutdown.set()
                await worker

    return asyncio.run(main())
