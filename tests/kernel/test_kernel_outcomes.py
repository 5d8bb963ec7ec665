"""Outcomes and the fence, on both stores: what each write changes, and what it refuses."""

from __future__ import annotations

import json
from datetime import timedelta

from drover._records import Outcome, Recorded, WriteResult
from drover.job import JobRow, JobState

from .backends import Backend, params

HOUR = timedelta(hours=1)
FAILED = {"attempt": 1, "at": "2026-01-01T00:00:00+00:00", "error": "boom", "trace": None}


def _record(backend: Backend, *outcomes: Outcome) -> list[Recorded]:
    session = backend.store.outcome_session()
    try:
        return session.record(outcomes)
    finally:
        session.release()


def _applied(recorded: list[Recorded]) -> None:
    assert [r.result for r in recorded] == [WriteResult.APPLIED] * len(recorded), recorded


def _rescue_now(backend: Backend, row: JobRow) -> None:
    """Let ``row``'s lease pass and rescue it back to the queue, due now."""
    assert row.leased_until is not None
    backend.pass_time(row.leased_until)
    found, recorded = backend.store.rescue(
        10, 60, lambda r: Outcome(r.id, r.attempt, JobState.RETRYABLE), by="rescuer"
    )
    assert found == 1
    _applied(recorded)


# --- what each outcome writes ---------------------------------------------------------------------


def test_a_completion_is_terminal_and_stores_its_result(backend: Backend) -> None:
    job = backend.insert()
    claimed = backend.claim_one()
    before = backend.now()
    _applied(_record(backend, Outcome(job.id, 1, JobState.COMPLETED, result='{"total": 3}')))
    after = backend.now()

    row = backend.must_get(job.id)
    assert (row.state, row.attempt, row.leased_until, row.errors) == (
        JobState.COMPLETED,
        1,
        None,
        (),
    )
    assert row.finalized_at is not None
    assert before <= row.finalized_at <= after
    assert row.scheduled_at == claimed.scheduled_at
    result = backend.hidden(job.id).result
    assert result is not None
    assert json.loads(result) == {"total": 3}


def test_a_completion_without_a_result_stores_none(backend: Backend) -> None:
    job = backend.insert()
    backend.claim_one()
    _applied(_record(backend, Outcome(job.id, 1, JobState.COMPLETED)))
    assert backend.must_get(job.id).state is JobState.COMPLETED
    assert backend.hidden(job.id).result is None


def test_a_completion_in_a_mixed_batch_stores_its_result_too(backend: Backend) -> None:
    # A batch with any other outcome takes PostgreSQL's general statement.
    a, b = backend.insert(), backend.insert()
    backend.store.claim_session().claim("default", 2, 60, "w1")
    _applied(
        _record(
            backend,
            Outcome(a.id, 1, JobState.COMPLETED, result="[1, 2]"),
            Outcome(b.id, 1, JobState.RETRYABLE, error=FAILED),
        )
    )
    assert backend.must_get(a.id).state is JobState.COMPLETED
    result = backend.hidden(a.id).result
    assert result is not None
    assert json.loads(result) == [1, 2]
    assert backend.must_get(b.id).state is JobState.RETRYABLE


def test_a_retry_waits_until_its_time_with_its_error_appended(backend: Backend) -> None:
    job = backend.insert()
    backend.claim_one()
    at = backend.now() + HOUR
    _applied(_record(backend, Outcome(job.id, 1, JobState.RETRYABLE, at, error=FAILED)))

    row = backend.must_get(job.id)
    assert (row.state, row.attempt, row.scheduled_at) == (JobState.RETRYABLE, 1, at)
    assert (row.leased_until, row.finalized_at, row.errors) == (None, None, (FAILED,))


def test_a_retry_without_a_time_is_due_now(backend: Backend) -> None:
    job = backend.insert()
    backend.claim_one()
    before = backend.now()
    _applied(_record(backend, Outcome(job.id, 1, JobState.RETRYABLE, None, error=FAILED)))
    after = backend.now()

    row = backend.must_get(job.id)
    assert row.state is JobState.RETRYABLE
    assert before <= row.scheduled_at <= after
    again = backend.claim_one()
    assert (again.id, again.attempt) == (job.id, 2)


