"""The limited claim against a real database: what it admits, what it holds back, and races."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from jobdb import Conn
from psycopg.types.json import Jsonb

from drover._db import kernel
from drover._db.claims import job_claim, job_claim_limited
from drover._db.limits import limit_declare
from drover._db.store import Store
from drover.limits import Limit, LimitKey

LEASE = 60.0


def _put(conn: Conn, n: int, kind: str = "a", queue: str = "default", **args: Any) -> list[int]:
    """Insert ``n`` available jobs of ``kind``; ``args`` values may be callables of the index."""
    ids = []
    for i in range(n):
        payload = {k: (v(i) if callable(v) else v) for k, v in args.items()}
        row = conn.execute(
            "INSERT INTO drover_jobs (kind, queue, args) VALUES (%s, %s, %s) RETURNING id",
            (kind, queue, Jsonb(payload)),
        ).fetchone()
        assert row is not None
        ids.append(int(row[0]))
    return ids


def _limit(conn: Conn, key: str, **values: Any) -> None:
    scope, _, rest = key.partition(":")
    target, _, by = rest.partition("[")
    part = by.rstrip("]") or None
    limit_declare(
        conn,
        [(LimitKey(scope, target, part), Limit(partition_by=part, **values))],  # type: ignore[arg-type]
    )


def _finish(conn: Conn, ids: list[int]) -> None:
    conn.execute(
        "UPDATE drover_jobs SET state = 'completed', leased_until = NULL, finalized_at = now() "
        "WHERE id = ANY(%s)",
        (ids,),
    )


def _running(conn: Conn, kind: str | None = None) -> int:
    row = conn.execute(
        "SELECT count(*) FROM drover_jobs "
        "WHERE state = 'running' AND (%s::text IS NULL OR kind = %s)",
        (kind, kind),
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_without_limits_the_claim_takes_the_plain_path(conn: Conn) -> None:
    _put(conn, 3)
    rows, limited, through = job_claim_limited(conn, "default", 10, LEASE)
    assert len(rows) == 3
    assert limited == frozenset()
    assert not through


def test_the_limited_claim_is_correct_without_limits_too(conn: Conn) -> None:
    # A client that saw limits goes straight to the limited claim for a
    # while; if the limits were removed meanwhile it must still claim.
    _put(conn, 3)
    rows, limited, through = job_claim_limited(conn, "default", 10, LEASE, expect_limits=True)
    assert (len(rows), limited, through) == (3, frozenset(), True)


def test_a_kind_concurrency_limit_caps_running_jobs_and_frees_on_completion(conn: Conn) -> None:
    _limit(conn, "kind:a", concurrency=2)
    _put(conn, 5)
    first, limited, through = job_claim_limited(conn, "default", 10, LEASE)
    assert through
    assert len(first) == 2
    assert limited == {r.id for r in first}
    assert job_claim(conn, "default", 10, LEASE) == []
    _finish(conn, [first[0].id])
    again = job_claim(conn, "default", 10, LEASE)
    assert len(again) == 1
    assert _running(conn) == 2


def test_a_limited_kind_at_the_head_does_not_hold_back_the_jobs_behind_it(conn: Conn) -> None:
    _limit(conn, "kind:a", concurrency=1)
    limited_ids = _put(conn, 30, kind="a")
    free_ids = _put(conn, 4, kind="b")
    rows = job_claim(conn, "default", 5, LEASE)
    assert [r.id for r in rows] == [limited_ids[0], *free_ids]


def test_the_claim_keeps_priority_order_under_limits(conn: Conn) -> None:
    _limit(conn, "kind:a", concurrency=10)
    low = _put(conn, 3)
    conn.execute("UPDATE drover_jobs SET priority = 5 WHERE id = %s", (low[2],))
    order = [job_claim(conn, "default", 1, LEASE)[0].id for _ in range(3)]
    assert order == [low[2], low[0], low[1]]


def test_a_partitioned_limit_gives_each_value_its_own_budget(conn: Conn) -> None:
    _limit(conn, "kind:a[tenant]", concurrency=1)
    _put(conn, 3, tenant="x")
    _put(conn, 3, tenant="y")
    _put(conn, 2)  # no tenant field: one shared budget for them
    _put(conn, 2, tenant=7)  # a number is its own value, not the text "7"
    _put(conn, 2, tenant="7")
    rows = job_claim(conn, "default", 20, LEASE)
    values = sorted(repr(r.args.get("tenant")) for r in rows)
    assert values == sorted(["'x'", "'y'", "None", "7", "'7'"])


def test_a_queue_limit_caps_that_queue_only(conn: Conn) -> None:
    _limit(conn, "queue:slow", concurrency=2)
    _put(conn, 5, queue="slow")
    _put(conn, 5, queue="fast")
    assert len(job_claim(conn, "slow", 10, LEASE)) == 2
    assert len(job_claim(conn, "fast", 10, LEASE)) == 5
    assert job_claim(conn, "slow", 10, LEASE) == []


def test_a_kind_limit_counts_running_jobs_in_every_queue(conn: Conn) -> None:
    _limit(conn, "kind:a", concurrency=3)
    _put(conn, 3, queue="q1")
    _put(conn, 3, queue="q2")
    assert len(job_claim(conn, "q1", 10, LEASE)) == 3
    assert job_claim(conn, "q2", 10, LEASE) == []


def test_a_rate_limit_admits_n_per_window_and_more_once_it_slides(conn: Conn) -> None:
    _limit(conn, "kind:a", rate=3, per=60)
    _put(conn, 10)
    first = job_claim(conn, "default", 10, LEASE)
    assert len(first) == 3
    _finish(conn, [r.id for r in first])
    # Finished or not, a start counts for the whole window.
    assert job_claim(conn, "default", 10, LEASE) == []
    # Move the recorded starts out of the window (the database clock decides).
    conn.execute("UPDATE drover_limit_starts SET started_at = started_at - interval '61 seconds'")
    assert len(job_claim(conn, "default", 10, LEASE)) == 3
    # The claim dropped the starts no window needs any more.
    row = conn.execute("SELECT count(*) FROM drover_limit_starts").fetchone()
    assert row == (1,)


def test_concurrency_and_rate_in_one_limit_both_hold(conn: Conn) -> None:
    _limit(conn, "kind:a", concurrency=2, rate=3, per=60)
    _put(conn, 10)
    first = job_claim(conn, "default", 10, LEASE)
    assert len(first) == 2
    _finish(conn, [r.id for r in first])
    assert len(job_claim(conn, "default", 10, LEASE)) == 1  # the rate's third start
    assert _running(conn) == 1


def test_a_rate_binds_even_where_running_jobs_leave_concurrency_room(conn: Conn) -> None:
    _put(conn, 10)
    assert len(job_claim(conn, "default", 2, LEASE)) == 2  # running before the limit existed
    _limit(conn, "kind:a", concurrency=10, rate=3, per=60)
    assert len(job_claim(conn, "default", 10, LEASE)) == 3
    assert _running(conn) == 5


def test_an_override_below_the_running_count_admits_nothing(conn: Conn) -> None:
    _limit(conn, "kind:a", concurrency=5)
    _put(conn, 8)
    assert len(job_claim(conn, "default", 10, LEASE)) == 5
    conn.execute("UPDATE drover_limits SET override_concurrency = 2, overridden_at = now()")
    assert job_claim(conn, "default", 10, LEASE) == []


def test_an_expired_lease_counts_until_the_rescuer_takes_it_back(conn: Conn) -> None:
    _limit(conn, "kind:a", concurrency=1)
    _put(conn, 2)
    (held,) = job_claim(conn, "default", 10, LEASE)
    conn.execute("UPDATE drover_jobs SET leased_until = now() - interval '1 minute'")
    assert job_claim(conn, "default", 10, LEASE) == []
    # The rescuer's outcome: back to waiting.
    conn.execute(
        "UPDATE drover_jobs SET state = 'retryable', leased_until = NULL, scheduled_at = now() "
        "WHERE id = %s",
        (held.id,),
    )
    assert len(job_claim(conn, "default", 10, LEASE)) == 1


def test_a_paused_queue_yields_nothing_under_limits(conn: Conn) -> None:
    _limit(conn, "kind:a", concurrency=5)
    _put(conn, 2)
    conn.execute("INSERT INTO drover_queues (name, paused_at) VALUES ('default', now())")
    assert job_claim(conn, "default", 10, LEASE) == []


def _race(db_url: str, claimers: int, claim: Callable[[Conn], int]) -> list[int]:
    """Run ``claim`` on ``claimers`` connections released at once; what each claimed."""
    conns = [psycopg.connect(db_url, autocommit=True) for _ in range(claimers)]
    barrier = threading.Barrier(claimers)
    got = [0] * claimers
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait(10)
            got[i] = claim(conns[i])
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(claimers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for c in conns:
        c.close()
    assert not errors, errors
    return got


@pytest.mark.parametrize("rounds", [range(6)])
def test_concurrent_claims_never_admit_past_a_concurrency_limit(
    db_url: str, conn: Conn, rounds: range
) -> None:
    _limit(conn, "kind:a", concurrency=3)
    _put(conn, 60)
    for _ in rounds:
        got = _race(db_url, 8, lambda c: len(job_claim(c, "default", 5, LEASE)))
        assert sum(got) == 3, got
        assert _running(conn) == 3
        _finish(
            conn,
            [int(r[0]) for r in conn.execute("SELECT id FROM drover_jobs WHERE state = 'running'")],
        )


def test_concurrent_claims_never_admit_past_a_rate_or_a_partition_budget(
    db_url: str, conn: Conn
) -> None:
    _limit(conn, "kind:a", rate=7, per=3600)
    _limit(conn, "kind:b[k]", concurrency=1)
    _put(conn, 40, kind="a")
    _put(conn, 40, kind="b", k=lambda i: i % 4)
    got = _race(db_url, 8, lambda c: len(job_claim(c, "default", 6, LEASE)))
    assert _running(conn, "a") == 7
    assert _running(conn, "b") == 4
    assert sum(got) == 11
    per_key = conn.execute(
        "SELECT args->>'k', count(*) FROM drover_jobs WHERE state = 'running' AND kind = 'b' "
        "GROUP BY 1"
    ).fetchall()
    assert all(n == 1 for _, n in per_key)


@pytest.mark.parametrize("kind", ["kernel", "engine"])
def test_a_session_that_found_limits_goes_straight_to_the_limited_claim_then_rechecks(
    db_url: str, conn: Conn, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    _limit(conn, "kind:a", concurrency=1)
    _put(conn, 3)
    store = Store.open(db_url, who="test", max_size=2)
    session = store.kernel.claim_session() if kind == "kernel" else store.held("claim")
    gates: kernel.GatesSeen = session._gates

    def through() -> str | None:
        return gates.via("default", time.monotonic())

    try:
        assert len(session.claim("default", 5, LEASE, "t").rows) == 1
        assert through() == "limits"
        conn.execute("DELETE FROM drover_limits")
        # Within the recheck interval: straight to the limited claim, which
        # admits everything now that no limit exists.
        assert len(session.claim("default", 1, LEASE, "t").rows) == 1
        assert through() == "limits"
        monkeypatch.setattr(kernel, "_RECHECK_GATES", 0.0)
        assert len(session.claim("default", 1, LEASE, "t").rows) == 1
        monkeypatch.undo()
        assert through() is None
    finally:
        session.release()
        store.close()
