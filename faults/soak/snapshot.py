"""The soak's two database reads that are not gauges: the latency probe and the final snapshot."""

from __future__ import annotations

import json
import time
from pathlib import Path

import psycopg

import drover
from faults.suite.workload import FaultJob

__all__ = ["probe_latencies", "snapshot"]

_BOTH = "(SELECT * FROM drover_jobs UNION ALL SELECT * FROM soak_archive)"
"""Every job of the run: the live table and what retention pruned from it."""


def probe_latencies(client: drover.Client, dsn: str, count: int) -> list[float]:
    """Enqueue ``count`` single jobs one after another on the idle queue; their claim latencies.

    Each probe is inserted alone and awaited (polled every 2 ms, 10 s at
    most) before the next, so every one meets idle workers: the latency is
    the wake-up and one claim, ``attempted_at - created_at`` on the
    database's clock. A probe not claimed within 10 s raises ``DroverError``.
    """
    latencies: list[float] = []
    with psycopg.connect(dsn, autocommit=True, application_name="soak-probe") as conn:
        for _ in range(count):
            row = client.insert(FaultJob(workload="fast"))
            deadline = time.monotonic() + 10
            while True:
                got = conn.execute(
                    f"SELECT extract(epoch FROM attempted_at - created_at)::float8 FROM {_BOTH} j"
                    " WHERE id = %s AND attempted_at IS NOT NULL",
                    (row.id,),
                ).fetchone()
                if got is not None:
                    latencies.append(float(got[0]))
                    break
                if time.monotonic() > deadline:
                    raise drover.DroverError(f"probe job {row.id} not claimed within 10 s")
                time.sleep(0.002)
    return latencies


def snapshot(dsn: str, path: Path) -> None:
    """Write every job's final row and every effect to ``path`` as the checker's history.

    Streamed through server-side cursors: a million rows never sit in memory
    at once.
    """
    with psycopg.connect(dsn) as conn, path.open("w") as out:
        with conn.cursor(name="soak_jobs") as cur:
            cur.itersize = 10_000
            cur.execute(
                "SELECT id, args->>'workload', state::text, attempt, max_attempts,"
                " extract(epoch FROM finalized_at)::float8, errors, kind, queue, args, ledger"
                f" FROM {_BOTH} j ORDER BY id"
            )
            for r in cur:
                out.write(json.dumps({
                    "ev": "job", "id": r[0], "workload": r[1], "state": r[2], "attempt": r[3],
                    "max_attempts": r[4], "finalized_at": r[5], "errors": r[6], "kind": r[7],
                    "queue": r[8], "args": r[9], "workflow_id": None, "depends_on": [],
                    "ledger": r[10] or [],
                }, separators=(",", ":")) + "\n")  # fmt: skip
        with conn.cursor(name="soak_effects") as cur:
            cur.itersize = 10_000
            cur.execute("SELECT job_id, attempt, pid, t_start, t_end, db_at, tx FROM fault_effects")
            for r in cur:
                out.write(json.dumps({
                    "ev": "effect", "job": r[0], "attempt": r[1], "pid": r[2], "t_start": r[3],
                    "t_end": r[4], "db_at": r[5], "tx": r[6],
                }, separators=(",", ":")) + "\n")  # fmt: skip