def test_a_snooze_refunds_the_attempt(backend: Backend) -> None:
    job = backend.insert()
    backend.claim_one()
    at = backend.now() + timedelta(seconds=0.3)
    _applied(_record(backend, Outcome(job.id, 1, JobState.SCHEDULED, at, refund_attempt=True)))

    row = backend.must_get(job.id)
    assert (row.state, row.attempt, row.scheduled_at, row.errors) == (
        JobState.SCHEDULED,
        0,
        at,
        (),
    )
    assert (row.leased_until, row.finalized_at) == (None, None)
    assert backend.store.claim_session().claim("default", 1, 60, "w1").rows == []
    backend.pass_time(at)
    assert backend.claim_one().attempt == 1


def test_cancelled_and_dead_are_terminal_with_their_errors(backend: Backend) -> None:
    cancelled, dead = backend.insert(), backend.insert()
    backend.store.claim_session().claim("default", 2, 60, "w1")
    reason = {**FAILED, "error": "cancelled by the handler"}
    before = backend.now()
    _applied(
        _record(
            backend,
            Outcome(cancelled.id, 1, JobState.CANCELLED, error=reason),
            Outcome(dead.id, 1, JobState.DEAD, error=FAILED),
        )
    )
    after = backend.now()
    for job_id, state, entry in (
        (cancelled.id, JobState.CANCELLED, reason),
        (dead.id, JobState.DEAD, FAILED),
    ):
        row = backend.must_get(job_id)
        assert (row.state, row.attempt, row.errors, row.leased_until) == (state, 1, (entry,), None)
        assert row.finalized_at is not None
        assert before <= row.finalized_at <= after


def test_errors_accumulate_oldest_first(backend: Backend) -> None:
    job = backend.insert()
    backend.claim_one()
    first = {**FAILED, "error": "first"}
    second = {**FAILED, "attempt": 2, "error": "second"}
    _applied(_record(backend, Outcome(job.id, 1, JobState.RETRYABLE, None, error=first)))
    backend.claim_one()
    _applied(_record(backend, Outcome(job.id, 2, JobState.DEAD, error=second)))
    row = backend.must_get(job.id)
    assert (row.state, row.attempt, row.errors) == (JobState.DEAD, 2, (first, second))


# --- the fence ------------------------------------------------------------------------------------


def test_a_write_for_a_missing_job_is_not_found(backend: Backend) -> None:
    (recorded,) = _record(backend, Outcome(987654321, 1, JobState.COMPLETED))
    assert (recorded.result, recorded.current_state, recorded.current_attempt) == (
        WriteResult.NOT_FOUND,
        None,
        None,
    )


def test_a_write_after_the_job_finished_is_not_running(backend: Backend) -> None:
    job = backend.insert()
    backend.claim_one()
    _applied(_record(backend, Outcome(job.id, 1, JobState.COMPLETED)))
    for late in (
        Outcome(job.id, 1, JobState.COMPLETED),
        Outcome(job.id, 1, JobState.RETRYABLE, None, error=FAILED),
    ):
        (recorded,) = _record(backend, late)
        assert (recorded.result, recorded.current_state, recorded.current_attempt) == (
            WriteResult.NOT_RUNNING,
            "completed",
            1,
        )
    assert backend.must_get(job.id).errors == ()


def test_the_fence_after_a_rescue_a_reclaim_and_a_finish(backend: Backend) -> None:
    job = backend.insert()
    old = backend.claim_one(lease=0.2)
    stale = Outcome(job.id, old.attempt, JobState.COMPLETED)

    _rescue_now(backend, old)
    (recorded,) = _record(backend, stale)
    assert (recorded.result, recorded.current_state) == (WriteResult.NOT_RUNNING, "retryable")

    new = backend.claim_one()
    assert new.attempt == 2
    (recorded,) = _record(backend, stale)
    assert (recorded.result, recorded.current_state, recorded.current_attempt) == (
        WriteResult.LEASE_LOST,
        "running",
        2,
    )
    assert backend.must_get(job.id) == new  # refused writes change nothing

    _applied(_record(backend, Outcome(job.id, 2, JobState.COMPLETED)))
    # The state is checked before the attempt: finished is "not running", not "lease lost".
    (recorded,) = _record(backend, Outcome(job.id, old.attempt, JobState.DEAD, error=FAILED))
    assert (recorded.result, recorded.current_state, recorded.current_attempt) == (
        WriteResult.NOT_RUNNING,
        "completed",
        2,
    )


