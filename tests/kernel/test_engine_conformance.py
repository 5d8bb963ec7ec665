"""The kernel's services, run against every store: the behaviour at-least-once rests on.

Each test builds a ``Kernel`` (fetcher, executor, completer, heartbeat,
rescuer, shutdown) on the ``engine_store`` fixture, which gives the
in-memory store (on the real clock: the engine's threads let time pass) and
PostgreSQL's in turn, and checks one
behaviour the same way on both: a drain, retries, snoozes, cancels, dead
jobs, lease renewal, the rescue of a dead worker's claim, the fence against
a superseded run, and the shutdown drain with its hand-back. No feature is
attached: this is what the kernel does on its own (ADR 0045).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest

from drover._kernel.claims import InFlight, Slots
from drover._kernel.engine import Kernel
from drover._kernel.kit import Hooks, Kit, Settings, StaleWrite
from drover._kernel.memory import MemoryStore
from drover._kernel.store import KernelStore
from drover._records import JobInsertParams
from drover.context import JobContext
from drover.errors import Cancel, DatabaseError, DrainIncomplete, Snooze
from drover.job import JobRow, JobState
from drover.retry import RetryPolicy

from .backends import PgBackend

T = TypeVar("T")


def poll(predicate: Callable[[], T], *, timeout: float, message: str) -> T:
    """Until ``predicate`` returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"condition not met within {timeout}s: {message}")
        time.sleep(0.01)


class _Now(RetryPolicy):
    """Retry at once: the tests wait for the second run, not for a backoff."""

    def next_retry(self, job: JobRow) -> datetime:
        return datetime.now(UTC)


Behaviour = Callable[[JobContext, JobRow], None]


class Harness:
    """A kernel on one store, whose handler does what the job's ``do`` arg names."""

    def __init__(self, store: KernelStore, **settings: Any) -> None:
        self.store = store
        self.runs: list[tuple[int, int]] = []
        self.stale: list[StaleWrite] = []
        self.behaviours: dict[str, Behaviour] = {}
        self._lock = threading.Lock()
        fields: dict[str, Any] = {
            "concurrency": 4,
            "poll_interval": 0.05,
            "lease_seconds": 5.0,
            "heartbeat_interval": 0.5,
            "rescue_interval": 0.2,
            "retry_policy": _Now(),
        }
        fields.update(settings)
        hooks = Hooks()
        hooks.stale.append(self.stale.extend)
        self.before_hand_back: list[tuple[list[int], JobState | None]] = []
        hooks.before_hand_back.append(self._before_hand_back)
        self.kit = Kit(
            store=store,
            settings=Settings(**fields),
            inflight=InFlight(),
            slots=Slots(fields["concurrency"]),
            client_id="conform",
            hooks=hooks,
        )
        self.kernel = Kernel(self.kit, chain=self._handle)
        self.started = False

    def _before_hand_back(self, ids: list[int]) -> None:
        # What the door sees, and the first job's state then: not yet written back.
        first = self.store.get(ids[0]) if ids else None
        self.before_hand_back.append((ids, None if first is None else first.state))

    def _handle(self, ctx: JobContext, row: JobRow) -> None:
        with self._lock:
            self.runs.append((row.id, row.attempt))
        do = row.args.get("do", "ok")
        behaviour = self.behaviours.get(do)
        if behaviour is not None:
            behaviour(ctx, row)

    def insert(self, do: str = "ok", *, max_attempts: int = 5, priority: int = 0) -> JobRow:
        row = self.store.insert(
            JobInsertParams(
                "conform", "default", json.dumps({"do": do}), max_attempts, None, None, priority
            )
        )
        if self.started:
            self.kernel.wake()
        return row

    def start(self) -> None:
        self.kernel.start()
        self.started = True

    def stop(self, timeout: float | None = 10.0) -> DrainIncomplete | None:
        self.started = False
        return self.kernel.stop(timeout)

    def job(self, job_id: int) -> JobRow:
        row = self.store.get(job_id)
        assert row is not None
        return row

    def ends(self, job_id: int, state: JobState, timeout: float = 20.0) -> JobRow:
        def ended() -> JobRow | None:
            row = self.job(job_id)
            return row if row.state is state else None

        found = poll(ended, timeout=timeout, message=f"job {job_id} ends {state.value}")
        assert found is not None
        return found


@pytest.fixture(params=["memory", "postgres"])
def engine_store(request: pytest.FixtureRequest) -> Iterator[KernelStore]:
    """A store for a running kernel: ``MemoryStore`` on the real clock, then PostgreSQL's."""
    if request.param == "memory":
        yield MemoryStore()
        return
    backend = PgBackend(request.getfixturevalue("db_url"))
    try:
        yield backend.store
    finally:
        backend.close()


