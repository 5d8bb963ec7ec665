"""Leases on both stores: renewal of current claims, rescue of expired ones, hand-back."""

from __future__ import annotations

import time
from datetime import timedelta

from drover._records import Outcome, WriteResult
from drover.job import JobRow, JobState

from .backends import Backend

HANDED_BACK = {"attempt": 1, "at": "2026-01-01T00:00:00+00:00", "error": "shutdown", "trace": None}


def _back_now(row: JobRow) -> Outcome:
    return Outcome(row.id, row.attempt, JobState.RETRYABLE)


# --- renewal ------------------------------------------------------------------------------------


def test_renewal_moves_the_lease_of_current_claims(backend: Backend) -> None:
    a, b = backend.insert(), backend.insert()
    backend.store.claim_session().claim("default", 2, 5.0, "w1")
    before = backend.now()
    sent_before = time.monotonic()
    sent, renewals = backend.store.extend_leases([(a.id, 1), (b.id, 1)], 120.0, deadline=5.0)
    after = backend.now()

    assert sent_before <= sent <= time.monotonic()
    assert [(r.id, r.current) for r in renewals] == [(a.id, True), (b.id, True)]
    lease = timedelta(seconds=120)
    for renewal in renewals:
        assert renewal.leased_until is not None
        assert before + lease <= renewal.leased_until <= after + lease
        assert backend.must_get(renewal.id).leased_until == renewal.leased_until


def test_renewal_of_a_superseded_claim_is_not_current_and_renews_nothing(
    backend: Backend,
) -> None:
    job = backend.insert()
    old = backend.claim_one()
    backend.store.hand_back([_back_now(old)], worker="w1")
    new = backend.claim_one(lease=30.0)
    assert new.attempt == 2

    _, (stale,) = backend.store.extend_leases([(job.id, 1)], 600.0, deadline=5.0)
    assert (stale.id, stale.leased_until, stale.current) == (job.id, None, False)
    assert backend.must_get(job.id).leased_until == new.leased_until

    _, (current,) = backend.store.extend_leases([(job.id, 2)], 600.0, deadline=5.0)
    assert current.current
    assert current.leased_until is not None
    assert current.leased_until > new.leased_until  # type: ignore[operator]


def test_renewal_of_finished_waiting_and_missing_jobs_is_not_current(backend: Backend) -> None:
    done, back = backend.insert(), backend.insert()
    backend.store.claim_session().claim("default", 2, 60, "w1")
    backend.store.outcome_session().record(
        [Outcome(done.id, 1, JobState.COMPLETED), Outcome(back.id, 1, JobState.RETRYABLE)]
    )
    _, renewals = backend.store.extend_leases(
        [(done.id, 1), (back.id, 1), (987654321, 1)], 60, deadline=5.0
    )
    assert [(r.leased_until, r.current) for r in renewals] == [(None, False)] * 3
    assert backend.must_get(done.id).leased_until is None
    assert backend.must_get(back.id).leased_until is None


def test_renewal_of_nothing_is_nothing(backend: Backend) -> None:
    assert backend.store.extend_leases([], 60, deadline=5.0)[1] == []


def test_a_renewed_lease_is_not_rescued(backend: Backend) -> None:
    job = backend.insert()
    row = backend.claim_one(lease=0.3)
    backend.store.extend_leases([(job.id, 1)], 600.0, deadline=5.0)
    assert row.leased_until is not None
    backend.pass_time(row.leased_until)
    assert backend.store.rescue(10, 60, _back_now, by="rescuer") == (0, [])
    assert backend.must_get(job.id).state is JobState.RUNNING


# --- rescue -------------------------------------------------------------------------------------


def test_rescue_takes_an_expired_lease_and_not_a_live_one(backend: Backend) -> None:
    expiring, live = backend.insert(), backend.insert()
    short = backend.claim_one(lease=0.2)
    long = backend.claim_one(lease=600.0)
    assert (short.id, long.id) == (expiring.id, live.id)
    assert short.leased_until is not None
    backend.pass_time(short.leased_until)

    seen: list[JobRow] = []

    def decide(row: JobRow) -> Outcome:
        seen.append(row)
        return Outcome(row.id, row.attempt, JobState.RETRYABLE, None, error=HANDED_BACK)

    before = backend.now()
    found, recorded = backend.store.rescue(10, 45.0, decide, by="rescuer")
    after = backend.now()

    assert found == 1
    assert [(r.outcome.id, r.result) for r in recorded] == [(expiring.id, WriteResult.APPLIED)]
    (given,) = seen
    # decide sees the row re-leased to the rescue, its attempt unchanged.
    assert (given.id, given.state, given.attempt) == (expiring.id, JobState.RUNNING, 1)
    lease = timedelta(seconds=45)
    assert given.leased_until is not None
    assert before + lease <= given.leased_until <= after + lease

    row = backend.must_get(expiring.id)
    assert (row.state, row.attempt, row.errors, row.leased_until) == (
        JobState.RETRYABLE,
        1,
        (HANDED_BACK,),
        None,
    )
    assert backend.must_get(live.id) == long
    # The rescue spent no attempt: the next claim is the second.
    assert backend.claim_one().attempt == 2


