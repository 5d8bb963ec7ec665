"""Drain throughput: drover vs a raw-SQL reference loop, side by side on one server.

    python bench/drain.py                      # embedded PostgreSQL (fsync left on)
    python bench/drain.py --database URL --jobs 20000 --concurrency 10 --reps 3

Each repetition inserts ``--jobs`` no-op jobs with one COPY, then times from the
start of draining until every job is completed. The systems alternate between
repetitions so machine noise hits both; medians are reported, with drover's
ratio to the raw loop. The raw loop is the practical limit: one thread, claim
``--batch`` rows with FOR UPDATE SKIP LOCKED, "run" them (nothing), complete
them with one UPDATE — no pool threads, no bookkeeping.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import threading
import time
from collections.abc import Callable, Iterator

import psycopg

import drover
from drover._db.embedded import embedded_postgres


class Noop(drover.JobArgs, kind="bench_noop"):
    n: int


RAW_CLAIM = """
WITH picked AS (
    SELECT id FROM drover_jobs
    WHERE state IN ('available', 'retryable', 'scheduled') AND queue = 'default'
      AND scheduled_at <= now()
    ORDER BY scheduled_at, id LIMIT %s FOR UPDATE SKIP LOCKED
)
UPDATE drover_jobs j SET state = 'running', attempt = j.attempt + 1,
       leased_until = now() + interval '60 seconds'
FROM picked WHERE j.id = picked.id
RETURNING j.id, j.attempt
"""
RAW_COMPLETE = """
UPDATE drover_jobs j SET state = 'completed', finalized_at = now(), leased_until = NULL
FROM unnest(%s::bigint[], %s::int[]) AS d(id, attempt)
WHERE j.id = d.id AND j.attempt = d.attempt AND j.state = 'running'
"""


def _reset_and_fill(url: str, jobs: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE drover_jobs")
        conn.execute("VACUUM ANALYZE drover_jobs")
    client = drover.Client(url)
    try:
        for start in range(0, jobs, 5000):
            client.insert_many([Noop(n=i) for i in range(start, min(jobs, start + 5000))])
    finally:
        client.close()


def run_raw(url: str, jobs: int, batch: int) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        started = time.perf_counter()
        done = 0
        while done < jobs:
            rows = conn.execute(RAW_CLAIM, (batch,)).fetchall()
            if not rows:
                continue
            conn.execute(RAW_COMPLETE, ([r[0] for r in rows], [r[1] for r in rows]))
            done += len(rows)
        return time.perf_counter() - started


def run_drover(url: str, jobs: int, concurrency: int) -> float:
    finished = threading.Event()
    count = 0
    lock = threading.Lock()
    workers = drover.Workers()

    @workers.register
    def noop(job: drover.Job[Noop]) -> None:
        nonlocal count
        with lock:
            count += 1
            if count == jobs:
                finished.set()

    client = drover.Client(url, drover.Config(workers=workers, concurrency=concurrency))
    started = time.perf_counter()
    client.start()
    finished.wait()
    # Stop flushes the completer: the time includes recording every outcome.
    client.stop()
    elapsed = time.perf_counter() - started
    with psycopg.connect(url) as conn:
        left = conn.execute("SELECT count(*) FROM drover_jobs WHERE state <> 'completed'")
        row = left.fetchone()
        if row is None or row[0] != 0:
            raise SystemExit(f"drover left {row} jobs not completed")
    return elapsed


@contextlib.contextmanager
def _database(url: str | None) -> Iterator[str]:
    if url:
        yield url
    else:
        with embedded_postgres(tune_for_tests=False) as embedded:
            yield embedded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", help="PostgreSQL URL (default: embedded throwaway server)")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--batch", type=int, default=10, help="raw loop claim size")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    with _database(args.database) as url:
        drover.migrate(url)
        systems: dict[str, Callable[[], float]] = {
            "raw SQL loop": lambda: run_raw(url, args.jobs, args.batch),
            "drover": lambda: run_drover(url, args.jobs, args.concurrency),
        }
        times: dict[str, list[float]] = {name: [] for name in systems}
        for rep in range(args.reps):
            for name, run in systems.items():
                _reset_and_fill(url, args.jobs)
                elapsed = run()
                times[name].append(elapsed)
                print(f"rep {rep + 1} {name:>13}: {args.jobs / elapsed:8.0f} jobs/s")
        with psycopg.connect(url) as conn:
            version = conn.execute("SHOW server_version").fetchone()
        print(
            f"\nPostgreSQL {version[0] if version else '?'}, {args.jobs} no-op jobs, "
            f"drover concurrency {args.concurrency}, raw claim batch {args.batch}, "
            f"median of {args.reps}"
        )
        rates = {n: args.jobs / statistics.median(t) for n, t in times.items()}
        for name, rate in rates.items():
            print(f"{name:>13}: {rate:8.0f} jobs/s")
        print(f"drover / raw: {rates['drover'] / rates['raw SQL loop']:.0%}")


if __name__ == "__main__":
    main()
