"""``complete_in_tx`` on both stores: a completion in the caller's transaction, and its row lock.

PostgreSQL joins a psycopg connection in a transaction; the in-memory store
joins a ``MemoryTransaction``. Either way the completion is the caller's
until it commits, and the row stays locked until the transaction ends.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import pytest
from jobdb import Poll

import drover
from drover._records import Outcome, Recorded, WriteResult
from drover.job import JobState

from .backends import Backend


def test_a_committed_completion_is_terminal_with_its_result(backend: Backend) -> None:
    job = backend.insert()
    backend.claim_one()
    before = backend.now()
    tx = backend.begin()
    after = backend.now()
    assert backend.store.transaction_open(tx.handle)

    backend.store.complete_in_tx(tx.handle, job.id, 1, '{"ok": true}')
    # Nobody else sees it before the commit.
    assert backend.must_get(job.id).state is JobState.RUNNING
    assert backend.hidden(job.id).result is None
    tx.commit()
    assert not backend.store.transaction_open(tx.handle)

    row = backend.must_get(job.id)
    assert (row.state, row.attempt, row.leased_until) == (JobState.COMPLETED, 1, None)
    # finalized_at is the transaction's time: when it began.
    assert row.finalized_at is not None
    assert before <= row.finalized_at <= after
    result = backend.hidden(job.id).result
    assert result is not None
    assert json.loads(result) == {"ok": True}
    (late,) = backend.store.outcome_session().record([Outcome(job.id, 1, JobState.COMPLETED)])
    assert (late.result, late.current_state) == (WriteResult.NOT_RUNNING, "completed")


def test_a_rolled_back_completion_leaves_the_claim_running(backend: Backend) -> None:
    job = backend.insert()
    claimed = backend.claim_one()
    tx = backend.begin()
    backend.store.complete_in_tx(tx.handle, job.id, 1, None)
    tx.rollback()
    assert not backend.store.transaction_open(tx.handle)

    assert backend.must_get(job.id) == claimed
    (recorded,) = backend.store.outcome_session().record([Outcome(job.id, 1, JobState.RETRYABLE)])
    assert recorded.result is WriteResult.APPLIED


def test_a_superseded_claim_raises_lease_lost(backend: Backend) -> None:
    job = backend.insert()
    backend.claim_one()
    backend.store.hand_back([Outcome(job.id, 1, JobState.RETRYABLE)], worker="w1")
    tx = backend.begin()
    with pytest.raises(drover.LeaseLost) as raised:
        backend.store.complete_in_tx(tx.handle, job.id, 1, None)
    assert (raised.value.state, raised.value.current_attempt) == ("retryable", 1)

    backend.claim_one()
    with pytest.raises(drover.LeaseLost) as raised:
        backend.store.complete_in_tx(tx.handle, job.id, 1, None)
    assert (raised.value.job_id, raised.value.attempt) == (job.id, 1)
    assert (raised.value.state, raised.value.current_attempt) == ("running", 2)

    with pytest.raises(drover.LeaseLost) as raised:
        backend.store.complete_in_tx(tx.handle, 987654321, 1, None)
    assert (raised.value.state, raised.value.current_attempt) == (None, None)

    # The refusals wrote nothing and left the caller's transaction usable.
    assert backend.store.transaction_open(tx.handle)
    backend.store.complete_in_tx(tx.handle, job.id, 2, None)
    tx.commit()
    assert backend.must_get(job.id).state is JobState.COMPLETED


def test_a_second_completion_in_the_same_transaction_sees_the_first(backend: Backend) -> None:
    job = backend.insert()
    backend.claim_one()
    tx = backend.begin()
    backend.store.complete_in_tx(tx.handle, job.id, 1, None)
    with pytest.raises(drover.LeaseLost) as raised:
        backend.store.complete_in_tx(tx.handle, job.id, 1, None)
    assert (raised.value.state, raised.value.current_attempt) == ("completed", 1)
    tx.rollback()
    assert backend.must_get(job.id).state is JobState.RUNNING


def test_a_connection_drover_cannot_use_is_refused(backend: Backend) -> None:
    job = backend.insert()
    claimed = backend.claim_one()
    with pytest.raises(drover.UnsupportedConnection):
        backend.store.complete_in_tx(object(), job.id, 1, None)
    assert not backend.store.transaction_open(object())
    assert backend.must_get(job.id) == claimed


# --- the row lock while the transaction is open -----------------------------------------------


def test_an_open_completion_is_not_renewed_but_still_current(backend: Backend) -> None:
    job = backend.insert()
    claimed = backend.claim_one()
    tx = backend.begin()
    backend.store.complete_in_tx(tx.handle, job.id, 1, None)

    _, (renewal,) = backend.store.extend_leases([(job.id, 1)], 600.0, deadline=5.0)
    assert (renewal.leased_until, renewal.current) == (None, True)
    tx.rollback()
    assert backend.must_get(job.id).leased_until == claimed.leased_until
    _, (renewal,) = backend.store.extend_leases([(job.id, 1)], 600.0, deadline=5.0)
    assert renewal.leased_until is not None
    assert renewal.current


def test_an_open_completion_is_not_rescued_until_it_rolls_back(backend: Backend) -> None:
    job = backend.insert()
    claimed = backend.claim_one(lease=0.2)
    tx = backend.begin()
    backend.store.complete_in_tx(tx.handle, job.id, 1, None)
    assert claimed.leased_until is not None
    backend.pass_time(claimed.leased_until)

    def back(row: Any) -> Outcome:
        return Outcome(row.id, row.attempt, JobState.RETRYABLE)

    assert backend.store.rescue(10, 60, back, by="rescuer") == (0, [])
    tx.rollback()
    found, (recorded,) = backend.store.rescue(10, 60, back, by="rescuer")
    assert (found, recorded.result) == (1, WriteResult.APPLIED)


def _write_in_thread(
    backend: Backend, write: Callable[[], list[Recorded]]
) -> tuple[threading.Thread, list[list[Recorded]]]:
    got: list[list[Recorded]] = []
    thread = threading.Thread(target=lambda: got.append(write()))
    thread.start()
    return thread, got


# A write that waited for the transaction reports the row as that transaction
# left it: the batch of plain completions reads it afterwards, and the general
# statement, whose snapshot still saw the claim current, hands it to the
# features' statement, which writes (and reads) in a new snapshot.
REFUSED_AFTER_WAIT = {
    "failure": (WriteResult.NOT_RUNNING, "completed", 1),
    "completion": (WriteResult.NOT_RUNNING, "completed", 1),
}


@pytest.mark.parametrize("write", ["failure", "completion"])
@pytest.mark.parametrize("end", ["commit", "rollback"])
def test_an_outcome_write_waits_for_the_transaction_then_sees_its_end(
    backend: Backend, end: str, write: str, poll: Poll
) -> None:
    job = backend.insert()
    backend.claim_one()
    tx = backend.begin()
    backend.store.complete_in_tx(tx.handle, job.id, 1, None)
    assert backend.lock_waiters() == 0

    state = JobState.RETRYABLE if write == "failure" else JobState.COMPLETED
    thread, got = _write_in_thread(
        backend, lambda: backend.store.outcome_session().record([Outcome(job.id, 1, state)])
    )
    poll(lambda: backend.lock_waiters() == 1, message="the write to wait for the row lock")
    assert thread.is_alive()

    if end == "commit":
        tx.commit()
    else:
        tx.rollback()
    thread.join(timeout=10)
    assert not thread.is_alive()
    ((recorded,),) = got
    if end == "commit":
        refused = (recorded.result, recorded.current_state, recorded.current_attempt)
        assert refused == REFUSED_AFTER_WAIT[write]
        assert backend.must_get(job.id).state is JobState.COMPLETED
    else:
        assert recorded.result is WriteResult.APPLIED
        assert backend.must_get(job.id).state is state


def test_a_hand_back_waits_for_the_transaction_too(backend: Backend, poll: Poll) -> None:
    job = backend.insert()
    backend.claim_one()
    tx = backend.begin()
    backend.store.complete_in_tx(tx.handle, job.id, 1, None)
    thread, got = _write_in_thread(
        backend,
        lambda: backend.store.hand_back([Outcome(job.id, 1, JobState.RETRYABLE)], worker="w1"),
    )
    poll(lambda: backend.lock_waiters() == 1, message="the hand-back to wait for the row lock")
    tx.commit()
    thread.join(timeout=10)
    assert not thread.is_alive()
    ((recorded,),) = got
    refused = (recorded.result, recorded.current_state, recorded.current_attempt)
    assert refused == REFUSED_AFTER_WAIT["failure"]
    assert backend.must_get(job.id).state is JobState.COMPLETED
