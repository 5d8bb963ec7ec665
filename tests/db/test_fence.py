"""The running client's queries, called directly: claim, fenced outcomes, leases, rescue.

Every worker-side write is fenced on ``(id, attempt, state = 'running')``; these
tests drive ``drover._db.runtime`` against a real database and check what each
statement changes, and what it refuses to change.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from jobdb import Conn, db_now, kit

import drover
from drover._db.admin import job_get
from drover._db.claims import (
    job_claim,
    job_claim_expired,
    job_extend_leases,
    job_record_outcomes,
)
from drover._kernel.disposition import RESCUE_MESSAGE
from drover._kernel.rescuer import Rescuer
from drover._records import Outcome, Recorded, Renewal, WriteResult
from drover.job import JobRow, JobState

LEASE = 60.0
TOLERANCE = timedelta(seconds=1)


class Task(drover.JobArgs, kind="task"):
    n: int = 0


class Immediate:
    """Retries are due at once."""

    def next_retry(self, job: JobRow) -> datetime:
        return datetime.now(UTC)


# --- helpers ------------------------------------------------------------------------------------


def _get(conn: Conn, job_id: int) -> JobRow:
    row = job_get(conn, job_id)
    assert row is not None
    return row


def _xmin(conn: Conn, job_id: int) -> str:
    row = conn.execute("SELECT xmin::text FROM drover_jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return str(row[0])


def _insert(client: drover.Client, **opts: Any) -> JobRow:
    return client.insert(Task(), drover.InsertOpts(**opts) if opts else None)


def _claim_one(conn: Conn, queue: str = "default") -> JobRow:
    rows = job_claim(conn, queue, 1, LEASE)
    assert len(rows) == 1, rows
    return rows[0]


def _due_ago(conn: Conn, job_id: int, seconds: float) -> None:
    conn.execute(
        "UPDATE drover_jobs SET scheduled_at = now() - make_interval(secs => %s) WHERE id = %s",
        (seconds, job_id),
    )


def _expire(conn: Conn, job_id: int) -> None:
    conn.execute(
        "UPDATE drover_jobs SET leased_until = now() - interval '1 second' WHERE id = %s",
        (job_id,),
    )


def _lease_is_fresh(conn: Conn, leased_until: datetime | None) -> None:
    assert leased_until is not None
    expected = db_now(conn) + timedelta(seconds=LEASE)
    assert abs(leased_until - expected) < TOLERANCE, (leased_until, expected)


def _entry(attempt: int, message: str) -> dict[str, Any]:
    return {"attempt": attempt, "at": "2030-01-02T03:04:05.000006Z", "error": message}


RETRY_AT = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)

OUTCOMES: dict[str, Callable[[int, int], Outcome]] = {
    "completed": lambda i, a: Outcome(i, a, JobState.COMPLETED),
    "retryable": lambda i, a: Outcome(
        i, a, JobState.RETRYABLE, RETRY_AT, error=_entry(a, "ValueError: boom")
    ),
    "dead": lambda i, a: Outcome(i, a, JobState.DEAD, error=_entry(a, "ValueError: boom")),
    "cancelled": lambda i, a: Outcome(i, a, JobState.CANCELLED, error=_entry(a, "bad input")),
    "snoozed": lambda i, a: Outcome(i, a, JobState.SCHEDULED, RETRY_AT, refund_attempt=True),
}


def _record_one(conn: Conn, outcome: Outcome) -> Recorded:
    (recorded,) = job_record_outcomes(conn, [outcome])
    assert recorded.outcome == outcome
    return recorded


def _superseded(conn: Conn, client: drover.Client) -> JobRow:
    """A job claimed on attempt 1, rescued after its lease expired, then re-claimed: attempt 2."""
    job = _insert(client)
    first = _claim_one(conn)
    assert (first.id, first.attempt) == (job.id, 1)
    _expire(conn, job.id)
    (rescued,) = job_claim_expired(conn, 10, LEASE)
    assert (rescued.id, rescued.attempt) == (job.id, 1)
    rescue = Outcome(job.id, 1, JobState.RETRYABLE, None, error=_entry(1, RESCUE_MESSAGE))
    assert _record_one(conn, rescue).result is WriteResult.APPLIED
    second = _claim_one(conn)
    assert (second.id, second.attempt, second.state) == (job.id, 2, JobState.RUNNING)
    return second


# --- job_claim -----------------------------------------------------------------------------------


def test_claim_takes_the_oldest_due_row_of_its_queue_only(
    client: drover.Client, conn: Conn
) -> None:
    now = db_now(conn)
    newer = _insert(client)
    older = _insert(client)
    _due_ago(conn, newer.id, 60)
    _due_ago(conn, older.id, 3600)
    _insert(client, queue="other")
    future = _insert(client, scheduled_at=now + timedelta(hours=1))
    assert future.state is JobState.SCHEDULED

    first = _claim_one(conn)
    assert first.id == older.id, "due time decides, not id"
    assert (first.state, first.attempt) == (JobState.RUNNING, 1)
    _lease_is_fresh(conn, first.leased_until)
    stored = _get(conn, older.id)
    assert (stored.state, stored.attempt, stored.leased_until) == (
        JobState.RUNNING,
        1,
        first.leased_until,
    )

    second = _claim_one(conn)
    assert (second.id, second.attempt) == (newer.id, 1)
    assert job_claim(conn, "default", 10, LEASE) == []
    assert _get(conn, future.id).state is JobState.SCHEDULED
    other = job_claim(conn, "other", 10, LEASE)
    assert [r.queue for r in other] == ["other"]


def test_claim_on_an_empty_queue_returns_nothing(client: drover.Client, conn: Conn) -> None:
    assert job_claim(conn, "default", 5, LEASE) == []
    _insert(client, queue="elsewhere")
    assert job_claim(conn, "default", 5, LEASE) == []


@pytest.mark.parametrize("limit", [0, -1, 2**31])
def test_claim_rejects_a_limit_out_of_range(conn: Conn, limit: int) -> None:
    with pytest.raises(ValueError, match="claim limit must be in 1..2147483647"):
        job_claim(conn, "default", limit, LEASE)


def test_claim_batch_comes_back_sorted_by_id(client: drover.Client, conn: Conn) -> None:
    ids = [_insert(client).id for _ in range(3)]
    # Due-time order is the reverse of id order.
    for minutes, job_id in enumerate(ids, start=1):
        _due_ago(conn, job_id, 60 * minutes)
    _insert(client, scheduled_at=db_now(conn) + timedelta(hours=1))
    rows = job_claim(conn, "default", 3, LEASE)
    assert [r.id for r in rows] == sorted(ids)
    assert all(r.state is JobState.RUNNING and r.attempt == 1 for r in rows)


def test_claim_limit_caps_the_batch(client: drover.Client, conn: Conn) -> None:
    ids = [_insert(client).id for _ in range(4)]
    assert [r.id for r in job_claim(conn, "default", 3, LEASE)] == ids[:3]
    assert [r.id for r in job_claim(conn, "default", 3, LEASE)] == ids[3:]


@pytest.mark.parametrize(
    ("state", "attempt"), [("available", 0), ("retryable", 3), ("scheduled", 2)]
)
def test_each_waiting_state_is_claimable_once_due(
    client: drover.Client, conn: Conn, state: str, attempt: int
) -> None:
    due = _insert(client)
    later = _insert(client)
    conn.execute(
        "UPDATE drover_jobs SET state = %s::drover_job_state, attempt = %s, "
        "scheduled_at = CASE WHEN id = %s THEN now() - interval '1 second' "
        "ELSE now() + interval '1 hour' END",
        (state, attempt, due.id),
    )
    rows = job_claim(conn, "default", 10, LEASE)
    assert [(r.id, r.state, r.attempt) for r in rows] == [(due.id, JobState.RUNNING, attempt + 1)]
    assert _get(conn, due.id).attempt == attempt + 1
    not_due = _get(conn, later.id)
    assert (not_due.state.value, not_due.attempt) == (state, attempt)


@pytest.mark.parametrize("state", ["running", "completed", "cancelled", "dead"])
def test_claim_never_takes_running_or_terminal_rows(
    client: drover.Client, conn: Conn, state: str
) -> None:
    job = _insert(client)
    conn.execute(
        "UPDATE drover_jobs SET state = %s::drover_job_state, scheduled_at = now() - "
        "interval '1 hour' WHERE id = %s",
        (state, job.id),
    )
    assert job_claim(conn, "default", 10, LEASE) == []
    assert _get(conn, job.id).attempt == 0


def _race(db_url: str, take: Callable[[Conn], list[JobRow]], name: str) -> list[int]:
    """Two threads on their own connections call ``take`` until it returns nothing.

    Started together on a barrier; returns every id either took, in the order taken.
    """
    barrier = threading.Barrier(2)
    taken: list[list[int]] = [[], []]
    failures: list[BaseException] = []

    def racer(slot: int) -> None:
        try:
            with psycopg.connect(db_url, autocommit=True) as own:
                barrier.wait(timeout=10)
                while rows := take(own):
                    taken[slot].extend(r.id for r in rows)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=racer, args=(i,), name=f"{name}-{i}") for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not failures
    assert not any(t.is_alive() for t in threads)
    return taken[0] + taken[1]


def test_two_concurrent_claimers_take_every_row_exactly_once(
    client: drover.Client, conn: Conn, db_url: str
) -> None:
    ids = {row.id for row in client.insert_many([Task(n=i) for i in range(25)])}
    everything = _race(db_url, lambda own: job_claim(own, "default", 3, LEASE), "claimer")
    assert len(everything) == 25
    assert set(everything) == ids
    rows = conn.execute("SELECT state::text, attempt FROM drover_jobs").fetchall()
    assert rows == [("running", 1)] * 25


# --- job_record_outcomes: the fence ---------------------------------------------------------------


@pytest.mark.parametrize("kind", list(OUTCOMES))
def test_a_superseded_claim_cannot_write_any_outcome(
    client: drover.Client, conn: Conn, kind: str
) -> None:
    current = _superseded(conn, client)
    before = _get(conn, current.id)
    recorded = _record_one(conn, OUTCOMES[kind](current.id, 1))
    assert recorded.result is WriteResult.LEASE_LOST
    assert (recorded.current_state, recorded.current_attempt) == ("running", 2)
    assert _get(conn, current.id) == before, "a refused write must change nothing"

    # The current holder still owns the row.
    done = _record_one(conn, Outcome(current.id, 2, JobState.COMPLETED))
    assert done.result is WriteResult.APPLIED
    after = _get(conn, current.id)
    assert (after.state, after.attempt, after.leased_until) == (JobState.COMPLETED, 2, None)
    assert after.finalized_at is not None
    assert [e["error"] for e in after.errors] == [RESCUE_MESSAGE]


@pytest.mark.parametrize("kind", list(OUTCOMES))
@pytest.mark.parametrize("state", ["available", "scheduled", "retryable", "completed", "dead"])
def test_writing_to_a_row_that_is_not_running_is_refused(
    client: drover.Client, conn: Conn, kind: str, state: str
) -> None:
    job = _insert(client)
    conn.execute(
        "UPDATE drover_jobs SET state = %s::drover_job_state, attempt = 1 WHERE id = %s",
        (state, job.id),
    )
    before = _get(conn, job.id)
    recorded = _record_one(conn, OUTCOMES[kind](job.id, 1))
    assert recorded.result is WriteResult.NOT_RUNNING
    assert (recorded.current_state, recorded.current_attempt) == (state, 1)
    assert _get(conn, job.id) == before


def test_state_is_checked_before_attempt(client: drover.Client, conn: Conn) -> None:
    current = _superseded(conn, client)
    assert _record_one(conn, Outcome(current.id, 2, JobState.COMPLETED)).result is (
        WriteResult.APPLIED
    )
    stale = _record_one(conn, Outcome(current.id, 1, JobState.COMPLETED))
    assert stale.result is WriteResult.NOT_RUNNING
    assert (stale.current_state, stale.current_attempt) == ("completed", 2)


@pytest.mark.parametrize("kind", list(OUTCOMES))
def test_writing_to_an_unknown_job_is_not_found(conn: Conn, kind: str) -> None:
    recorded = _record_one(conn, OUTCOMES[kind](987654, 1))
    assert recorded.result is WriteResult.NOT_FOUND
    assert (recorded.current_state, recorded.current_attempt) == (None, None)
    assert conn.execute("SELECT count(*) FROM drover_jobs").fetchone() == (0,)


def test_one_call_reports_each_outcome_of_a_mixed_batch(client: drover.Client, conn: Conn) -> None:
    stale = _superseded(conn, client)
    fresh = [_insert(client).id for _ in range(2)]
    claimed = {r.id: r for r in job_claim(conn, "default", 10, LEASE)}
    assert sorted(claimed) == fresh
    waiting = _insert(client)
    outcomes = [
        Outcome(fresh[0], 1, JobState.COMPLETED),
        Outcome(stale.id, 1, JobState.DEAD, error=_entry(1, "late")),
        Outcome(waiting.id, 0, JobState.CANCELLED, error=_entry(0, "nope")),
        Outcome(987654, 1, JobState.COMPLETED),
        Outcome(fresh[1], 1, JobState.RETRYABLE, RETRY_AT, error=_entry(1, "again")),
    ]
    results = job_record_outcomes(conn, outcomes)
    assert len(results) == len(outcomes)
    by_id = {r.outcome.id: r for r in results}
    sent = {o.id: o for o in outcomes}
    assert by_id.keys() == sent.keys()
    assert all(r.outcome is sent[i] for i, r in by_id.items())
    assert by_id[fresh[0]].result is WriteResult.APPLIED
    assert by_id[stale.id].result is WriteResult.LEASE_LOST
    assert (by_id[stale.id].current_state, by_id[stale.id].current_attempt) == ("running", 2)
    assert by_id[waiting.id].result is WriteResult.NOT_RUNNING
    assert by_id[waiting.id].current_state == "available"
    assert by_id[987654].result is WriteResult.NOT_FOUND
    assert by_id[fresh[1]].result is WriteResult.APPLIED

    assert _get(conn, fresh[0]).state is JobState.COMPLETED
    assert _get(conn, stale.id).state is JobState.RUNNING
    assert _get(conn, waiting.id).state is JobState.AVAILABLE
    retried = _get(conn, fresh[1])
    assert (retried.state, retried.scheduled_at) == (JobState.RETRYABLE, RETRY_AT)


def test_a_stale_and_a_current_outcome_for_one_job_in_one_batch(
    client: drover.Client, conn: Conn
) -> None:
    current = _superseded(conn, client)
    stale = Outcome(current.id, 1, JobState.RETRYABLE, RETRY_AT, error=_entry(1, "late"))
    fresh = Outcome(current.id, 2, JobState.COMPLETED)
    results = {r.outcome.attempt: r for r in job_record_outcomes(conn, [stale, fresh])}
    row = _get(conn, current.id)
    assert (row.state, row.attempt) == (JobState.COMPLETED, 2), "the fence itself holds"
    assert results[2].outcome is fresh
    assert results[2].result is WriteResult.APPLIED
    assert results[1].outcome is stale
    assert results[1].result is WriteResult.LEASE_LOST


def test_record_outcomes_with_nothing_to_write(conn: Conn) -> None:
    assert job_record_outcomes(conn, []) == []


# --- job_record_outcomes: what an applied outcome writes ------------------------------------------


def _claimed(client: drover.Client, conn: Conn, **opts: Any) -> JobRow:
    job = _insert(client, **opts)
    row = _claim_one(conn, job.queue)
    assert row.id == job.id
    return row


@pytest.mark.parametrize("state", [JobState.COMPLETED, JobState.CANCELLED, JobState.DEAD])
def test_terminal_outcomes_finalize_and_clear_the_lease(
    client: drover.Client, conn: Conn, state: JobState
) -> None:
    row = _claimed(client, conn)
    error = None if state is JobState.COMPLETED else _entry(1, f"{state} reason")
    assert _record_one(conn, Outcome(row.id, 1, state, error=error)).result is (WriteResult.APPLIED)
    now = db_now(conn)
    stored = _get(conn, row.id)
    assert (stored.state, stored.attempt, stored.leased_until) == (state, 1, None)
    assert stored.finalized_at is not None
    assert abs(stored.finalized_at - now) < TOLERANCE
    assert stored.scheduled_at == row.scheduled_at
    assert stored.errors == (() if error is None else (error,))


FAILURE = {
    **_entry(1, "ValueError: boom"),
    "trace": "Traceback (most recent call last):\n  ...\nValueError: boom",
}


@pytest.mark.parametrize(
    ("outcome", "state", "attempt", "errors"),
    [
        pytest.param(
            lambda i: Outcome(i, 1, JobState.RETRYABLE, RETRY_AT, error=FAILURE),
            JobState.RETRYABLE,
            1,
            [FAILURE],
            id="retryable-appends-the-error",
        ),
        pytest.param(
            lambda i: Outcome(i, 1, JobState.SCHEDULED, RETRY_AT, refund_attempt=True),
            JobState.SCHEDULED,
            0,
            [],
            id="snooze-gives-the-attempt-back-and-appends-nothing",
        ),
    ],
)
def test_a_waiting_outcome_reschedules_the_job_unfinalized(
    client: drover.Client,
    conn: Conn,
    outcome: Callable[[int], Outcome],
    state: JobState,
    attempt: int,
    errors: list[dict[str, Any]],
) -> None:
    row = _claimed(client, conn)
    assert _record_one(conn, outcome(row.id)).result is WriteResult.APPLIED
    stored = _get(conn, row.id)
    assert (stored.state, stored.attempt, stored.leased_until, stored.finalized_at) == (
        state,
        attempt,
        None,
        None,
    )
    assert stored.scheduled_at == RETRY_AT
    assert stored.errors == tuple(errors)


def test_retryable_errors_accumulate_oldest_first(client: drover.Client, conn: Conn) -> None:
    row = _claimed(client, conn)
    outcome = Outcome(row.id, 1, JobState.RETRYABLE, RETRY_AT, error=FAILURE)
    assert _record_one(conn, outcome).result is WriteResult.APPLIED
    conn.execute("UPDATE drover_jobs SET scheduled_at = now() WHERE id = %s", (row.id,))
    again = _claim_one(conn)
    assert again.attempt == 2
    second = _entry(2, "ValueError: again")
    # No retry time: due now on the database clock.
    assert _record_one(conn, Outcome(row.id, 2, JobState.RETRYABLE, None, error=second)).result is (
        WriteResult.APPLIED
    )
    now = db_now(conn)
    stored = _get(conn, row.id)
    assert stored.errors == (FAILURE, second)
    assert abs(stored.scheduled_at - now) < TOLERANCE
    assert stored.finalized_at is None


def test_a_refund_never_takes_the_attempt_below_zero(client: drover.Client, conn: Conn) -> None:
    job = _insert(client)
    conn.execute(
        "UPDATE drover_jobs SET state = 'running', attempt = 0, "
        "leased_until = now() + interval '1 minute' WHERE id = %s",
        (job.id,),
    )
    outcome = Outcome(job.id, 0, JobState.SCHEDULED, RETRY_AT, refund_attempt=True)
    assert _record_one(conn, outcome).result is WriteResult.APPLIED
    assert _get(conn, job.id).attempt == 0


def test_without_a_refund_the_attempt_stays_counted(client: drover.Client, conn: Conn) -> None:
    row = _claimed(client, conn)
    outcome = Outcome(row.id, 1, JobState.RETRYABLE, None, error=_entry(1, "handed back"))
    assert _record_one(conn, outcome).result is WriteResult.APPLIED
    assert _get(conn, row.id).attempt == 1


# --- job_extend_leases ----------------------------------------------------------------------------


def _renewed(renewals: list[Renewal]) -> set[int]:
    return {r.id for r in renewals if r.leased_until is not None}


def _moved_on(renewals: list[Renewal]) -> set[int]:
    return {r.id for r in renewals if not r.current}


def test_extend_leases_renews_only_current_running_claims(
    client: drover.Client, conn: Conn
) -> None:
    a = _claimed(client, conn)
    b = _claimed(client, conn)
    conn.execute("UPDATE drover_jobs SET leased_until = now() + interval '1 second'")
    assert _record_one(conn, Outcome(b.id, 1, JobState.COMPLETED)).result is WriteResult.APPLIED

    renewals = job_extend_leases(conn, [(a.id, 1), (b.id, 1), (987654, 1)], LEASE)
    assert _renewed(renewals) == {a.id}
    assert _moved_on(renewals) == {b.id, 987654}
    [renewal_of_a] = [r for r in renewals if r.id == a.id]
    assert renewal_of_a.leased_until == _get(conn, a.id).leased_until
    _lease_is_fresh(conn, _get(conn, a.id).leased_until)
    finished = _get(conn, b.id)
    assert (finished.state, finished.leased_until) == (JobState.COMPLETED, None)


def test_extend_leases_skips_a_claim_on_another_attempt(client: drover.Client, conn: Conn) -> None:
    current = _superseded(conn, client)
    conn.execute("UPDATE drover_jobs SET leased_until = now() + interval '5 seconds'")
    before = _get(conn, current.id).leased_until
    stale = job_extend_leases(conn, [(current.id, 1)], LEASE)
    assert (_renewed(stale), _moved_on(stale)) == (set(), {current.id})
    assert _get(conn, current.id).leased_until == before
    assert _renewed(job_extend_leases(conn, [(current.id, 2)], LEASE)) == {current.id}
    _lease_is_fresh(conn, _get(conn, current.id).leased_until)


@pytest.mark.parametrize("state", ["completed", "retryable", "available", "dead", "cancelled"])
def test_extend_leases_never_resurrects_a_row_that_moved_on(
    client: drover.Client, conn: Conn, state: str
) -> None:
    row = _claimed(client, conn)
    conn.execute(
        "UPDATE drover_jobs SET state = %s::drover_job_state, leased_until = NULL WHERE id = %s",
        (state, row.id),
    )
    before = _get(conn, row.id)
    renewals = job_extend_leases(conn, [(row.id, 1)], LEASE)
    assert (_renewed(renewals), _moved_on(renewals)) == (set(), {row.id})
    assert _get(conn, row.id) == before


def test_extend_leases_skips_a_locked_row_without_waiting_and_without_calling_it_lost(
    client: drover.Client, conn: Conn, db_url: str
) -> None:
    locked, free = _claimed(client, conn), _claimed(client, conn)
    with psycopg.connect(db_url) as holder:
        holder.execute("SELECT 1 FROM drover_jobs WHERE id = %s FOR UPDATE", (locked.id,))
        conn.execute("SET lock_timeout = '2s'")  # a wait would fail the statement, not hang
        renewals = job_extend_leases(conn, [(locked.id, 1), (free.id, 1)], LEASE)
        holder.rollback()
    assert _renewed(renewals) == {free.id}
    assert _moved_on(renewals) == set()


def test_extend_leases_with_nothing_held(conn: Conn) -> None:
    assert job_extend_leases(conn, [], LEASE) == []


# --- job_claim_expired ----------------------------------------------------------------------------


def test_claim_expired_takes_only_running_rows_whose_lease_passed(
    client: drover.Client, conn: Conn
) -> None:
    expired = _claimed(client, conn)
    live = _claimed(client, conn)
    waiting = _insert(client)
    _expire(conn, expired.id)
    conn.execute(
        "UPDATE drover_jobs SET attempt = 3, leased_until = now() - interval '1 minute' "
        "WHERE id = %s",
        (waiting.id,),
    )
    live_before = _get(conn, live.id)
    waiting_before = _get(conn, waiting.id)

    rows = job_claim_expired(conn, 100, LEASE)
    assert [(r.id, r.state, r.attempt) for r in rows] == [(expired.id, JobState.RUNNING, 1)]
    _lease_is_fresh(conn, rows[0].leased_until)
    stored = _get(conn, expired.id)
    assert (stored.state, stored.attempt, stored.leased_until) == (
        JobState.RUNNING,
        1,
        rows[0].leased_until,
    )
    assert _get(conn, live.id) == live_before
    assert _get(conn, waiting.id) == waiting_before
    assert job_claim_expired(conn, 100, LEASE) == [], "re-leased rows belong to the sweep"


def test_claim_expired_respects_its_limit(client: drover.Client, conn: Conn) -> None:
    for _ in range(3):
        _insert(client)
    job_claim(conn, "default", 3, LEASE)
    conn.execute("UPDATE drover_jobs SET leased_until = now() - interval '1 second'")
    assert len(job_claim_expired(conn, 2, LEASE)) == 2
    assert len(job_claim_expired(conn, 2, LEASE)) == 1
    assert job_claim_expired(conn, 2, LEASE) == []


def test_two_concurrent_sweeps_never_take_the_same_row(
    client: drover.Client, conn: Conn, db_url: str
) -> None:
    client.insert_many([Task(n=i) for i in range(25)])
    ids = {r.id for r in job_claim(conn, "default", 25, LEASE)}
    assert len(ids) == 25
    conn.execute("UPDATE drover_jobs SET leased_until = now() - interval '1 second'")
    everything = _race(db_url, lambda own: job_claim_expired(own, 2, LEASE), "sweeper")
    assert len(everything) == 25
    assert set(everything) == ids
    rows = conn.execute(
        "SELECT state::text, attempt, leased_until > now() FROM drover_jobs"
    ).fetchall()
    assert rows == [("running", 1, True)] * 25


# --- Rescuer.run_once -----------------------------------------------------------------------------


def _rescuer(client: drover.Client) -> Rescuer:
    return Rescuer(kit(client, rescue_interval=60, lease_duration=60, retry_policy=Immediate()))


def test_rescue_makes_an_expired_job_retryable_without_spending_an_attempt(
    client: drover.Client, conn: Conn
) -> None:
    row = _claimed(client, conn)
    _expire(conn, row.id)
    assert _rescuer(client).run_once() == 1
    now = db_now(conn)
    stored = _get(conn, row.id)
    assert (stored.state, stored.attempt, stored.leased_until, stored.finalized_at) == (
        JobState.RETRYABLE,
        1,
        None,
        None,
    )
    assert abs(stored.scheduled_at - now) < TOLERANCE, "the immediate policy was used"
    (entry,) = stored.errors
    assert entry["attempt"] == 1
    assert entry["error"] == "drover: lease expired, worker presumed dead"
    assert "trace" not in entry
    at = datetime.fromisoformat(entry["at"])
    assert entry["at"].endswith("Z")
    assert abs(at - now) < TOLERANCE

    again = _claim_one(conn)
    assert (again.id, again.attempt) == (row.id, 2)


def test_rescue_at_the_attempt_ceiling_is_dead(client: drover.Client, conn: Conn) -> None:
    row = _claimed(client, conn, max_attempts=1)
    _expire(conn, row.id)
    assert _rescuer(client).run_once() == 1
    stored = _get(conn, row.id)
    assert (stored.state, stored.attempt, stored.leased_until) == (JobState.DEAD, 1, None)
    assert stored.finalized_at is not None
    assert [e["error"] for e in stored.errors] == [RESCUE_MESSAGE]


def test_rescue_counts_what_it_moved_and_leaves_live_leases_alone(
    client: drover.Client, conn: Conn
) -> None:
    expired = [_claimed(client, conn).id for _ in range(2)]
    live = _claimed(client, conn)
    for job_id in expired:
        _expire(conn, job_id)
    before = _get(conn, live.id)
    assert _rescuer(client).run_once() == 2
    assert [_get(conn, i).state for i in expired] == [JobState.RETRYABLE] * 2
    assert _get(conn, live.id) == before


def test_an_empty_sweep_returns_zero_and_writes_nothing(client: drover.Client, conn: Conn) -> None:
    live = _claimed(client, conn)
    waiting = _insert(client)
    before = {i: (_get(conn, i), _xmin(conn, i)) for i in (live.id, waiting.id)}
    assert _rescuer(client).run_once() == 0
    assert {i: (_get(conn, i), _xmin(conn, i)) for i in (live.id, waiting.id)} == before
