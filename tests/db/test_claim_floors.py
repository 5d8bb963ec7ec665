"""Claims from floors (ADR 0059): a claim's cost stays flat while the MVCC horizon is pinned,
and the floors never lose a job: what they hide, a walk finds."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from jobdb import Conn

from drover._db import floors
from drover._db.floors import ClaimCursors, level_params
from drover._db.queries import query
from drover._db.store import Store
from drover._records import Outcome
from drover.job import JobState

LEASE = 60.0


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    opened = Store.open(db_url, who="test", max_size=4)
    try:
        yield opened
    finally:
        opened.close()


def _put(conn: Conn, n: int, *, ago: str = "1 hour", priority: int = 0) -> list[int]:
    """``n`` waiting jobs due ``ago`` in the past, 10 ms apart, oldest first."""
    rows = conn.execute(
        "INSERT INTO drover_jobs (kind, priority, scheduled_at) "
        "SELECT 'floors', %s, now() - %s::interval + g * interval '10 ms' "
        "FROM generate_series(1, %s) g RETURNING id",
        (priority, ago, n),
    ).fetchall()
    return sorted(r[0] for r in rows)


def _params(levels: list[Any] | None, limit: int) -> dict[str, Any]:
    """``job_claim``'s parameters for a probe of the default queue, carrying no completions."""
    return {
        "queue": "default",
        "limit": limit,
        "lease_seconds": LEASE,
        "holder": "probe",
        "done_ids": "{}",
        "done_attempts": "{}",
        **level_params(levels),
    }


def _buffers(conn: Conn, levels: list[Any] | None, limit: int = 50) -> int:
    """Shared buffers one claim of the default queue touches, claiming nothing for good."""
    with conn.transaction(force_rollback=True):
        plan = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query("job_claim"), _params(levels, limit)
        ).fetchone()
    assert plan is not None
    top = plan[0][0]["Plan"]
    return int(top["Shared Hit Blocks"]) + int(top.get("Shared Read Blocks", 0))


def test_a_claim_costs_the_same_however_many_jobs_ran_under_a_pinned_horizon(
    db_url: str, conn: Conn, store: Store
) -> None:
    conn.execute("ALTER TABLE drover_jobs SET (autovacuum_enabled = false)")
    _put(conn, 12_000)
    # A reader in REPEATABLE READ holds its snapshot: nothing claimed or completed
    # from here on can be vacuumed (nor marked dead in the index by a scan).
    with psycopg.connect(db_url) as pin:
        pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        pin.execute("SELECT count(*) FROM drover_jobs")
        session = store.kernel.claim_session()
        outcomes = store.kernel.outcome_session()
        early: tuple[int, int] | None = None
        for round_ in range(110):
            claimed = session.claim("default", 100, LEASE, "w1")
            assert len(claimed.rows) == 100
            outcomes.record([Outcome(r.id, r.attempt, JobState.COMPLETED) for r in claimed.rows])
            if round_ == 5:
                early = (_buffers(conn, session.cursors.floors("default")), _buffers(conn, None))
        session.release()
        outcomes.release()
        late = (_buffers(conn, session.cursors.floors("default")), _buffers(conn, None))
        pin.rollback()
    assert early is not None
    # From its oldest end, the claim steps over every job claimed since the pin
    # (10 000 more: the test's premise, the cost growing with the jobs run)...
    assert late[1] - early[1] > 200, (early, late)
    # ... from its floor, over the last second's at most.
    assert late[0] - early[0] < 25, (early, late)


