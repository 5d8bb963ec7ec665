"""Drain speed next to a large history of finished rows, with and without retention.

    python bench/table_health.py [--database URL] [--history 1000000] [--jobs 20000]

Three drains of ``--jobs`` no-op jobs at concurrency 10, on one server:
(1) an empty table; (2) ``--history`` completed rows left in the table (as if
nothing were ever pruned); (3) the same history after a started client's
pruner deleted it (retention 0 s, so everything finished is old enough), plus
the VACUUM autovacuum would run. Prints jobs/s and the ratio to the empty table.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Iterator

import psycopg

import drover
from drover._bench import run_bench
from drover._db.embedded import embedded_postgres


class History(drover.JobArgs, kind="history"):
    n: int


def _history(url: str, rows: int) -> None:
    client = drover.Client(url, drover.Config(notify=False))
    try:
        for start in range(0, rows, 10_000):
            client.insert_many(
                [
                    (History(n=i), drover.InsertOpts(queue="history"))
                    for i in range(start, min(rows, start + 10_000))
                ]
            )
    finally:
        client.close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE drover_jobs SET state = 'completed', finalized_at = now() - interval '2 days' "
            "WHERE queue = 'history'"
        )
        conn.execute("VACUUM ANALYZE drover_jobs")


def _prune(url: str) -> float:
    started = time.perf_counter()
    client = drover.Client(
        url,
        drover.Config(
            plugins=[drover.plugins.Pruner(retention=drover.Retention(completed=0), interval=0.05)],
            queues={"none": 1},
        ),
    )
    client.start()
    with psycopg.connect(url, autocommit=True) as conn:
        while conn.execute(
            "SELECT count(*) FROM drover_jobs WHERE queue = 'history'"
        ).fetchone() != (0,):
            time.sleep(0.2)
        client.stop()
        conn.execute("VACUUM ANALYZE drover_jobs")
    return time.perf_counter() - started


@contextlib.contextmanager
def _database(url: str | None) -> Iterator[str]:
    if url:
        yield url
    else:
        with embedded_postgres(tune_for_tests=False) as embedded:
            yield embedded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database")
    parser.add_argument("--history", type=int, default=1_000_000)
    parser.add_argument("--jobs", type=int, default=20_000)
    args = parser.parse_args()
    with _database(args.database) as url:
        drover.migrate(url)

        def drain() -> float:
            return run_bench(
                url, mode="drain", jobs=args.jobs, concurrency=10, batch=5000, queues=1
            ).jobs_per_second

        empty = drain()
        print(f"empty table:                   {empty:8.0f} jobs/s")
        started = time.perf_counter()
        _history(url, args.history)
        print(f"(planted {args.history} completed rows in {time.perf_counter() - started:.0f}s)")
        full = drain()
        print(
            f"{args.history} completed rows kept: {full:8.0f} jobs/s ({full / empty:.0%} of empty)"
        )
        pruned_in = _prune(url)
        print(f"(pruner deleted the history in {pruned_in:.0f}s)")
        pruned = drain()
        print(
            f"after pruning:                 {pruned:8.0f} jobs/s ({pruned / empty:.0%} of empty)"
        )


if __name__ == "__main__":
    main()
