"""The rescuer's sweep and the depth counts under a pinned MVCC horizon (ADR 0059).

Empties ``drover_jobs`` in the database given (a scratch one, migrated), turns its
autovacuum off, puts a backlog of due jobs, pins the horizon with a session idle in
a REPEATABLE READ transaction, then runs jobs through claim, one lease extension
and completion, 100 at a time, with a rescue sweep and a floored depth count after
each round as the rescuer and the stats refresher would. Every ``--every`` jobs it
prints the shared buffers (``EXPLAIN (ANALYZE, BUFFERS)``, rolled back) of: the full
sweep and the floored one (``job_claim_expired``), the full depth count and the
floored one (``stats_depth``), and ``stats_oldest_age`` full and floored.

    PYTHONPATH=src .venv/bin/python bench/horizon_reads.py postgresql://.../scratch

Takes well under a minute for the default 50,000 jobs.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import psycopg

from drover._db import floors, stats, sweeps
from drover._db.queries import query
from drover._db.store import Store
from drover._records import Outcome
from drover.job import JobRow, JobState

LEASE = 2.0
"""Short, so that the leases replaced fall below now() within the run."""
BATCH = 100


def buffers(conn: psycopg.Connection[Any], name: str, params: dict[str, Any]) -> int:
    """Shared buffers (hit and read) of one run of statement ``name``, rolled back."""
    with conn.transaction(force_rollback=True):
        row = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query(name), params
        ).fetchone()
    assert row is not None
    top = row[0][0]["Plan"]
    return int(top["Shared Hit Blocks"]) + int(top.get("Shared Read Blocks", 0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--every", type=int, default=10_000)
    args = parser.parse_args()
    # Floored claims and reads only: the timed walks and full reads would make
    # the figures depend on the machine's speed.
    floors._WALK_EVERY = floors._WALK_WHEN_EMPTY = 3600.0
    sweeps._FULL_AFTER, sweeps._FULL_EVERY = 3600.0, 1_000_000
    with psycopg.connect(args.url, autocommit=True) as conn, psycopg.connect(args.url) as pin:
        conn.execute("TRUNCATE drover_jobs CASCADE")
        conn.execute("ALTER TABLE drover_jobs SET (autovacuum_enabled = false)")
        conn.execute(
            "INSERT INTO drover_jobs (kind, scheduled_at) SELECT 'probe', "
            "now() - interval '1 hour' + g * interval '1 ms' FROM generate_series(1, %s) g",
            (args.jobs + 1_000,),
        )
        conn.execute(
            "INSERT INTO drover_jobs (kind, scheduled_at) SELECT 'later', "
            "now() + interval '1 day' FROM generate_series(1, 500)"
        )
        conn.execute("ANALYZE drover_jobs")
        pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        pin.execute("SELECT count(*) FROM drover_jobs")
        store = Store.open(args.url, who="probe", max_size=4)
        depth = sweeps.DepthFloors()
        try:
            session = store.kernel.claim_session()
            outcomes = store.kernel.outcome_session()
            heads = ("sweep full", "sweep floor", "depth full", "depth floor", "age", "age floor")
            print("jobs run  " + "  ".join(f"{h:>11}" for h in heads))
            done = 0
            while done < args.jobs:
                rows = session.claim("default", BATCH, LEASE, "probe").rows
                store.kernel.extend_leases([(r.id, r.attempt) for r in rows], LEASE, deadline=5)
                outcomes.record([Outcome(r.id, r.attempt, JobState.COMPLETED) for r in rows])
                store.kernel.rescue(BATCH, LEASE, _never, by="probe")
                with store.pool.connection() as own:
                    stats.queue_stats(own, floors=depth)
                done += len(rows)
                if done % args.every == 0:
                    sweep = {"limit": BATCH, "lease_seconds": LEASE}
                    floor = store.kernel.sweeps.next_floor(time.monotonic())
                    figures = (
                        buffers(conn, "job_claim_expired", {**sweep, "floor": None}),
                        buffers(conn, "job_claim_expired", {**sweep, "floor": floor}),
                        buffers(conn, "stats_depth", sweeps.full_depth()),
                        buffers(conn, "stats_depth", depth.params(time.monotonic())),
                        buffers(conn, "stats_oldest_age", {}),
                        buffers(conn, "stats_oldest_age_floored", depth.params(time.monotonic())),
                    )
                    print(f"{done:8}  " + "  ".join(f"{n:>11}" for n in figures), flush=True)
            session.release()
            outcomes.release()
        finally:
            store.close()
            pin.rollback()
            conn.execute("ALTER TABLE drover_jobs RESET (autovacuum_enabled)")


def _never(row: JobRow) -> Outcome:
    raise AssertionError(f"no lease expires here, yet job {row.id} was rescued")


if __name__ == "__main__":
    main()