@pytest.fixture
def no_timed_walks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Claims walk only on their first claim and when one finds nothing (not on a timer),
    so a test knows which kind of claim runs however slow the machine is."""
    monkeypatch.setattr(floors, "_WALK_EVERY", 3600.0)
    monkeypatch.setattr(floors, "_WALK_WHEN_EMPTY", 3600.0)


@pytest.mark.usefixtures("no_timed_walks")
def test_a_job_committed_late_within_the_margin_is_claimed_from_the_floor(
    conn: Conn, store: Store, db_url: str
) -> None:
    session = store.kernel.claim_session()
    with psycopg.connect(db_url) as late:
        # Its due time is its transaction's start; others are inserted and
        # claimed after it, before it commits.
        late.execute("BEGIN")
        row = late.execute("INSERT INTO drover_jobs (kind) VALUES ('late') RETURNING id").fetchone()
        assert row is not None
        conn.execute("INSERT INTO drover_jobs (kind) SELECT 'early' FROM generate_series(1, 3)")
        assert len(session.claim("default", 3, LEASE, "w1").rows) == 3
        late.commit()
    assert session.cursors.levels("default", time.monotonic()) is not None  # not a walk
    assert [r.id for r in session.claim("default", 10, LEASE, "w1").rows] == [row[0]]
    session.release()


def test_a_job_below_the_floors_is_found_by_a_walk(
    conn: Conn, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(floors, "_WALK_EVERY", 3600.0)
    session = store.kernel.claim_session()
    _put(conn, 3, ago="1 minute")
    assert len(session.claim("default", 3, LEASE, "w1").rows) == 3
    # Another client put a job back due an hour ago: below this claimer's floor.
    (old,) = _put(conn, 1, ago="1 hour")
    (new,) = _put(conn, 1, ago="1 second")
    assert session.cursors.levels("default", time.monotonic()) is not None
    assert [r.id for r in session.claim("default", 1, LEASE, "w1").rows] == [new]
    # A claim that finds nothing from the floors walks (_WALK_WHEN_EMPTY after the last).
    deadline = time.monotonic() + 30
    found: list[int] = []
    while not found:
        assert time.monotonic() < deadline, "no walk found the job below the floor"
        found = [r.id for r in session.claim("default", 1, LEASE, "w1").rows]
    assert found == [old]
    session.release()


def test_a_claim_that_finds_nothing_walks_at_once_to_a_new_level(
    conn: Conn, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(floors, "_WALK_EVERY", 3600.0)
    session = store.kernel.claim_session()
    _put(conn, 2, ago="1 minute")
    assert len(session.claim("default", 2, LEASE, "w1").rows) == 2
    (urgent,) = _put(conn, 1, ago="1 second", priority=7)
    cursors = session.cursors
    deadline = time.monotonic() + 30
    while not cursors.walk_now("default", time.monotonic()):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert cursors.levels("default", time.monotonic()) is not None  # reads level 0 only...
    # ... finds nothing there, and walks in the same call: no wait for a poll.
    assert [r.id for r in session.claim("default", 10, LEASE, "w1").rows] == [urgent]
    assert [p for p, _ in cursors.floors("default")] == [7, 0]
    session.release()


@pytest.mark.usefixtures("no_timed_walks")
def test_a_floored_claim_of_a_paused_or_gated_queue_takes_nothing(conn: Conn, store: Store) -> None:
    session = store.kernel.claim_session()
    _put(conn, 1, ago="1 minute")
    assert len(session.claim("default", 10, LEASE, "w1").rows) == 1
    _put(conn, 1, ago="1 second")
    floors = session.cursors.floors("default")
    conn.execute("INSERT INTO drover_queues (name, paused_at) VALUES ('default', now())")
    assert _claimed(conn, floors) == 0
    conn.execute("UPDATE drover_queues SET paused_at = NULL WHERE name = 'default'")
    conn.execute("INSERT INTO drover_gates (queue, via) VALUES ('default', 'test')")
    # The gate's marker row, and no job.
    assert _claimed(conn, floors) == 0
    conn.execute("DELETE FROM drover_gates")
    assert _claimed(conn, floors) == 1
    session.release()


def _claimed(conn: Conn, levels: list[Any]) -> int:
    with conn.transaction(force_rollback=True):
        rows = conn.execute(query("job_claim"), _params(levels, 10)).fetchall()
    return len([r for r in rows if r[0] is not None])


def test_the_cursors_walk_first_then_now_and_then_never_more_than_their_share() -> None:
    cursors = ClaimCursors()
    assert cursors.levels("q", 0.0) is None
    # A walk of 1 ms at t=1: the next a second later.
    cursors.claimed("q", [], None, 0.999, 1.0)
    floors = cursors.levels("q", 1.5)
    assert floors is not None
    assert cursors.levels("q", 2.0) is None
    # A claim from the floors that found nothing walks at once, from 250 ms after
    # the last walk.
    assert not cursors.claimed("q", [], floors, 1.2, 1.2)
    assert cursors.claimed("q", [], floors, 1.25, 1.25)
    # A slow walk (a pinned horizon): the next waits 50 times as long.
    cursors.claimed("q", [], None, 2.0, 2.4)
    assert cursors.levels("q", 21.9) is not None
    assert not cursors.walk_now("q", 21.9)
    assert cursors.levels("q", 22.4) is None
    cursors.forget()
    assert cursors.levels("q", 3.1) is None


def test_the_floors_are_a_margin_below_the_newest_due_time_claimed_per_level(
    conn: Conn, store: Store
) -> None:
    session = store.kernel.claim_session()
    _put(conn, 2, ago="1 hour")
    _put(conn, 2, ago="2 hours", priority=3)
    rows = session.claim("default", 10, LEASE, "w1").rows
    newest = {p: max(r.scheduled_at for r in rows if r.priority == p) for p in (0, 3)}
    floors = dict(session.cursors.floors("default"))
    assert list(floors) == [3, 0]
    assert {p: (newest[p] - f).total_seconds() for p, f in floors.items()} == {0: 1.0, 3: 1.0}
    session.release()


@pytest.mark.usefixtures("no_timed_walks")
def test_every_claim_session_of_a_store_lowers_its_floors_for_a_retry_due_in_the_past(
    conn: Conn, store: Store
) -> None:
    sessions = [store.kernel.claim_session() for _ in range(2)]
    _put(conn, 2, ago="1 minute")
    (first,) = sessions[0].claim("default", 1, LEASE, "w1").rows
    assert len(sessions[1].claim("default", 1, LEASE, "w2").rows) == 1
    now = time.monotonic()
    assert all(s.cursors.levels("default", now) is not None for s in sessions)
    # This store's completer puts the first job back, due an hour ago: below both floors.
    row = conn.execute("SELECT now() - interval '1 hour'").fetchone()
    assert row is not None
    outcomes = store.kernel.outcome_session()
    outcomes.record([Outcome(first.id, first.attempt, JobState.RETRYABLE, row[0])])
    outcomes.release()
    for s in sessions:
        assert s.cursors.levels("default", time.monotonic()) is None  # a walk comes next
        assert dict(s.cursors.floors("default"))[0] <= row[0]
    assert [r.id for r in sessions[1].claim("default", 1, LEASE, "w2").rows] == [first.id]
    for s in sessions:
        s.release()