def test_the_fence_after_a_hand_back(backend: Backend) -> None:
    job = backend.insert()
    old = backend.claim_one()
    back = Outcome(job.id, old.attempt, JobState.RETRYABLE, None, error=FAILED)
    _applied(backend.store.hand_back([back], worker="w1"))

    (recorded,) = _record(backend, Outcome(job.id, old.attempt, JobState.COMPLETED))
    assert (recorded.result, recorded.current_state) == (WriteResult.NOT_RUNNING, "retryable")
    (again,) = backend.store.hand_back([back], worker="w1")
    assert again.result is WriteResult.NOT_RUNNING
    assert backend.must_get(job.id).errors == (FAILED,)


def test_a_batch_gets_one_result_per_outcome_in_input_order(backend: Backend) -> None:
    a, b, c = backend.insert(), backend.insert(), backend.insert()
    backend.store.claim_session().claim("default", 3, 60, "w1")
    _applied(_record(backend, Outcome(b.id, 1, JobState.COMPLETED)))
    batch = [
        Outcome(c.id, 1, JobState.RETRYABLE, None, error=FAILED),
        Outcome(987654321, 1, JobState.DEAD, error=FAILED),
        Outcome(b.id, 1, JobState.DEAD, error=FAILED),
        Outcome(a.id, 1, JobState.COMPLETED),
        Outcome(a.id, 7, JobState.COMPLETED),
    ]
    recorded = _record(backend, *batch)
    assert [r.outcome for r in recorded] == batch
    assert [r.result for r in recorded] == [
        WriteResult.APPLIED,
        WriteResult.NOT_FOUND,
        WriteResult.NOT_RUNNING,
        WriteResult.APPLIED,
        WriteResult.LEASE_LOST,
    ]


def test_plain_completions_report_refusals_as_the_rows_are_after_the_batch(
    backend: Backend,
) -> None:
    """A stale and a current completion of one job in one batch (PostgreSQL's completion
    statement, then a second statement reading why): the stale one sees the job completed."""
    job = backend.insert()
    old = backend.claim_one(lease=0.2)
    _rescue_now(backend, old)
    backend.claim_one()
    stale = Outcome(job.id, 1, JobState.COMPLETED)
    current = Outcome(job.id, 2, JobState.COMPLETED)
    refused, applied = _record(backend, stale, current)
    assert applied.result is WriteResult.APPLIED
    assert (refused.result, refused.current_state, refused.current_attempt) == (
        WriteResult.NOT_RUNNING,
        "completed",
        2,
    )


def test_other_batches_report_refusals_as_the_rows_were_before_it(backend: Backend) -> None:
    """The same with a failure among them (PostgreSQL's general statement, one snapshot):
    the stale one sees the job still running under the current claim."""
    job = backend.insert()
    old = backend.claim_one(lease=0.2)
    _rescue_now(backend, old)
    backend.claim_one()
    stale = Outcome(job.id, 1, JobState.RETRYABLE, None, error=FAILED)
    current = Outcome(job.id, 2, JobState.COMPLETED)
    refused, applied = _record(backend, stale, current)
    assert applied.result is WriteResult.APPLIED
    assert (refused.result, refused.current_state, refused.current_attempt) == (
        WriteResult.LEASE_LOST,
        "running",
        2,
    )
    assert backend.must_get(job.id).errors == ()


def test_an_empty_batch_writes_nothing(backend: Backend) -> None:
    assert _record(backend) == []
    assert backend.store.hand_back([], worker="w1") == []


def test_a_job_inserted_with_params_keeps_them_through_its_outcomes(backend: Backend) -> None:
    job = backend.insert(params(tags=("t",), meta='{"k": "v"}', args='{"n": 5}', priority=2))
    backend.claim_one()
    _applied(_record(backend, Outcome(job.id, 1, JobState.RETRYABLE, None, error=FAILED)))
    row = backend.must_get(job.id)
    assert (row.tags, dict(row.meta), row.args, row.priority) == (("t",), {"k": "v"}, {"n": 5}, 2)
