"""Dependencies in the statements: release and cascade under concurrent transactions (ADR 0029)."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from jobdb import Conn

from drover._db.claims import job_claim, job_record_outcomes
from drover._db.graph import job_insert_graph
from drover._records import EncodedGraph, JobInsertParams, Outcome
from drover.errors import InvalidInsertOpts
from drover.job import JobRow, JobState

LEASE = 60.0
ERROR = {"attempt": 1, "at": "2026-01-01T00:00:00Z", "error": "boom"}


def _params(n: int) -> list[JobInsertParams]:
    return [JobInsertParams("dep", "default", "{}", 25, None, None, 0) for _ in range(n)]


def _graph(n: int, edges: list[tuple[int, int]], external: list[tuple[int, int]]) -> EncodedGraph:
    return EncodedGraph(_params(n), edges, external, workflow=True)


def _state(conn: Conn, job_id: int) -> tuple[str, int]:
    row = conn.execute(
        "SELECT state::text, pending_deps FROM drover_jobs WHERE id = %s", (job_id,)
    ).fetchone()
    assert row is not None
    return str(row[0]), int(row[1])


def _claim_all(conn: Conn) -> dict[int, JobRow]:
    return {r.id: r for r in job_claim(conn, "default", 100, LEASE)}


def _done(row: JobRow, state: JobState = JobState.COMPLETED) -> Outcome:
    error = None if state is JobState.COMPLETED else ERROR
    return Outcome(row.id, row.attempt, state, error=error)


def test_siblings_completing_in_concurrent_transactions_release_the_callback_once(
    db_url: str, conn: Conn
) -> None:
    (a, b, cb), _ = job_insert_graph(conn, _graph(3, [(2, 0), (2, 1)], []), notify=False)
    claimed = _claim_all(conn)
    assert set(claimed) == {a.id, b.id}
    with psycopg.connect(db_url) as t1, psycopg.connect(db_url) as t2:
        job_record_outcomes(t1, [_done(claimed[a.id])])
        # t2's completion waits for nothing of t1's (different rows) but its
        # release of the callback waits for t1's decrement: the row lock
        # orders the two, and each counts one off.
        done = threading.Event()

        def second() -> None:
            job_record_outcomes(t2, [_done(claimed[b.id])])
            t2.commit()
            done.set()

        thread = threading.Thread(target=second)
        thread.start()
        assert not done.wait(0.3)  # blocked on t1's lock of the callback row
        t1.commit()
        thread.join(10)
    assert _state(conn, cb.id) == ("available", 0)


def test_a_dependent_inserted_while_its_dependency_completes_is_released(
    db_url: str, conn: Conn
) -> None:
    (parent,), _ = job_insert_graph(conn, _graph(1, [], []), notify=False)
    (claimed,) = job_claim(conn, "default", 1, LEASE)
    with psycopg.connect(db_url) as inserting:
        # The insert locks the running dependency and counts it as pending...
        (child,), _ = job_insert_graph(inserting, _graph(1, [], [(0, parent.id)]), notify=False)
        assert child.state is JobState.PENDING
        finished = threading.Event()

        def complete() -> None:
            with psycopg.connect(db_url, autocommit=True) as worker:
                job_record_outcomes(worker, [_done(claimed)])
            finished.set()

        thread = threading.Thread(target=complete)
        thread.start()
        # ...so the completion waits for the insert to commit, then sees the
        # new edge (a fresh snapshot in drover_release_dependents).
        assert not finished.wait(0.3)
        inserting.commit()
        thread.join(10)
    assert finished.is_set()
    assert _state(conn, child.id) == ("available", 0)


def test_a_dependent_inserted_after_its_dependency_completed_is_available_at_once(
    db_url: str, conn: Conn
) -> None:
    (parent,), _ = job_insert_graph(conn, _graph(1, [], []), notify=False)
    (claimed,) = job_claim(conn, "default", 1, LEASE)
    with psycopg.connect(db_url) as completing:
        job_record_outcomes(completing, [_done(claimed)])
        result: list[Any] = []

        def insert() -> None:
            with psycopg.connect(db_url) as inserting:
                rows, _ = job_insert_graph(inserting, _graph(1, [], [(0, parent.id)]), notify=False)
                result.extend(rows)

        thread = threading.Thread(target=insert)
        thread.start()
        thread.join(0.3)
        assert thread.is_alive()  # waits for the completion's row lock
        completing.commit()
        thread.join(10)
    (child,) = result
    assert child.state is JobState.AVAILABLE
    assert _state(conn, child.id) == ("available", 0)


def test_a_dependency_that_dies_while_a_dependent_is_inserted_cancels_it(
    db_url: str, conn: Conn
) -> None:
    (parent,), _ = job_insert_graph(conn, _graph(1, [], []), notify=False)
    (claimed,) = job_claim(conn, "default", 1, LEASE)
    with psycopg.connect(db_url) as inserting:
        (child,), _ = job_insert_graph(inserting, _graph(1, [], [(0, parent.id)]), notify=False)

        def fail() -> None:
            with psycopg.connect(db_url, autocommit=True) as worker:
                job_record_outcomes(worker, [_done(claimed, JobState.DEAD)])

        thread = threading.Thread(target=fail)
        thread.start()
        thread.join(0.3)
        inserting.commit()
        thread.join(10)
    assert _state(conn, child.id) == ("cancelled", 0)
    errors = conn.execute("SELECT errors FROM drover_jobs WHERE id = %s", (child.id,)).fetchone()
    assert errors is not None
    assert errors[0][-1]["error"] == f"dependency {parent.id} ended dead, so this job will not run"


def test_a_partial_count_keeps_the_dependent_pending(conn: Conn) -> None:
    (a, b, cb), _ = job_insert_graph(conn, _graph(3, [(2, 0), (2, 1)], []), notify=False)
    claimed = _claim_all(conn)
    job_record_outcomes(conn, [_done(claimed[a.id])])
    assert _state(conn, cb.id) == ("pending", 1)
    job_record_outcomes(conn, [_done(claimed[b.id])])
    assert _state(conn, cb.id) == ("available", 0)


def test_inserting_against_a_missing_dependency_writes_nothing(conn: Conn) -> None:
    with pytest.raises(InvalidInsertOpts, match="depends on job 99, which does not exist"):
        job_insert_graph(conn, _graph(2, [(1, 0)], [(0, 99)]), notify=False)
    assert conn.execute("SELECT count(*) FROM drover_jobs").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM drover_job_deps").fetchone() == (0,)
