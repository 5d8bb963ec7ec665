"""Insert and claim, on both stores: defaults, order, dueness, pause, attempts, leases, races."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

import drover
from drover._records import Outcome
from drover.job import NO_META, JobState

from .backends import Backend, params

HOUR = timedelta(hours=1)


# --- insert -------------------------------------------------------------------------------------


def test_insert_gives_the_defaults_the_database_gives(backend: Backend) -> None:
    before = backend.now()
    row = backend.insert(params("q", kind="k", args='{"n": 1}', priority=3, max_attempts=7))
    after = backend.now()

    assert (row.kind, row.queue, row.args, row.priority, row.max_attempts) == (
        "k",
        "q",
        {"n": 1},
        3,
        7,
    )
    assert row.state is JobState.AVAILABLE
    assert (row.attempt, row.errors, row.leased_until, row.finalized_at) == (0, (), None, None)
    assert (row.unique_key, row.progress, row.progress_message, row.tags) == (None, None, None, ())
    assert row.meta is NO_META
    assert before <= row.created_at <= after
    assert row.scheduled_at == row.created_at
    assert backend.must_get(row.id) == row


def test_insert_keeps_tags_meta_and_key(backend: Backend) -> None:
    row = backend.insert(params(tags=("a", "b"), meta='{"m": [1, 2]}', unique_key="key"))
    assert (row.tags, dict(row.meta), row.unique_key) == (("a", "b"), {"m": [1, 2]}, "key")
    assert backend.must_get(row.id) == row


def test_ids_increase(backend: Backend) -> None:
    ids = [backend.insert().id for _ in range(3)]
    assert ids == sorted(ids)
    assert len(set(ids)) == 3


def test_a_future_time_stores_the_job_scheduled_and_a_past_one_means_now(
    backend: Backend,
) -> None:
    now = backend.now()
    later = backend.insert(params(scheduled_at=now + HOUR))
    assert later.state is JobState.SCHEDULED
    assert later.scheduled_at == now + HOUR

    earlier = backend.insert(params(scheduled_at=now - HOUR))
    assert earlier.state is JobState.AVAILABLE
    assert earlier.scheduled_at == earlier.created_at >= now
    assert backend.must_get(earlier.id) == earlier


def test_a_unique_key_held_by_an_active_job_refuses_a_second_insert(backend: Backend) -> None:
    first = backend.insert(params(unique_key="once"))
    with pytest.raises(drover.DuplicateJob):
        backend.insert(params(unique_key="once"))
    # Another kind or queue does not collide.
    backend.insert(params(unique_key="once", kind="other"))
    backend.insert(params("elsewhere", unique_key="once"))

    claimed = backend.claim_one()
    assert claimed.id == first.id
    with pytest.raises(drover.DuplicateJob):
        backend.insert(params(unique_key="once"))  # running still holds it

    session = backend.store.outcome_session()
    session.record([Outcome(first.id, 1, JobState.COMPLETED)])
    again = backend.insert(params(unique_key="once"))
    assert again.id != first.id


def test_get_of_a_missing_job_is_none(backend: Backend) -> None:
    assert backend.store.get(987654321) is None


# --- claim --------------------------------------------------------------------------------------


def _retry_at(backend: Backend, job_id: int, attempt: int, offset: timedelta) -> None:
    """Put a claimed job back as retryable, due ``offset`` from now (negative: in the past)."""
    results = backend.store.outcome_session().record(
        [Outcome(job_id, attempt, JobState.RETRYABLE, backend.now() + offset)]
    )
    assert results[0].result.value == "applied"


def test_claim_takes_priority_then_scheduled_at_then_id(backend: Backend) -> None:
    j1 = backend.insert()
    j2 = backend.insert()
    session = backend.store.claim_session()
    assert [r.id for r in session.claim("default", 2, 60, "w1").rows] == [j1.id, j2.id]
    # j2 due an hour ago, j1 a minute ago: the older due time wins over the lower id.
    _retry_at(backend, j2.id, 1, -HOUR)
    _retry_at(backend, j1.id, 1, -timedelta(minutes=1))
    j3 = backend.insert(params(priority=1))  # due now, later than both, higher priority
    j4 = backend.insert()  # due now, the latest

    order = [session.claim("default", 1, 60, "w1").rows[0].id for _ in range(4)]
    assert order == [j3.id, j2.id, j1.id, j4.id]
    assert session.claim("default", 1, 60, "w1").rows == []


def test_claim_breaks_a_tie_by_the_lowest_id(backend: Backend) -> None:
    a, b = backend.insert(), backend.insert()
    session = backend.store.claim_session()
    session.claim("default", 2, 60, "w1")
    at = backend.now() - HOUR
    backend.store.outcome_session().record(
        [
            Outcome(b.id, 1, JobState.RETRYABLE, at),
            Outcome(a.id, 1, JobState.RETRYABLE, at),
        ]
    )
    assert [session.claim("default", 1, 60, "w1").rows[0].id for _ in range(2)] == [a.id, b.id]


def test_a_claim_returns_up_to_limit_rows_sorted_by_id(backend: Backend) -> None:
    low = [backend.insert() for _ in range(3)]
    high = [backend.insert(params(priority=5)) for _ in range(2)]
    rows = backend.store.claim_session().claim("default", 4, 60, "w1").rows
    # The two of priority 5 and the two oldest of priority 0, in id order.
    assert [r.id for r in rows] == sorted([low[0].id, low[1].id, high[0].id, high[1].id])


def test_a_claim_takes_only_its_queue(backend: Backend) -> None:
    mine = backend.insert(params("mine"))
    backend.insert(params("theirs"))
    rows = backend.store.claim_session().claim("mine", 10, 60, "w1").rows
    assert [r.id for r in rows] == [mine.id]


def test_a_job_not_yet_due_is_not_claimed_until_it_is(backend: Backend) -> None:
    now = backend.now()
    later = backend.insert(params(scheduled_at=now + timedelta(seconds=0.3)))
    session = backend.store.claim_session()
    assert session.claim("default", 10, 60, "w1").rows == []

    backend.pass_time(later.scheduled_at)
    rows = session.claim("default", 10, 60, "w1").rows
    assert [r.id for r in rows] == [later.id]
    assert backend.hidden(later.id).attempted_at is not None
    assert backend.hidden(later.id).attempted_at >= later.scheduled_at  # type: ignore[operator]


def test_a_retryable_job_waits_for_its_time(backend: Backend) -> None:
    row = backend.insert()
    backend.claim_one()
    _retry_at(backend, row.id, 1, HOUR)
    assert backend.must_get(row.id).state is JobState.RETRYABLE
    assert backend.store.claim_session().claim("default", 10, 60, "w1").rows == []


def test_a_paused_queue_yields_nothing_until_resumed(backend: Backend) -> None:
    held = backend.insert(params("held"))
    free = backend.insert(params("free"))
    backend.pause("held")
    session = backend.store.claim_session()
    assert session.claim("held", 10, 60, "w1").rows == []
    assert [r.id for r in session.claim("free", 10, 60, "w1").rows] == [free.id]
    assert backend.must_get(held.id).state is JobState.AVAILABLE

    backend.resume("held")
    assert [r.id for r in session.claim("held", 10, 60, "w1").rows] == [held.id]


def test_a_claim_spends_an_attempt_and_leases_on_the_stores_clock(backend: Backend) -> None:
    job = backend.insert()
    before = backend.now()
    claimed = backend.store.claim_session().claim("default", 1, 30.0, "holder-1")
    after = backend.now()

    (row,) = claimed.rows
    assert (row.id, row.state, row.attempt) == (job.id, JobState.RUNNING, 1)
    lease = timedelta(seconds=30)
    assert row.leased_until is not None
    assert before + lease <= row.leased_until <= after + lease
    assert claimed.wakes == frozenset()
    hidden = backend.hidden(job.id)
    assert hidden.leased_by == "holder-1"
    assert hidden.attempted_at is not None
    assert before <= hidden.attempted_at <= after
    assert row.leased_until - hidden.attempted_at == lease
    assert backend.must_get(job.id) == row

    _retry_at(backend, job.id, 1, -HOUR)
    assert backend.claim_one().attempt == 2


def test_claim_limits_out_of_range_are_refused(backend: Backend) -> None:
    row = backend.insert()
    session = backend.store.claim_session()
    for limit in (0, -1, 2**31):
        with pytest.raises(ValueError, match="claim limit"):
            session.claim("default", limit, 60, "w1")
    assert backend.must_get(row.id) == row


def test_concurrent_claim_sessions_never_return_the_same_job(backend: Backend) -> None:
    total = 120
    inserted = {backend.insert().id for _ in range(total)}
    sessions = 3
    start = threading.Barrier(sessions)
    taken: list[list[int]] = [[] for _ in range(sessions)]
    failures: list[BaseException] = []

    def fetch(index: int) -> None:
        session = backend.store.claim_session()
        try:
            start.wait(timeout=10)
            while rows := session.claim("default", 4, 60, f"w{index}").rows:
                taken[index].extend(r.id for r in rows)
        except BaseException as exc:
            failures.append(exc)
        finally:
            session.release()

    threads = [threading.Thread(target=fetch, args=(i,)) for i in range(sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert not failures, failures
    every = [job_id for ids in taken for job_id in ids]
    assert len(every) == len(set(every)) == total
    assert set(every) == inserted
