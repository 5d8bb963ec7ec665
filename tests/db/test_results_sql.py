"""Results in the outcome statements: fenced with the completion, and the awaited notification."""

from __future__ import annotations

import psycopg
from jobdb import Conn

from drover._db.claims import job_claim, job_record_outcomes
from drover._db.results import job_mark_awaited, job_result
from drover._records import Outcome, WriteResult
from drover.job import JobState

LEASE = 60.0


def _put(conn: Conn, n: int) -> list[int]:
    rows = conn.execute(
        "INSERT INTO drover_jobs (kind, queue, args) "
        "SELECT 'r', 'default', '{}' FROM generate_series(1, %s) RETURNING id",
        (n,),
    ).fetchall()
    return [int(r[0]) for r in rows]


def test_a_completion_stores_its_result_and_a_stale_attempt_cannot(conn: Conn) -> None:
    _put(conn, 2)
    a, b = job_claim(conn, "default", 2, LEASE)
    recorded = job_record_outcomes(
        conn,
        [
            Outcome(a.id, a.attempt, JobState.COMPLETED, result='{"ok": 1}'),
            Outcome(b.id, b.attempt + 1, JobState.COMPLETED, result='{"stale": true}'),
        ],
    )
    assert [r.result for r in recorded] == [WriteResult.APPLIED, WriteResult.LEASE_LOST]
    assert job_result(conn, a.id) == ("completed", {"ok": 1}, None)
    assert job_result(conn, b.id) == ("running", None, None)


def test_a_mixed_batch_stores_results_only_for_completions(conn: Conn) -> None:
    _put(conn, 2)
    a, b = job_claim(conn, "default", 2, LEASE)
    error = {"attempt": 1, "at": "2026-01-01T00:00:00Z", "error": "boom"}
    job_record_outcomes(
        conn,
        [
            Outcome(a.id, a.attempt, JobState.COMPLETED, result="[1, 2]"),
            Outcome(b.id, b.attempt, JobState.DEAD, error=error, result='"ignored"'),
        ],
    )
    assert job_result(conn, a.id) == ("completed", [1, 2], None)
    assert job_result(conn, b.id) == ("dead", None, "boom")


def test_only_awaited_jobs_are_announced_at_commit(db_url: str, conn: Conn) -> None:
    ids = _put(conn, 3)
    job_mark_awaited(conn, ids[0])
    job_mark_awaited(conn, ids[2])
    with psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute("LISTEN drover_done")
        rows = job_claim(conn, "default", 3, LEASE)
        job_record_outcomes(
            conn,
            [
                Outcome(rows[0].id, rows[0].attempt, JobState.COMPLETED),
                Outcome(rows[1].id, rows[1].attempt, JobState.COMPLETED),
                Outcome(
                    rows[2].id,
                    rows[2].attempt,
                    JobState.DEAD,
                    error={"attempt": 1, "at": "2026-01-01T00:00:00Z", "error": "x"},
                ),
            ],
        )
        got = sorted(int(n.payload) for n in listener.notifies(timeout=10.0, stop_after=2))
    assert got == [ids[0], ids[2]]


def test_marking_a_finished_job_writes_nothing(conn: Conn) -> None:
    (job_id,) = _put(conn, 1)
    conn.execute("UPDATE drover_jobs SET state = 'completed', finalized_at = now()")
    before = conn.execute("SELECT xmin::text FROM drover_jobs WHERE id = %s", (job_id,)).fetchone()
    job_mark_awaited(conn, job_id)
    after = conn.execute(
        "SELECT xmin::text, awaited FROM drover_jobs WHERE id = %s", (job_id,)
    ).fetchone()
    assert after is not None and before is not None
    assert after == (before[0], False)


def test_awaiting_a_claimable_job_wakes_its_queue(db_url: str, conn: Conn) -> None:
    # The flag's update holds the row for a moment; a claim then skips it and
    # its worker would sleep a whole poll if nothing woke it again.
    (claimable, scheduled) = _put(conn, 2)
    conn.execute(
        "UPDATE drover_jobs SET state = 'scheduled', scheduled_at = now() + interval '1 hour' "
        "WHERE id = %s",
        (scheduled,),
    )
    with psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute("LISTEN drover")
        job_mark_awaited(conn, scheduled)
        assert list(listener.notifies(timeout=0.3, stop_after=1)) == []
        job_mark_awaited(conn, claimable)
        got = [n.payload for n in listener.notifies(timeout=10.0, stop_after=1)]
    assert got == ["default"]
