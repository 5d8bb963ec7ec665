"""The rescuer's sweeps and the refresher's depth counts from floors (ADR 0059): their cost
stays flat while the MVCC horizon is pinned, and what a floor hides, a full read finds."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from jobdb import Conn

from drover._db import floors, stats, sweeps
from drover._db.queries import query
from drover._db.store import Store
from drover._records import Outcome
from drover.job import JobRow, JobState

BRIEF = 0.001
"""A lease that is over as soon as it is written: the entries claims and extensions leave
in the lease index lie below now() at once, where a sweep from the oldest end reads."""


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    opened = Store.open(db_url, who="test", max_size=4)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def no_margin(monkeypatch: pytest.MonkeyPatch) -> None:
    """Floors at the last read's time itself, so that what a floored read steps over is
    what ran since that read, not the last second's work (which depends on the machine)."""
    monkeypatch.setattr(sweeps, "_MARGIN", timedelta(0))
    monkeypatch.setattr(floors, "_WALK_EVERY", 3600.0)
    monkeypatch.setattr(floors, "_WALK_WHEN_EMPTY", 3600.0)


def _buffers(conn: Conn, name: str, params: dict[str, Any]) -> int:
    """Shared buffers one run of ``name`` touches, rolled back."""
    with conn.transaction(force_rollback=True):
        plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query(name), params)
        row = plan.fetchone()
    assert row is not None
    top = row[0][0]["Plan"]
    return int(top["Shared Hit Blocks"]) + int(top.get("Shared Read Blocks", 0))


def _sweep(conn: Conn, floor: Any) -> int:
    return _buffers(conn, "job_claim_expired", {"limit": 100, "lease_seconds": 60, "floor": floor})


def _fail(row: JobRow) -> Outcome:
    error = {"attempt": row.attempt, "at": "2026-01-01T00:00:00+00:00", "error": "lost"}
    return Outcome(row.id, row.attempt, JobState.RETRYABLE, None, error={**error, "trace": None})


def _run(store: Store, rounds: int, each: Any) -> None:
    """``rounds`` of: claim 100 with a brief lease, extend it, complete them; then ``each()``."""
    session = store.kernel.claim_session()
    outcomes = store.kernel.outcome_session()
    for _ in range(rounds):
        rows = session.claim("default", 100, BRIEF, "w1").rows
        assert len(rows) == 100
        store.kernel.extend_leases([(r.id, r.attempt) for r in rows], BRIEF, deadline=5.0)
        outcomes.record([Outcome(r.id, r.attempt, JobState.COMPLETED) for r in rows])
        each()
    session.release()
    outcomes.release()


def _pinned(conn: Conn, db_url: str, jobs: int) -> psycopg.Connection[Any]:
    """``jobs`` due jobs, and a REPEATABLE READ snapshot held from here on: nothing claimed
    or completed after can be vacuumed (nor its index entries marked dead by a scan)."""
    conn.execute("ALTER TABLE drover_jobs SET (autovacuum_enabled = false)")
    conn.execute(
        "INSERT INTO drover_jobs (kind, scheduled_at) SELECT 'sweeps', "
        "now() - interval '1 hour' + g * interval '10 ms' FROM generate_series(1, %s) g",
        (jobs,),
    )
    pin = psycopg.connect(db_url)
    pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    pin.execute("SELECT count(*) FROM drover_jobs")
    return pin


@pytest.mark.usefixtures("no_margin")
def test_a_sweep_costs_the_same_however_many_jobs_ran_under_a_pinned_horizon(
    db_url: str, conn: Conn, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sweeps, "_FULL_EVERY", 1_000_000)
    monkeypatch.setattr(sweeps, "_FULL_AFTER", 3600.0)
    with _pinned(conn, db_url, 12_000) as pin:
        kernel = store.kernel
        _run(store, 5, lambda: kernel.rescue(100, 60, _fail, by="rescuer"))
        early = (_sweep(conn, kernel.sweeps.floor), _sweep(conn, None))
        _run(store, 100, lambda: kernel.rescue(100, 60, _fail, by="rescuer"))
        late = (_sweep(conn, kernel.sweeps.floor), _sweep(conn, None))
        pin.rollback()
    assert kernel.sweeps.floor is not None
    # From the lease index's oldest end, a sweep steps over every lease written
    # since the pin (10,000 more jobs, each claimed and extended)...
    assert late[1] - early[1] > 200, (early, late)
    # ... from its floor, over those written since the last sweep.
    assert late[0] - early[0] < 25, (early, late)


