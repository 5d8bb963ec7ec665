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