def test_rescue_takes_the_oldest_expiry_first_and_at_most_limit(backend: Backend) -> None:
    for _ in range(3):
        backend.insert()
    # Claimed in id order with leases that expire in another order (second, third,
    # first); the order expected is read from the leases the store gave.
    rows = [backend.claim_one(lease=lease) for lease in (1.0, 0.2, 0.6)]
    by_expiry = [r.id for r in sorted(rows, key=lambda r: (r.leased_until, r.id))]
    latest = max(r.leased_until for r in rows if r.leased_until is not None)
    backend.pass_time(latest)

    decided: list[int] = []

    def decide(row: JobRow) -> Outcome:
        decided.append(row.id)
        return _back_now(row)

    found, recorded = backend.store.rescue(2, 60, decide, by="rescuer")
    assert found == 2
    assert sorted(decided) == sorted(by_expiry[:2])
    assert sorted(r.outcome.id for r in recorded) == sorted(by_expiry[:2])
    assert backend.must_get(by_expiry[2]).state is JobState.RUNNING

    found, recorded = backend.store.rescue(2, 60, decide, by="rescuer")
    assert (found, [r.outcome.id for r in recorded]) == (1, by_expiry[2:])
    assert backend.store.rescue(2, 60, decide, by="rescuer") == (0, [])


def test_a_rescued_job_is_not_rescued_again_while_the_rescue_holds_it(backend: Backend) -> None:
    """The rescue re-leases before it decides: an outcome the fence refuses leaves the row
    with the rescue's lease, so the next sweep does not take it at once."""
    job = backend.insert()
    row = backend.claim_one(lease=0.2)
    assert row.leased_until is not None
    backend.pass_time(row.leased_until)

    found, (refused,) = backend.store.rescue(
        10, 600.0, lambda r: Outcome(r.id, r.attempt + 5, JobState.RETRYABLE), by="rescuer"
    )
    assert (found, refused.result) == (1, WriteResult.LEASE_LOST)
    stored = backend.must_get(job.id)
    assert stored.state is JobState.RUNNING
    assert stored.leased_until is not None
    assert stored.leased_until > backend.now()
    assert backend.store.rescue(10, 600.0, _back_now, by="rescuer") == (0, [])


def test_rescue_can_end_a_job_dead(backend: Backend) -> None:
    job = backend.insert()
    row = backend.claim_one(lease=0.2)
    assert row.leased_until is not None
    backend.pass_time(row.leased_until)
    _, (recorded,) = backend.store.rescue(
        10, 60, lambda r: Outcome(r.id, r.attempt, JobState.DEAD, error=HANDED_BACK), by="r"
    )
    assert recorded.result is WriteResult.APPLIED
    stored = backend.must_get(job.id)
    assert (stored.state, stored.errors) == (JobState.DEAD, (HANDED_BACK,))
    assert stored.finalized_at is not None


# --- hand-back ----------------------------------------------------------------------------------


def test_hand_back_returns_the_job_due_now_with_its_attempt_counted(backend: Backend) -> None:
    job = backend.insert()
    row = backend.claim_one()
    before = backend.now()
    (recorded,) = backend.store.hand_back(
        [Outcome(row.id, row.attempt, JobState.RETRYABLE, None, error=HANDED_BACK)], worker="w1"
    )
    after = backend.now()

    assert recorded.result is WriteResult.APPLIED
    stored = backend.must_get(job.id)
    assert (stored.state, stored.attempt, stored.errors, stored.leased_until) == (
        JobState.RETRYABLE,
        1,
        (HANDED_BACK,),
        None,
    )
    assert before <= stored.scheduled_at <= after
    assert backend.claim_one().attempt == 2


def test_hand_back_of_a_claim_that_finished_is_refused(backend: Backend) -> None:
    job = backend.insert()
    row = backend.claim_one()
    backend.store.outcome_session().record([Outcome(job.id, 1, JobState.COMPLETED)])
    (recorded,) = backend.store.hand_back([_back_now(row)], worker="w1")
    assert (recorded.result, recorded.current_state) == (WriteResult.NOT_RUNNING, "completed")
    assert backend.must_get(job.id).state is JobState.COMPLETED
