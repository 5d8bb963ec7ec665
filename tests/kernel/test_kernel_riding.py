"""Completions carried by a claim (ADR 0058), on both stores: written first, fenced as any.

A busy fetcher's claim carries the plain completions of the jobs its slots
just finished, so a batch's ends and the next batch's starts are one round
trip. What a carried completion writes, refuses and reports must be exactly
what the completer's own write would: the same fence, results in input order,
handed over before the claim returns.
"""

from __future__ import annotations

from drover._records import Outcome, Recorded, WriteResult
from drover.job import JobState

from .backends import Backend


def _claim_carrying(
    backend: Backend, completions: list[Outcome], limit: int = 5
) -> tuple[list[int], list[list[Recorded]]]:
    """Claim carrying ``completions``; the claimed ids and, as one batch, every
    completion's final result in input order: what ``landed`` got, and for each one
    the claim left out, what ``record`` then says (as the fetcher's completer does)."""
    landed: list[list[Recorded]] = []
    session = backend.store.claim_session()
    try:
        claimed = session.claim(
            "default", limit, 60, "w1", completions=completions, landed=landed.append
        )
    finally:
        session.release()
    assert len(landed) == 1
    final = {(r.outcome.id, r.outcome.attempt): r for r in landed[0]}
    left = [o for o in completions if (o.id, o.attempt) not in final]
    if left:
        outcomes = backend.store.outcome_session()
        try:
            final.update({(r.outcome.id, r.outcome.attempt): r for r in outcomes.record(left)})
        finally:
            outcomes.release()
    return [r.id for r in claimed.rows], [[final[(o.id, o.attempt)] for o in completions]]


def test_a_claim_writes_the_completions_it_carries_and_claims_as_usual(backend: Backend) -> None:
    a, b, c = backend.insert(), backend.insert(), backend.insert()
    session = backend.store.claim_session()
    assert [r.id for r in session.claim("default", 2, 60, "w1").rows] == [a.id, b.id]
    session.release()

    ids, landed = _claim_carrying(
        backend,
        [Outcome(b.id, 1, JobState.COMPLETED), Outcome(a.id, 1, JobState.COMPLETED)],
    )

    assert ids == [c.id]
    (results,) = landed
    assert [(r.outcome.id, r.result) for r in results] == [
        (b.id, WriteResult.APPLIED),
        (a.id, WriteResult.APPLIED),
    ]
    for job in (a, b):
        row = backend.must_get(job.id)
        assert (row.state, row.attempt, row.leased_until) == (JobState.COMPLETED, 1, None)
        assert row.finalized_at is not None
    assert backend.must_get(c.id).state is JobState.RUNNING


def test_completions_carried_by_a_claim_that_finds_nothing_are_written(backend: Backend) -> None:
    job = backend.insert()
    backend.claim_one()
    ids, landed = _claim_carrying(backend, [Outcome(job.id, 1, JobState.COMPLETED)])
    assert ids == []
    assert [r.result for r in landed[0]] == [WriteResult.APPLIED]
    assert backend.must_get(job.id).state is JobState.COMPLETED


def test_a_stale_completion_carried_by_a_claim_is_refused_and_says_why(backend: Backend) -> None:
    job = backend.insert()
    first = backend.claim_one(lease=0.2)
    assert first.leased_until is not None
    backend.pass_time(first.leased_until)
    found, rescued = backend.store.rescue(
        10, 60, lambda r: Outcome(r.id, r.attempt, JobState.RETRYABLE), by="rescuer"
    )
    assert found == 1
    assert [r.result for r in rescued] == [WriteResult.APPLIED]
    again = backend.claim_one()
    assert again.attempt == 2

    # The first claim's completion, carried late, and the current one's in the same claim.
    ids, landed = _claim_carrying(
        backend,
        [Outcome(job.id, 1, JobState.COMPLETED), Outcome(job.id, 2, JobState.COMPLETED)],
    )

    assert ids == []
    (stale, current) = landed[0]
    assert current.result is WriteResult.APPLIED
    # The plain completions' reading: the row as it is after the write, whose
    # state is checked before its attempt (completed by the current claim).
    assert stale.result is WriteResult.NOT_RUNNING
    assert (stale.current_state, stale.current_attempt) == (JobState.COMPLETED.value, 2)
    row = backend.must_get(job.id)
    assert (row.state, row.attempt) == (JobState.COMPLETED, 2)


def test_a_completion_for_a_job_no_longer_running_is_refused_not_running(
    backend: Backend,
) -> None:
    job = backend.insert()
    backend.claim_one()
    session = backend.store.outcome_session()
    session.record([Outcome(job.id, 1, JobState.COMPLETED)])
    session.release()

    _, landed = _claim_carrying(backend, [Outcome(job.id, 1, JobState.COMPLETED)])

    (refused,) = landed[0]
    assert refused.result is WriteResult.NOT_RUNNING
    assert refused.current_state == JobState.COMPLETED.value
