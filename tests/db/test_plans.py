"""Plan guards: the hot fenced writes find their rows by primary key, whatever the statistics say.

A burst into a table whose planner statistics still say "empty" (never
analyzed, as after a quiet period) once made the completion pick the partial
lease index, whose dead entries grow with every completed job: the drain ran
at two thirds of its speed until autovacuum analyzed the table
(``drover bench --mode burst`` measures it). These tests build that state and
read the plans.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from jobdb import Conn
from psycopg import ClientCursor

import drover
from drover._db.queries import query

RUNNING = list(range(1951, 2001))


class Burst(drover.JobArgs, kind="plan_burst"):
    pass


@pytest.fixture
def burst(db_url: str, conn: Conn) -> Conn:
    conn.execute("ALTER TABLE drover_jobs SET (autovacuum_enabled = false)")
    client = drover.Client(db_url)
    try:
        client.insert_many([Burst() for _ in range(2000)])
    finally:
        client.close()
    # 1950 jobs run and complete (each leaving a dead entry in the lease index), 50 run now.
    for low in range(0, 1950, 390):
        conn.execute(
            "UPDATE drover_jobs SET state = 'running', attempt = 1, "
            "leased_until = now() + interval '1 minute' WHERE id > %s AND id <= %s",
            (low, low + 390),
        )
        conn.execute(
            "UPDATE drover_jobs SET state = 'completed', leased_until = NULL, finalized_at = now() "
            "WHERE id > %s AND id <= %s",
            (low, low + 390),
        )
    conn.execute(
        "UPDATE drover_jobs SET state = 'running', attempt = 1, "
        "leased_until = now() + interval '1 minute' WHERE id >= 1951"
    )
    analyzed = conn.execute(
        "SELECT last_analyze, last_autoanalyze FROM pg_stat_user_tables "
        "WHERE relname = 'drover_jobs'"
    ).fetchone()
    assert analyzed == (None, None), "the table must never have been analyzed"
    return conn


def _indexes(conn: Conn, name: str, params: Any) -> set[str]:
    conn.execute("BEGIN")
    try:
        row = conn.execute("EXPLAIN (FORMAT JSON) " + query(name), params).fetchone()
    finally:
        conn.execute("ROLLBACK")
    assert row is not None
    found: set[str] = set()

    def walk(node: dict[str, Any]) -> None:
        if "Index Name" in node:
            found.add(node["Index Name"])
        for child in node.get("Plans", []):
            walk(child)

    plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
    walk(plan[0]["Plan"])
    return found


def _array(values: list[int]) -> str:
    return "{" + ",".join(map(str, values)) + "}"


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("job_complete", {"ids": _array(RUNNING), "attempts": _array([1] * 50)}),
        (
            "job_record",
            {
                "ids": RUNNING,
                "attempts": [1] * 50,
                "states": ["retryable"] * 50,
                "scheduled_at": [None] * 50,
                "errors": [None] * 50,
                "refund_attempt": [False] * 50,
            },
        ),
        (
            "job_complete_many",
            {"ids": _array(RUNNING), "attempts": _array([1] * 50), "results": "{}"},
        ),
        (
            "job_record_outcomes",
            {
                "ids": RUNNING,
                "attempts": [1] * 50,
                "states": ["retryable"] * 50,
                "scheduled_at": [None] * 50,
                "errors": [None] * 50,
                "refund_attempt": [False] * 50,
                "results": "{}",
            },
        ),
        ("job_extend_leases", {"ids": RUNNING, "attempts": [1] * 50, "lease_seconds": 60}),
    ],
)
def test_fenced_writes_use_the_primary_key_on_a_never_analyzed_table(
    burst: Conn, name: str, params: Any
) -> None:
    used = _indexes(burst, name, params)
    assert "drover_jobs_lease_idx" not in used, used
    assert "drover_jobs_pkey" in used, used


def _generic_plan(conn: Conn, name: str, params: dict[str, Any]) -> dict[str, Any]:
    """The statement's generic plan (as a prepared statement's, once cached), as JSON."""
    text = query(name)
    args = []
    for n, key in enumerate(params, 1):
        text = text.replace(f"%({key})s", f"${n}")
        args.append(params[key])
    conn.execute("BEGIN")
    try:
        conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        conn.execute("PREPARE generic_plan AS " + text)
        try:
            row = (
                ClientCursor(conn)
                .execute(
                    "EXPLAIN (FORMAT JSON) EXECUTE generic_plan("
                    + ", ".join(f"%s::{t}" for t in _RECORD_TYPES)
                    + ")",
                    args,
                )
                .fetchone()
            )
        finally:
            conn.execute("DEALLOCATE generic_plan")
    finally:
        conn.execute("ROLLBACK")
    assert row is not None
    plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
    return dict(plan[0]["Plan"])


# job_record's CTEs with a row per outcome (its map, "outcome", is one row).
_BATCH_CTES = ("input", "updated")
_RECORD_TYPES = ("bigint[]", "int[]", "text[]", "timestamptz[]", "jsonb[]", "bool[]")


def _rescans_the_batch(node: dict[str, Any]) -> list[str]:
    """Nested loops whose inner side reads the batch again per row: unnest, or a CTE of it."""
    found: list[str] = []

    def reads_batch(n: dict[str, Any]) -> bool:
        if n.get("Node Type") == "Function Scan" or n.get("CTE Name") in _BATCH_CTES:
            return True
        return any(reads_batch(c) for c in n.get("Plans", []))

    def walk(n: dict[str, Any]) -> None:
        if n.get("Node Type") == "Nested Loop":
            inner = [c for c in n.get("Plans", []) if c.get("Parent Relationship") == "Inner"]
            if any(reads_batch(c) for c in inner):
                found.append(json.dumps(n)[:300])
        for c in n.get("Plans", []):
            walk(c)

    walk(node)
    return found


@pytest.mark.parametrize("analyzed", [False, True])
def test_job_record_never_rescans_its_batch_per_row(burst: Conn, analyzed: bool) -> None:
    """The generic plan of job_record stays linear in the batch (ADR 0056, amendment).

    Joined to unnest(), it was a nested loop that unnested the whole batch again
    for every row: quadratic. Read from the plan's shape, never from a timing.
    """
    if analyzed:
        burst.execute("ANALYZE drover_jobs")
    params = {
        "ids": RUNNING,
        "attempts": [1] * 50,
        "states": ["retryable"] * 50,
        "scheduled_at": [None] * 50,
        "errors": [None] * 50,
        "refund_attempt": [False] * 50,
    }
    plan = _generic_plan(burst, "job_record", params)
    assert _rescans_the_batch(plan) == []
    assert "drover_jobs_pkey" in json.dumps(plan)