@pytest.fixture
def harness(engine_store: KernelStore) -> Iterator[Callable[..., Harness]]:
    made: list[Harness] = []

    def make(**settings: Any) -> Harness:
        h = Harness(engine_store, **settings)
        made.append(h)
        return h

    yield make
    for h in made:
        if h.started:
            h.stop(5.0)


def test_a_drain_runs_every_job_once_and_completes_it(harness: Callable[..., Harness]) -> None:
    h = harness()
    ids = [h.insert().id for _ in range(30)]
    h.start()
    for job_id in ids:
        row = h.ends(job_id, JobState.COMPLETED)
        assert row.attempt == 1 and row.finalized_at is not None and row.leased_until is None
    assert h.stop() is None
    assert sorted(h.runs) == sorted((i, 1) for i in ids)


def test_a_failure_is_retried_then_completes(harness: Callable[..., Harness]) -> None:
    h = harness()

    def fail_first(ctx: JobContext, row: JobRow) -> None:
        if row.attempt == 1:
            raise RuntimeError("boom")

    h.behaviours["flaky"] = fail_first
    job = h.insert("flaky")
    h.start()
    row = h.ends(job.id, JobState.COMPLETED)
    assert row.attempt == 2
    assert [e["error"] for e in row.errors] == ["RuntimeError: boom"]
    assert row.errors[0]["attempt"] == 1


def test_attempts_used_up_end_dead(harness: Callable[..., Harness]) -> None:
    h = harness()

    def always(ctx: JobContext, row: JobRow) -> None:
        raise ValueError(f"no {row.attempt}")

    h.behaviours["bad"] = always
    job = h.insert("bad", max_attempts=2)
    h.start()
    row = h.ends(job.id, JobState.DEAD)
    assert row.attempt == 2 and len(row.errors) == 2 and row.finalized_at is not None


def test_a_snooze_runs_again_without_spending_an_attempt(harness: Callable[..., Harness]) -> None:
    h = harness()
    snoozed = threading.Event()

    def snooze_once(ctx: JobContext, row: JobRow) -> None:
        if not snoozed.is_set():
            snoozed.set()
            raise Snooze(timedelta(milliseconds=100))

    h.behaviours["later"] = snooze_once
    job = h.insert("later")
    h.start()
    row = h.ends(job.id, JobState.COMPLETED)
    assert row.attempt == 1 and row.errors == ()
    assert [a for i, a in h.runs if i == job.id] == [1, 1]


def test_a_cancel_ends_the_job_cancelled_with_its_reason(harness: Callable[..., Harness]) -> None:
    h = harness()

    def cancel(ctx: JobContext, row: JobRow) -> None:
        raise Cancel("not wanted")

    h.behaviours["cancel"] = cancel
    job = h.insert("cancel")
    h.start()
    row = h.ends(job.id, JobState.CANCELLED)
    assert row.attempt == 1 and "not wanted" in row.errors[-1]["error"]


def test_the_heartbeat_keeps_a_long_job_s_lease(harness: Callable[..., Harness]) -> None:
    h = harness(lease_seconds=1.0, heartbeat_interval=0.2, rescue_interval=0.1)
    release = threading.Event()
    started = threading.Event()

    def long(ctx: JobContext, row: JobRow) -> None:
        started.set()
        release.wait(30)

    h.behaviours["long"] = long
    job = h.insert("long")
    h.start()
    assert started.wait(20)
    first = h.job(job.id).leased_until
    assert first is not None
    # Three leases' worth of renewals: the rescuer (every 0.1 s) never takes it.
    poll(
        lambda: (u := h.job(job.id).leased_until) is not None and u > first + timedelta(seconds=2),
        timeout=30,
        message="the lease moved on by two seconds",
    )
    release.set()
    row = h.ends(job.id, JobState.COMPLETED)
    assert row.attempt == 1 and row.errors == ()
    assert h.runs.count((job.id, 1)) == 1


def test_a_dead_worker_s_claim_is_rescued_and_run_again(harness: Callable[..., Harness]) -> None:
    h = harness(rescue_interval=0.1)
    job = h.insert()
    # Another worker claims it with a short lease and dies: it never writes again.
    session = h.store.claim_session()
    try:
        claimed = session.claim("default", 1, 0.2, "dead worker")
    finally:
        session.release()
    assert [r.id for r in claimed.rows] == [job.id]
    h.start()
    row = h.ends(job.id, JobState.COMPLETED)
    assert row.attempt == 2
    assert "lease expired" in row.errors[0]["error"]
    assert h.runs == [(job.id, 2)]