def test_a_lease_locked_below_the_floor_is_found_by_the_next_full_sweep(
    db_url: str, conn: Conn, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sweeps, "_FULL_EVERY", 2)
    monkeypatch.setattr(sweeps, "_FULL_AFTER", 3600.0)
    inserted = conn.execute("INSERT INTO drover_jobs (kind) VALUES ('lost') RETURNING id")
    (job,) = inserted.fetchone() or ()
    session = store.kernel.claim_session()
    (row,) = session.claim("default", 1, 60, "w1").rows
    session.release()
    # The worker died long ago: its lease lapsed an hour before the sweeps below.
    conn.execute(
        "UPDATE drover_jobs SET leased_until = now() - interval '1 hour' WHERE id = %s", (job,)
    )
    kernel = store.kernel
    with psycopg.connect(db_url) as locker:
        # Held by someone (a completion, say) that will roll back: every sweep skips it.
        locker.execute("SELECT 1 FROM drover_jobs WHERE id = %s FOR UPDATE", (job,))
        assert kernel.sweeps.next_floor(time.monotonic()) is None
        assert kernel.rescue(10, 60, _fail, by="rescuer") == (0, [])  # full: skipped, locked
        floor = kernel.sweeps.floor
        assert floor is not None
        locker.rollback()
    # Below the floor now, and no longer locked: the floored sweeps do not read it...
    for _ in range(2):
        assert kernel.sweeps.next_floor(time.monotonic()) is not None
        assert kernel.rescue(10, 60, _fail, by="rescuer") == (0, [])
    # ... the full sweep after _FULL_EVERY floored ones does.
    assert kernel.sweeps.next_floor(time.monotonic()) is None
    found, (recorded,) = kernel.rescue(10, 60, _fail, by="rescuer")
    assert (found, recorded.outcome.id, recorded.outcome.attempt) == (1, job, row.attempt)
    state = conn.execute("SELECT state::text FROM drover_jobs WHERE id = %s", (job,)).fetchone()
    assert state == ("retryable",)


def test_a_sweep_that_reached_its_limit_does_not_move_the_floor(
    conn: Conn, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sweeps, "_FULL_AFTER", 3600.0)
    conn.execute("INSERT INTO drover_jobs (kind) SELECT 'lost' FROM generate_series(1, 3)")
    session = store.kernel.claim_session()
    assert len(session.claim("default", 3, 60, "w1").rows) == 3
    session.release()
    conn.execute("UPDATE drover_jobs SET leased_until = now() - interval '1 hour'")
    kernel = store.kernel
    # A full sweep that stops at its limit leaves the next one full...
    assert kernel.rescue(2, 60, _fail, by="rescuer")[0] == 2
    assert kernel.sweeps.floor is None
    assert kernel.sweeps.next_floor(time.monotonic()) is None
    # ... which takes the rest, and sets the floor.
    assert kernel.rescue(2, 60, _fail, by="rescuer")[0] == 1
    floor = kernel.sweeps.floor
    assert floor is not None
    # A floored sweep that stops at its limit keeps that floor.
    conn.execute("INSERT INTO drover_jobs (kind) SELECT 'lost' FROM generate_series(1, 3)")
    session = store.kernel.claim_session()
    assert len(session.claim("default", 3, BRIEF, "w1").rows) == 3
    session.release()
    _poll_expired(conn, 3)
    assert kernel.rescue(2, 60, _fail, by="rescuer")[0] == 2
    assert kernel.sweeps.floor == floor
    assert kernel.rescue(2, 60, _fail, by="rescuer")[0] == 1
    later = kernel.sweeps.floor
    assert later is not None and later > floor


def _poll_expired(conn: Conn, n: int) -> None:
    """Wait (with a deadline) until ``n`` running jobs' leases are over on the database clock."""
    deadline = time.monotonic() + 30
    while True:
        row = conn.execute(
            "SELECT count(*) FROM drover_jobs WHERE state = 'running' AND leased_until <= now()"
        ).fetchone()
        if row == (n,):
            return
        assert time.monotonic() < deadline, f"{row} of {n} leases over"


