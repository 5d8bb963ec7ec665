"""Where a drain's time goes: the worker's CPU per job and the server's time per statement.

    python bench/drain_profile.py --jobs 20000 --concurrency 10
    PYTHONPATH=../baseline/src python bench/drain_profile.py --concurrency 50
    python bench/drain_profile.py --memory --jobs 30000 --concurrency 50

With the database (the default): an embedded PostgreSQL that preloads
``pg_stat_statements`` (fsync on), ``--jobs`` no-op jobs inserted by COPY, the
statistics reset, then the drain of ``bench/peers/drover_queue.py`` (a sync
no-op worker, ``Config(concurrency=C)``). Prints the rate, this process's CPU
per job (``time.process_time()`` around the drain: every thread, user and
system) and, per statement, the server's execution time per job and per call
and the rows per call, the costliest first.

``--memory``: the kernel alone, on ``drover._kernel.memory.MemoryStore``, with
a handler that only counts: the kernel's own client CPU per job, without
psycopg, the handler chain or a server sharing the cores.

Run it twice, with ``PYTHONPATH`` pointing at another source tree for the
baseline, to compare (docs/benchmarks.md, "Where the drain's time went").
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

STATEMENTS = """
SELECT calls, total_exec_time, rows, left(regexp_replace(query, '\\s+', ' ', 'g'), 70)
FROM pg_stat_statements WHERE query NOT LIKE '%%pg_stat_statements%%'
ORDER BY total_exec_time DESC LIMIT %s
"""


def with_database(jobs: int, concurrency: int, reps: int, top: int) -> None:
    import psycopg
    from peers import drover_queue

    from drover._db.embedded import embedded_postgres

    with embedded_postgres(tune_for_tests=False, preload=["pg_stat_statements"]) as url:
        drover_queue.setup(url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        for rep in range(reps):
            drover_queue.reset(url)
            drover_queue.fill(url, jobs)
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("ANALYZE")
                conn.execute("SELECT pg_stat_statements_reset()")
            before = time.process_time()
            seconds = drover_queue.drain(url, jobs, concurrency)
            cpu = time.process_time() - before
            print(
                f"rep {rep + 1}: c{concurrency} {jobs / seconds:,.0f} jobs/s, "
                f"worker CPU {cpu / jobs * 1e6:.1f} µs/job"
            )
            with psycopg.connect(url, autocommit=True) as conn:
                rows = conn.execute(STATEMENTS, (top,)).fetchall()
            for calls, total_ms, returned, text in rows:
                per_call = total_ms * 1000 / max(calls, 1)
                print(
                    f"  {total_ms * 1000 / jobs:7.1f} µs/job {per_call:8.1f} µs/call "
                    f"{calls:6d} calls {returned / max(calls, 1):6.1f} rows/call  {text}"
                )


def _counter(jobs: int) -> tuple[threading.Event, Any]:
    """An event set once ``handle`` has run ``jobs`` times, and ``handle``."""
    done = threading.Event()
    lock = threading.Lock()
    count = 0

    def handle(ctx: Any, row: Any) -> None:
        nonlocal count
        with lock:
            count += 1
            if count == jobs:
                done.set()

    return done, handle


def in_memory(jobs: int, concurrency: int, reps: int) -> None:
    from drover._kernel.claims import InFlight, Slots
    from drover._kernel.engine import Kernel
    from drover._kernel.kit import Hooks, Kit, Settings
    from drover._kernel.memory import MemoryStore
    from drover._records import JobInsertParams

    class NoRetry:
        def next_retry(self, row: Any) -> Any:
            raise AssertionError("a no-op job does not fail")

    for rep in range(reps):
        store = MemoryStore()
        for _ in range(jobs):
            store.insert(JobInsertParams("noop", "default", "{}", 5, None, None, 0))
        done, handle = _counter(jobs)
        settings = Settings(
            concurrency=concurrency,
            poll_interval=1.0,
            lease_seconds=60.0,
            heartbeat_interval=30.0,
            rescue_interval=30.0,
            retry_policy=NoRetry(),
        )
        kit = Kit(
            store=store,
            settings=settings,
            inflight=InFlight(),
            slots=Slots(concurrency),
            client_id="profile",
            hooks=Hooks(),
        )
        kernel = Kernel(kit, chain=handle)
        before, started = time.process_time(), time.perf_counter()
        kernel.start()
        done.wait()
        kernel.stop(10)
        cpu, seconds = time.process_time() - before, time.perf_counter() - started
        print(
            f"rep {rep + 1}: memory c{concurrency} {jobs / seconds:,.0f} jobs/s, "
            f"kernel CPU {cpu / jobs * 1e6:.1f} µs/job"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--top", type=int, default=4, help="statements shown (default 4)")
    parser.add_argument("--memory", action="store_true", help="the kernel alone, no database")
    args = parser.parse_args()
    if args.memory:
        in_memory(args.jobs, args.concurrency, args.reps)
    else:
        with_database(args.jobs, args.concurrency, args.reps, args.top)


if __name__ == "__main__":
    main()
