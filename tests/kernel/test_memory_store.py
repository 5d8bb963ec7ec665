"""What only the in-memory store has: its clock, its transaction object, its input checks, its
imports. The behaviours both stores share are in the conformance tests beside this file."""

from __future__ import annotations

import ast
import threading
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from jobdb import Poll

import drover
from drover._kernel import memory
from drover._kernel.memory import ManualClock, MemoryStore, system_clock
from drover._kernel.store import KernelStore
from drover._records import Outcome
from drover.job import JobRow, JobState

from .backends import params


def test_the_memory_store_is_a_kernel_store() -> None:
    store: KernelStore = MemoryStore()  # mypy checks the protocol here
    assert store.get(1) is None


def test_it_imports_only_the_model_layer_and_the_standard_library() -> None:
    allowed = {
        "drover._durations",
        "drover._kernel.store",
        "drover._records",
        "drover.errors",
        "drover.job",
        "drover.queues",
    }
    tree = ast.parse(Path(memory.__file__).read_text(encoding="utf-8"))
    imported = {
        name
        for node in ast.walk(tree)
        for name in (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
    }
    ours = {name for name in imported if name.startswith("drover")}
    assert ours <= allowed, ours - allowed
    assert not {name for name in imported if name.split(".")[0] in {"psycopg", "psycopg_pool"}}


def test_the_default_clock_is_the_systems_in_utc() -> None:
    store = MemoryStore()
    before = datetime.now(UTC)
    row = store.insert(params())
    after = datetime.now(UTC)
    assert store.clock is system_clock
    assert row.created_at.tzinfo is UTC
    assert before <= row.created_at <= after


def test_a_manual_clock_moves_only_forward_and_when_told() -> None:
    start = datetime(2030, 1, 1, 12, tzinfo=timezone(timedelta(hours=2)))
    clock = ManualClock(start)
    assert clock() == start
    assert clock().tzinfo is UTC
    assert clock.advance(1.5) == start + timedelta(seconds=1.5)
    assert clock.advance(timedelta(minutes=1)) == start + timedelta(seconds=61.5)
    with pytest.raises(drover.InvalidArgument):
        clock.advance(-1)
    with pytest.raises(drover.ConfigError):
        clock.advance("soon")  # type: ignore[arg-type]
    with pytest.raises(drover.InvalidArgument):
        ManualClock(datetime(2030, 1, 1))  # naive


def test_leases_and_dueness_follow_the_injected_clock() -> None:
    clock = ManualClock()
    store = MemoryStore(clock)
    job = store.insert(params(scheduled_at=clock() + timedelta(seconds=10)))
    session = store.claim_session()
    assert session.claim("default", 1, 5, "w").rows == []
    clock.advance(10)
    (row,) = session.claim("default", 1, 5, "w").rows
    assert row.leased_until == clock() + timedelta(seconds=5)
    clock.advance(4.999)
    assert (
        store.rescue(10, 5, lambda r: Outcome(r.id, r.attempt, JobState.RETRYABLE), by="r")[0] == 0
    )
    clock.advance(0.001)
    found, _ = store.rescue(10, 5, lambda r: Outcome(r.id, r.attempt, JobState.RETRYABLE), by="r")
    assert found == 1
    assert store.get(job.id) is not None


def test_rows_are_snapshots_the_caller_cannot_change_the_store_through() -> None:
    store = MemoryStore()
    job = store.insert(params(args='{"items": [1]}', meta='{"m": {"k": 1}}'))
    job.args["items"].append(2)
    job.meta["m"]["k"] = 2
    again = store.get(job.id)
    assert again is not None
    assert (again.args, dict(again.meta)) == ({"items": [1]}, {"m": {"k": 1}})


def test_a_failing_decide_changes_nothing() -> None:
    clock = ManualClock()
    store = MemoryStore(clock)
    job = store.insert(params())
    (row,) = store.claim_session().claim("default", 1, 1, "w").rows
    clock.advance(2)

    def broken(row: JobRow) -> Outcome:
        raise RuntimeError("policy bug")

    with pytest.raises(RuntimeError):
        store.rescue(10, 60, broken, by="r")
    assert store.get(job.id) == row


def test_decide_may_read_the_store() -> None:
    clock = ManualClock()
    store = MemoryStore(clock)
    job = store.insert(params())
    store.claim_session().claim("default", 1, 1, "w")
    clock.advance(2)

    def reading(row: JobRow) -> Outcome:
        assert store.get(row.id) is not None  # the lock is re-entrant
        return Outcome(row.id, row.attempt, JobState.RETRYABLE)

    assert store.rescue(10, 60, reading, by="r")[0] == 1
    assert store.get(job.id) is not None


def test_pause_is_idempotent_and_resume_says_whether_it_was_paused() -> None:
    clock = ManualClock()
    store = MemoryStore(clock)
    first = store.pause_queue("q")
    clock.advance(5)
    second = store.pause_queue("q")
    assert (second.name, second.paused_at, second.paused) == ("q", first.paused_at, True)
    assert second.updated_at == first.updated_at + timedelta(seconds=5)
    assert store.resume_queue("q")
    assert not store.resume_queue("q")


def test_hidden_of_a_missing_job_is_none() -> None:
    assert MemoryStore().hidden(1) is None


# --- the transaction object -------------------------------------------------------------------


def _claimed(store: MemoryStore) -> JobRow:
    store.insert(params())
    (row,) = store.claim_session().claim("default", 1, 60, "w").rows
    return row


def test_a_transaction_commits_as_a_context_manager_and_rolls_back_on_error() -> None:
    store = MemoryStore()
    row = _claimed(store)
    with store.transaction() as tx:
        store.complete_in_tx(tx, row.id, 1, None)
    assert not tx.open
    assert store.get(row.id).state is JobState.COMPLETED  # type: ignore[union-attr]

    other = _claimed(store)

    def fail_after_completing() -> None:
        with store.transaction() as tx:
            store.complete_in_tx(tx, other.id, 1, None)
            raise KeyError("the caller's own failure")

    with pytest.raises(KeyError):
        fail_after_completing()
    assert store.get(other.id) == other
    tx.rollback()  # ending the committed one again changes nothing
    assert store.get(row.id).state is JobState.COMPLETED  # type: ignore[union-attr]


def test_an_ended_or_foreign_transaction_is_refused() -> None:
    store = MemoryStore()
    row = _claimed(store)
    tx = store.transaction()
    tx.rollback()
    with pytest.raises(drover.NotInTransaction):
        store.complete_in_tx(tx, row.id, 1, None)
    with pytest.raises(drover.UnsupportedConnection, match="another in-memory store"):
        store.complete_in_tx(MemoryStore().transaction(), row.id, 1, None)
    assert store.get(row.id) == row


def test_a_second_transaction_waits_for_the_first(poll: Poll) -> None:
    store = MemoryStore()
    row = _claimed(store)
    first = store.transaction()
    store.complete_in_tx(first, row.id, 1, None)
    second = store.transaction()
    raised: list[BaseException] = []

    def complete() -> None:
        try:
            store.complete_in_tx(second, row.id, 1, None)
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=complete)
    thread.start()
    poll(lambda: store.lock_waiters == 1, message="the second completion to wait")
    first.commit()
    thread.join(timeout=10)
    assert not thread.is_alive()
    (lost,) = raised
    assert isinstance(lost, drover.LeaseLost)
    assert (lost.state, lost.current_attempt) == ("completed", 1)
    second.rollback()


