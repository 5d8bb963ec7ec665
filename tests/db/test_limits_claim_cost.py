"""The cheaper limited claim (migration 0012) keeps every rule of the one it replaced."""

from __future__ import annotations

import psycopg
from jobdb import Conn
from psycopg.types.json import Jsonb

from drover._db.claims import job_claim_limited
from drover._db.limits import limit_declare
from drover.limits import Limit, LimitKey

LEASE = 60.0


def _put(conn: Conn, kinds: list[str], queue: str = "default") -> list[int]:
    ids = []
    for i, kind in enumerate(kinds):
        row = conn.execute(
            "INSERT INTO drover_jobs (kind, queue, args) VALUES (%s, %s, %s) RETURNING id",
            (kind, queue, Jsonb({"i": i})),
        ).fetchone()
        assert row is not None
        ids.append(int(row[0]))
    return ids


def test_the_limited_claim_plans_its_statements_once(conn: Conn) -> None:
    # With plan_cache_mode = auto PostgreSQL planned the candidate walk again
    # on every claim; the function pins generic plans (see migration 0012).
    row = conn.execute(
        "SELECT proconfig FROM pg_proc WHERE proname = 'drover_claim_limited'"
    ).fetchone()
    assert row is not None
    assert "plan_cache_mode=force_generic_plan" in (row[0] or [])


def test_a_refusal_by_one_budget_does_not_spend_another(conn: Conn) -> None:
    # Each job draws on two budgets: the queue's (3) and its kind's (a: 1).
    # The second "a" is refused by its kind; the queue's room it did not
    # take goes to the "b" jobs behind it.
    limit_declare(
        conn,
        [
            (LimitKey("queue", "default"), Limit(concurrency=3)),
            (LimitKey("kind", "a"), Limit(concurrency=1)),
        ],
    )
    ids = _put(conn, ["a", "a", "b", "b", "b"])
    rows, limited, through = job_claim_limited(conn, "default", 10, LEASE, expect_limits=True)
    assert through
    assert [r.id for r in rows] == [ids[0], ids[2], ids[3]]
    assert limited == frozenset({ids[0], ids[2], ids[3]})


def test_one_budget_per_job_admits_the_first_of_each_key_in_claim_order(conn: Conn) -> None:
    limit_declare(conn, [(LimitKey("kind", "a", "i"), Limit(concurrency=1, partition_by="i"))])
    ids = []
    for value in (1, 1, 2, 3, 2, 1):
        row = conn.execute(
            "INSERT INTO drover_jobs (kind, args) VALUES ('a', %s) RETURNING id",
            (Jsonb({"i": value}),),
        ).fetchone()
        assert row is not None
        ids.append(int(row[0]))
    rows, _, _ = job_claim_limited(conn, "default", 10, LEASE, expect_limits=True)
    assert [r.id for r in rows] == [ids[0], ids[2], ids[3]]


def test_a_limit_on_another_kind_neither_locks_nor_waits(conn: Conn, db_url: str) -> None:
    # A kind limit makes every queue's claim limited, but when it applies to
    # no candidate the claim takes no lock: a session holding that limit's
    # lock does not hold the claim up.
    limit_declare(conn, [(LimitKey("kind", "other"), Limit(concurrency=1))])
    _put(conn, ["a", "a"])
    with psycopg.connect(db_url, autocommit=True) as holder:
        holder.execute(
            "SELECT pg_advisory_lock(('drover_limits'::regclass::oid::bigint % 2147483647)::int, "
            "(SELECT id FROM drover_limits))"
        )
        conn.execute("SET lock_timeout = '2s'")
        rows, limited, through = job_claim_limited(conn, "default", 10, LEASE, expect_limits=True)
        assert (len(rows), limited, through) == (2, frozenset(), True)
