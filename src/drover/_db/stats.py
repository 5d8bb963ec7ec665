"""Read-only statistics queries."""

from __future__ import annotations

import time
from datetime import datetime

from psycopg.rows import tuple_row

from drover._db import Connection
from drover._db.errors import translate
from drover._db.namespace import DEFAULT, Namespace
from drover._db.queries import query
from drover._db.sweeps import DepthFloors, full_depth
from drover._records import KindStats, QueueStats

__all__ = [
    "job_counts_by_state",
    "kind_stats",
    "queue_stats",
    "throughput",
]


def job_counts_by_state(conn: Connection, *, ns: Namespace = DEFAULT) -> dict[tuple[str, str], int]:
    """``{(queue, state): count}`` over every job (a sequential scan: not for hot paths)."""
    with translate("count jobs"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("job_counts_by_state", ns))
        return {(q, s): int(n) for q, s, n in cur.fetchall()}


def queue_stats(
    conn: Connection, *, ns: Namespace = DEFAULT, floors: DepthFloors | None = None
) -> QueueStats:
    """Two statements, both served by the partial indexes. With ``floors`` (a long-lived
    reader's, ADR 0059) the depth counts read from where the last left off, and now and
    then in full; without, always in full."""
    params = full_depth() if floors is None else floors.params(time.monotonic())
    with translate("read queue stats"), conn.cursor(row_factory=tuple_row) as cur:
        try:
            cur.execute(query("stats_depth", ns), params)
            rows = cur.fetchall()
        except BaseException:
            if floors is not None:
                floors.forget()
            raise
        if params["full"]:
            cur.execute(query("stats_oldest_age", ns))
        else:
            cur.execute(query("stats_oldest_age_floored", ns), params)
        ages = {q: max(0.0, float(age)) for q, age in cur.fetchall()}
    # One row carries the count's database time (state "now"), in no set place.
    at = next(e for _, s, _, _, e in rows if s == "now")
    counted = [r for r in rows if r[1] != "now"]
    depth: dict[tuple[str, str], int] = {}
    for q, s, _, n, _ in counted:
        depth[(q, s)] = depth.get((q, s), 0) + int(n)
    if floors is not None:
        waiting = [(q, p, e) for q, s, p, _, e in counted if p is not None]
        running = [e for _, s, _, _, e in counted if s == "running"]
        floors.counted(params, at, waiting, min(running, default=None), time.monotonic())
    return QueueStats(depth, ages)


def throughput(
    conn: Connection,
    minutes: int,
    *,
    kind: str | None = None,
    queue: str | None = None,
    ns: Namespace = DEFAULT,
) -> tuple[datetime, dict[tuple[datetime, str], int]]:
    """``(first minute, {(minute, "completed"/"failed"/"dead"): count})``, database clock;
    of ``kind`` and ``queue`` when given."""
    with translate("read throughput"), conn.cursor(row_factory=tuple_row) as cur:
        params = {"minutes": minutes, "kind": kind, "queue": queue}
        cur.execute(query("stats_throughput", ns), params)
        rows = cur.fetchall()
    since = next(m for m, what, _ in rows if what == "since")
    return since, {(m, what): int(n) for m, what, n in rows if what != "since"}


def kind_stats(conn: Connection, minutes: int, *, ns: Namespace = DEFAULT) -> list[KindStats]:
    """Per kind over the last ``minutes``: completed, failed attempts, dead, run-time p50/p95."""
    with translate("read per-kind stats"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("stats_kinds", ns), {"minutes": minutes})
        rows = cur.fetchall()
    return [
        KindStats(
            kind=kind,
            completed=int(completed),
            failed=int(failed),
            dead=int(dead),
            p50_seconds=None if p50 is None else float(p50),
            p95_seconds=None if p95 is None else float(p95),
            cancelled=int(cancelled),
        )
        for kind, completed, failed, dead, p50, p95, cancelled in rows
    ]