def test_a_superseded_run_cannot_write_and_is_reported_stale(
    harness: Callable[..., Harness],
) -> None:
    # The first run's lease lapses (no heartbeat within it), the job is rescued and
    # run again; the first run's late outcome is refused by the fence.
    h = harness(lease_seconds=0.3, heartbeat_interval=0.25, rescue_interval=0.05, concurrency=2)
    first_running = threading.Event()
    second_done = threading.Event()
    release_first = threading.Event()

    def stuck_then_fine(ctx: JobContext, row: JobRow) -> None:
        if row.attempt == 1:
            first_running.set()
            release_first.wait(30)
            raise RuntimeError("the first run, too late")
        second_done.set()

    h.behaviours["stuck"] = stuck_then_fine
    # Hold the heartbeat off: renewals never reach the store for this run.
    h.kernel.heartbeat.run_once = lambda: 0  # type: ignore[method-assign]
    job = h.insert("stuck")
    h.start()
    assert first_running.wait(20)
    assert second_done.wait(30)
    row = h.ends(job.id, JobState.COMPLETED)
    assert row.attempt == 2
    release_first.set()
    poll(lambda: h.stale, timeout=20, message="the stale write reported")
    stale = h.stale[0]
    assert (stale.job_id, stale.attempt, stale.write) == (job.id, 1, "fail")
    assert h.job(job.id).state is JobState.COMPLETED  # the late failure changed nothing


def test_stop_drains_running_jobs_within_the_budget(harness: Callable[..., Harness]) -> None:
    h = harness()
    running = threading.Event()

    def brief(ctx: JobContext, row: JobRow) -> None:
        running.set()
        ctx.wait(0.3)

    h.behaviours["brief"] = brief
    job = h.insert("brief")
    h.start()
    assert running.wait(20)
    assert h.stop(30.0) is None
    assert h.before_hand_back == [], "a clean drain hands nothing back"
    assert h.job(job.id).state is JobState.COMPLETED


def test_stop_hands_back_what_outlives_the_budget(harness: Callable[..., Harness]) -> None:
    h = harness()
    running = threading.Event()
    leave = threading.Event()

    def stubborn(ctx: JobContext, row: JobRow) -> None:
        running.set()
        leave.wait(30)  # ignores the context's cancellation

    h.behaviours["stubborn"] = stubborn
    job = h.insert("stubborn")
    h.start()
    assert running.wait(20)
    verdict = h.stop(0.2)
    leave.set()
    assert isinstance(verdict, DrainIncomplete) and list(verdict.job_ids) == [job.id]
    # The door before the hand-back (drover worker's hold, ADR 0053) saw the job still running.
    assert h.before_hand_back == [([job.id], JobState.RUNNING)]
    row = h.job(job.id)
    assert row.state is JobState.RETRYABLE and row.attempt == 1 and row.leased_until is None
    assert row.scheduled_at <= datetime.now(UTC) + timedelta(seconds=1)


# --- completions riding with the claims (ADR 0058) ------------------------------------------


class _FailingRides:
    """A store whose claims fail, before writing anything, while they carry completions,
    ``failures`` times: the claim's statement failing with the completions in it."""

    def __init__(self, store: KernelStore, failures: int) -> None:
        self._store = store
        self.failures = failures
        self.carried = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def claim_session(self) -> Any:
        inner = self._store.claim_session()
        outer = self

        class Session:
            def claim(self, *args: Any, **kwargs: Any) -> Any:
                if kwargs.get("completions"):
                    outer.carried += 1
                    if outer.failures > 0:
                        outer.failures -= 1
                        raise DatabaseError("the claim failed (test)")
                return inner.claim(*args, **kwargs)

            def release(self) -> None:
                inner.release()

        return Session()


def test_completions_of_a_failed_claim_are_written_by_the_completer(
    engine_store: KernelStore,
) -> None:
    store = _FailingRides(engine_store, failures=3)
    h = Harness(store, concurrency=2, poll_interval=0.05)
    ids = [h.insert().id for _ in range(40)]
    h.start()
    try:
        for job_id in ids:
            row = h.ends(job_id, JobState.COMPLETED)
            assert row.attempt == 1
    finally:
        h.stop(5.0)
    assert store.failures == 0  # the failures happened: claims did carry completions
    assert store.carried > 3
    # Each job ran once: no completion was lost to a failed claim, none refused.
    assert sorted(h.runs) == sorted((i, 1) for i in ids)
    assert h.stale == []