def test_a_failed_sweep_makes_the_next_full(conn: Conn, store: Store) -> None:
    kernel = store.kernel
    assert kernel.rescue(10, 60, _fail, by="rescuer") == (0, [])
    assert kernel.sweeps.next_floor(time.monotonic()) is not None
    conn.execute("INSERT INTO drover_jobs (kind) VALUES ('lost')")
    session = kernel.claim_session()
    session.claim("default", 1, BRIEF, "w1")
    session.release()
    _poll_expired(conn, 1)

    def refuse(row: JobRow) -> Outcome:
        raise RuntimeError("the decision failed")

    with pytest.raises(RuntimeError):
        kernel.rescue(10, 60, refuse, by="rescuer")
    assert kernel.sweeps.floor is None
    assert kernel.rescue(10, 60, _fail, by="rescuer")[0] == 1


# --- the depth counts -------------------------------------------------------------------------


@pytest.mark.usefixtures("no_margin")
def test_a_floored_depth_count_costs_the_same_however_many_jobs_ran_under_a_pinned_horizon(
    db_url: str, conn: Conn, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sweeps, "_FULL_EVERY", 1_000_000)
    monkeypatch.setattr(sweeps, "_FULL_AFTER", 3600.0)
    depth = sweeps.DepthFloors()

    def refresh() -> None:
        with store.pool.connection() as own:
            stats.queue_stats(own, floors=depth)

    def refill_and_refresh() -> None:
        # As many jobs put as run: the backlog, whose every entry a count reads, stays
        # the same, and only the entries left behind by the jobs run grow.
        conn.execute("INSERT INTO drover_jobs (kind) SELECT 'new' FROM generate_series(1, 100)")
        refresh()

    def measure() -> tuple[int, int]:
        floored = depth.params(time.monotonic())
        assert floored["full"] is False
        return _buffers(conn, "stats_depth", floored), _buffers(
            conn, "stats_depth", sweeps.full_depth()
        )

    with _pinned(conn, db_url, 2_000) as pin:
        # Jobs due later at another level, and three running under a long lease in
        # another queue, counted throughout.
        conn.execute(
            "INSERT INTO drover_jobs (kind, priority, state, scheduled_at) SELECT 'later', 3, "
            "'scheduled', now() + interval '1 day' FROM generate_series(1, 50)"
        )
        conn.execute(
            "INSERT INTO drover_jobs (kind, queue) SELECT 'long', 'long' FROM generate_series(1, 3)"
        )
        session = store.kernel.claim_session()
        assert len(session.claim("long", 3, 600, "w2").rows) == 3
        session.release()
        refresh()
        _run(store, 5, refill_and_refresh)
        early = measure()
        _run(store, 100, refill_and_refresh)
        late = measure()
        with store.pool.connection() as own:
            floored = stats.queue_stats(own, floors=depth)
            exact = stats.queue_stats(own)
        pin.rollback()
    # Counting every entry, a full count steps over every job run since the pin
    # (10,000 more)...
    assert late[1] - early[1] > 200, (early, late)
    # ... counting each level from its floor, over those run since the last count.
    assert late[0] - early[0] < 25, (early, late)
    assert floored.depth == exact.depth
    assert exact.depth == {
        ("default", "available"): 2_000,
        ("default", "scheduled"): 50,
        ("long", "running"): 3,
    }
    assert floored.oldest_age.keys() == exact.oldest_age.keys() == {"default"}
    assert abs(floored.oldest_age["default"] - exact.oldest_age["default"]) < 60


def test_a_job_below_a_depth_floor_is_counted_by_the_next_full_count(
    conn: Conn, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sweeps, "_FULL_EVERY", 2)
    monkeypatch.setattr(sweeps, "_FULL_AFTER", 3600.0)
    depth = sweeps.DepthFloors()
    conn.execute("INSERT INTO drover_jobs (kind) SELECT 'now' FROM generate_series(1, 2)")

    def count() -> dict[tuple[str, str], int]:
        with store.pool.connection() as own:
            return stats.queue_stats(own, floors=depth).depth

    assert count() == {("default", "available"): 2}  # full
    # A job written due an hour ago (an explicit past due time): below the floor.
    conn.execute(
        "INSERT INTO drover_jobs (kind, scheduled_at) VALUES ('past', now() - interval '1 hour')"
    )
    conn.execute("INSERT INTO drover_jobs (kind, queue) VALUES ('new', 'fresh')")
    for _ in range(2):
        assert depth.params(time.monotonic())["full"] is False
        assert count() == {("default", "available"): 2}
    assert depth.params(time.monotonic())["full"] is True
    assert count() == {("default", "available"): 3, ("fresh", "available"): 1}
    with store.pool.connection() as own:
        assert stats.queue_stats(own).depth == count()