# --- input the store refuses ------------------------------------------------------------------


def test_bad_json_and_naive_times_are_refused_and_change_nothing() -> None:
    store = MemoryStore()
    with pytest.raises(drover.InvalidArgument, match="args"):
        store.insert(params(args="{nope"))
    with pytest.raises(drover.InvalidArgument, match="metadata"):
        store.insert(params(meta="[1]"))
    with pytest.raises(drover.InvalidArgument, match="timezone-aware"):
        store.insert(params(scheduled_at=datetime(2030, 1, 1)))
    assert store.get(1) is None

    row = _claimed(store)
    session = store.outcome_session()
    with pytest.raises(drover.InvalidArgument, match="result"):
        session.record([Outcome(row.id, 1, JobState.COMPLETED, result="{nope")])
    with pytest.raises(drover.InvalidArgument, match="timezone-aware"):
        session.record([Outcome(row.id, 1, JobState.RETRYABLE, datetime(2030, 1, 1))])
    with pytest.raises(TypeError):
        session.record([Outcome(row.id, 1, JobState.DEAD, error={"at": object()})])
    with pytest.raises(drover.InvalidArgument, match="result"), store.transaction() as tx:
        store.complete_in_tx(tx, row.id, 1, "{nope")
    assert store.get(row.id) == row
