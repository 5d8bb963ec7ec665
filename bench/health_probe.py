"""What one queue-doctor examination costs on a large jobs table, beside the stats refresh.

    python bench/health_probe.py                    # embedded PostgreSQL, 200,000 jobs
    python bench/health_probe.py --jobs 1000000 --reps 21
    python bench/health_probe.py --database postgresql://127.0.0.1:5432/postgres

A started client runs the examination every ``HealthProbe`` interval (60 s
by default) and the queue-stats read every ``QueueStats`` interval (15 s). This
times both, interleaved, on one scratch database holding ``--jobs`` waiting
jobs over 4 queues and as many completed ones, a few running with expired
leases and the table analysed: median and p90 wall time of each, and the
examination's median as a multiple of the stats read's. See
docs/benchmarks.md, "Queue doctor".
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import psycopg
from _scaffold import scratch_database, server

import drover


def fill(url: str, jobs: int) -> None:
    # Raw SQL, not the client: the bench measures the reads, not the inserts.
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO drover_jobs (kind, queue, args) "
            "SELECT 'bench', 'q' || (i %% 4), '{}'::jsonb FROM generate_series(1, %s) i",
            (jobs,),
        )
        conn.execute(
            "INSERT INTO drover_jobs (kind, queue, args, state, finalized_at) "
            "SELECT 'bench', 'q' || (i %% 4), '{}'::jsonb, 'completed', now() "
            "FROM generate_series(1, %s) i",
            (jobs,),
        )
        conn.execute(
            "UPDATE drover_jobs SET state = 'running', attempt = 1, "
            "leased_until = now() - interval '1 hour' "
            "WHERE id IN (SELECT id FROM drover_jobs WHERE state = 'available' LIMIT 10)"
        )
        conn.execute("ANALYZE")


def timed(fn: object, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append(time.perf_counter() - start)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--database", help="a server URL (default: an embedded PostgreSQL)")
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args(argv)
    with (
        server(args.database) as server_url,
        scratch_database(server_url, "drover_health_bench", migrate=True) as url,
    ):
        fill(url, args.jobs)
        health: list[float] = []
        stats: list[float] = []
        with drover.Inspector(url) as inspector:
            inspector.health()  # warm the pool and the plans
            inspector.stats()
            for _ in range(args.reps):
                health += timed(inspector.health, 1)
                stats += timed(inspector.stats, 1)
            codes = inspector.health().codes()

    def row(name: str, xs: list[float]) -> str:
        xs = sorted(xs)
        p90 = xs[int(0.9 * (len(xs) - 1))]
        return f"{name:<22} median {statistics.median(xs) * 1e3:8.2f} ms   p90 {p90 * 1e3:8.2f} ms"

    print(f"{args.jobs:,} waiting + {args.jobs:,} completed jobs, {args.reps} reps each")
    print(row("examination (health)", health))
    print(row("queue stats read", stats))
    ratio = statistics.median(health) / statistics.median(stats)
    print(f"examination / stats read: {ratio:.2f}x   findings: {', '.join(codes) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
