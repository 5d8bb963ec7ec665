"""Client lifecycle against a real database: start/stop rules, draining, hand-back, heartbeat,
crash recovery, wake-ups, ``run()`` and pool ownership."""

from __future__ import annotations

import logging
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import psycopg_pool
import pytest
from jobdb import Conn, MakeClient, Poll, idle_workers, observe

import drover

SAFETY = 20.0
"""Longest a blocked handler waits before giving up on its own (a failing test never hangs)."""

CRASH_WORKER = Path(__file__).with_name("crash_worker.py")


class Block(drover.JobArgs, kind="lifecycle_block"):
    gate: int = 0


class Quick(drover.JobArgs, kind="lifecycle_quick"):
    n: int = 0


class Crashy(drover.JobArgs, kind="lifecycle_crashy"):
    """Must match ``Crashy`` in ``crash_worker.py``."""

    n: int = 0


class Gate:
    """Blocks ``Block`` handlers until released and records what they saw.

    Each job waits on the event of its ``gate`` number; ``release_all`` opens
    every gate, including ones no handler has asked for yet. ``cooperative``
    handlers stop as soon as their context is cancelled instead.
    """

    def __init__(self, *, cooperative: bool = False) -> None:
        self.cooperative = cooperative
        self.lock = threading.Lock()
        self.inside = 0
        self.max_inside = 0
        self.runs: list[tuple[int, int]] = []
        self.finished: list[int] = []
        self.saw_cancelled: dict[int, bool] = {}
        self.noticed_cancel = threading.Event()
        self._events: dict[int, threading.Event] = {}
        self._all = False

    def event(self, gate: int) -> threading.Event:
        with self.lock:
            ev = self._events.get(gate)
            if ev is None:
                ev = self._events[gate] = threading.Event()
                if self._all:
                    ev.set()
            return ev

    def release(self, gate: int) -> None:
        self.event(gate).set()

    def release_all(self) -> None:
        with self.lock:
            self._all = True
            events = list(self._events.values())
        for ev in events:
            ev.set()

    def work(self, job: drover.Job[Block]) -> None:
        with self.lock:
            self.inside += 1
            self.max_inside = max(self.max_inside, self.inside)
            self.runs.append((job.id, job.attempt))
        try:
            if self.cooperative:
                deadline = time.monotonic() + SAFETY
                while not job.context.wait(0.05) and time.monotonic() < deadline:
                    pass
                if job.context.cancelled:
                    self.noticed_cancel.set()
            else:
                # Ignores cancellation on purpose: only the test releases it.
                self.event(job.args.gate).wait(SAFETY)
        finally:
            with self.lock:
                self.inside -= 1
                self.finished.append(job.id)
                self.saw_cancelled[job.id] = job.context.cancelled

    def workers(self) -> drover.Workers:
        registry = drover.Workers()
        registry.register(args=Block)(self.work)
        return registry


@pytest.fixture
def gates(make_client: MakeClient) -> Iterator[Callable[..., Gate]]:
    """Make gates; all are released at teardown, before ``make_client`` stops leftovers."""
    made: list[Gate] = []

    def make(*, cooperative: bool = False) -> Gate:
        gate = Gate(cooperative=cooperative)
        made.append(gate)
        return gate

    yield make
    for gate in made:
        gate.release_all()


class Blocked(NamedTuple):
    gate: Gate
    client: drover.Client
    ids: list[int]


StartBlocked = Callable[..., Blocked]


@pytest.fixture
def blocked(poll: Poll, make_client: MakeClient, gates: Callable[..., Gate]) -> StartBlocked:
    """Start a client on ``jobs`` new ``Block`` jobs and wait until its handlers hold every slot.

    Returns the gate, the started client and the job ids in id order; other keyword
    arguments go to ``Config``.
    """

    def start(jobs: int, *, concurrency: int, cooperative: bool = False, **fields: Any) -> Blocked:
        gate = gates(cooperative=cooperative)
        fields.setdefault("poll_interval", 0.05)
        client = make_client(workers=gate.workers(), concurrency=concurrency, **fields)
        ids = sorted(r.id for r in client.insert_many([Block() for _ in range(jobs)]))
        client.start()
        inside = min(jobs, concurrency)
        poll(lambda: gate.inside == inside, message=f"{inside} handler(s) inside")
        return Blocked(gate, client, ids)

    return start


class Recorder:
    """A worker that records each run's (job id, attempt) and completes."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: list[tuple[int, int]] = []
        self.ran = threading.Event()

    def record(self, job: drover.Job[Any]) -> None:
        with self.lock:
            self.runs.append((job.id, job.attempt))
        self.ran.set()


class RetryNow:
    """Retry policy: claimable again immediately."""

    def next_retry(self, job: drover.JobRow) -> datetime:
        return datetime.now(UTC)


# --- database helpers ---------------------------------------------------------------------


def _row(conn: Conn, job_id: int) -> dict[str, Any]:
    found = conn.execute(
        "SELECT state::text, attempt, errors, leased_until, scheduled_at <= now(), now()"
        " FROM drover_jobs WHERE id = %s",
        (job_id,),
    ).fetchone()
    assert found is not None, f"job {job_id} does not exist"
    state, attempt, errors, leased_until, due, now = found
    return {
        "state": state,
        "attempt": attempt,
        "errors": errors,
        "leased_until": leased_until,
        "due": due,
        "now": now,
    }


def _states(conn: Conn) -> dict[int, str]:
    return dict(conn.execute("SELECT id, state::text FROM drover_jobs ORDER BY id").fetchall())


def _count(conn: Conn, state: str) -> int:
    found = conn.execute(
        "SELECT count(*) FROM drover_jobs WHERE state = %s::drover_job_state", (state,)
    ).fetchone()
    assert found is not None
    return int(found[0])


def _all_in(conn: Conn, ids: list[int], state: str) -> bool:
    states = _states(conn)
    return all(states[i] == state for i in ids)


def _engine(client: drover.Client) -> Any:
    engine = client._engine
    assert engine is not None
    return engine


def _client_threads(client: drover.Client) -> list[str]:
    return [t.name for t in threading.enumerate() if t.is_alive() and client._id in t.name]


def _messages(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if text in r.getMessage()]


class StopInThread:
    """Calls ``client.stop(timeout)`` on another thread and keeps what it returned or raised."""

    def __init__(
        self, client: drover.Client, timeout: float | None, on_return: Callable[[], Any]
    ) -> None:
        self.client = client
        self.timeout = timeout
        self.on_return = on_return
        self.error: BaseException | None = None
        self.snapshot: Any = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="test-stopper", daemon=True)

    def _run(self) -> None:
        try:
            self.client.stop(self.timeout)
        except BaseException as exc:
            self.error = exc
        finally:
            self.snapshot = self.on_return()
            self.done.set()

    def start(self) -> StopInThread:
        self.thread.start()
        return self

    def join(self) -> None:
        self.thread.join(SAFETY)
        assert not self.thread.is_alive(), "stop() did not return"


# --- start / stop rules -------------------------------------------------------------------


def test_start_twice_and_start_after_stop_raise_already_started(make_client: MakeClient) -> None:
    client = make_client(poll_interval=0.05)
    client.start()
    assert client.running
    with pytest.raises(drover.AlreadyStarted):
        client.start()
    assert client.running, "a refused second start must not disturb the running client"
    client.stop(timeout=5)
    assert not client.running
    with pytest.raises(drover.AlreadyStarted):
        client.start()
    assert not client.running
    assert _client_threads(client) == []


def test_stop_before_start_raises_not_started_and_leaves_client_startable(
    make_client: MakeClient,
) -> None:
    client = make_client(poll_interval=0.05)
    with pytest.raises(drover.NotStarted):
        client.stop()
    with pytest.raises(drover.NotStarted):
        client.stop(timeout=0)
    assert not client.running
    client.start()
    assert client.running
    client.stop(timeout=5)  # returns (None) rather than raising
    assert not client.running


def test_second_clean_stop_returns_none_without_draining_again(
    make_client: MakeClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="drover")
    client = make_client(poll_interval=0.05)
    client.start()
    client.stop(timeout=5)  # returns (None) rather than raising
    client.stop(timeout=5)  # returns (None) rather than raising
    client.stop()  # returns (None) rather than raising
    # Not drained again: the stop was logged once (nothing left to time here).
    assert len(_messages(caplog, "worker pool stopping")) == 1
    assert len(_messages(caplog, "worker pool stopped")) == 1


def test_second_stop_after_drain_incomplete_raises_the_same_verdict_quickly(
    poll: Poll, blocked: StartBlocked, conn: Conn, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="drover")
    gate, client, [job_id] = blocked(1, concurrency=2)
    with pytest.raises(drover.DrainIncomplete) as first:
        client.stop(timeout=0.1)
    started = time.monotonic()
    with pytest.raises(drover.DrainIncomplete) as second:
        client.stop(timeout=30)
    with pytest.raises(drover.DrainIncomplete) as third:
        client.stop()
    # A second drain would wait for the handler, held for SAFETY.
    assert time.monotonic() - started < SAFETY / 2
    assert second.value is first.value
    assert third.value is first.value
    assert first.value.job_ids == (job_id,)
    assert len(_messages(caplog, "worker pool stopping")) == 1
    # Not handed back twice: exactly one shutdown entry.
    assert len(_row(conn, job_id)["errors"]) == 1
    gate.release_all()
    poll(lambda: job_id in gate.finished, message="abandoned handler finished")


def test_with_block_starts_and_stops(make_client: MakeClient) -> None:
    client = make_client(poll_interval=0.05, shutdown_timeout=5)
    assert not client.running
    with client as entered:
        assert entered is client
        assert client.running
        assert _engine(client).fetcher.alive
    assert not client.running
    assert client._store.pool.closed
    assert _client_threads(client) == []
    with pytest.raises(drover.AlreadyStarted):
        client.start()


# --- concurrency --------------------------------------------------------------------------


def test_concurrency_bounds_handlers_and_claims(
    poll: Poll, blocked: StartBlocked, conn: Conn
) -> None:
    gate, client, ids = blocked(6, concurrency=4)

    def at_most_four_running() -> None:
        running = _count(conn, "running")
        assert running == 4, f"{running} rows running with 4 pool threads"
        assert gate.inside == 4
        assert _count(conn, "available") == 2

    assert observe(0.3, at_most_four_running) > 3
    gate.release_all()
    poll(lambda: _all_in(conn, ids, "completed"), message="all 6 jobs completed")
    assert gate.max_inside == 4
    assert sorted(gate.runs) == [(i, 1) for i in ids]
    client.stop(timeout=5)


# --- draining -----------------------------------------------------------------------------


def test_stop_with_generous_budget_waits_for_running_jobs(
    poll: Poll, blocked: StartBlocked, conn: Conn
) -> None:
    gate, client, ids = blocked(3, concurrency=3)

    stopper = StopInThread(client, 15, on_return=lambda: (list(gate.finished), _states(conn)))
    stopper.start()
    poll(lambda: not client.running, message="stop began")
    # A stop racing the first one waits for it and shares its verdict.
    racing = StopInThread(client, 0, on_return=lambda: list(gate.finished)).start()
    assert not stopper.done.is_set(), "stop returned while handlers were still running"
    assert not racing.done.is_set(), "a racing stop returned before the drain finished"
    gate.release_all()
    stopper.join()
    racing.join()

    assert stopper.error is None
    assert racing.error is None
    assert sorted(racing.snapshot) == ids
    finished, states = stopper.snapshot
    assert sorted(finished) == ids, "stop returned before the handlers finished"
    assert all(states[i] == "completed" for i in ids), states
    for job_id in ids:
        row = _row(conn, job_id)
        assert (row["attempt"], row["errors"], row["leased_until"]) == (1, [], None)
    assert not any(gate.saw_cancelled.values()), "a generous drain must not cancel handlers"


def test_stop_budget_expiry_hands_jobs_back(
    poll: Poll,
    make_client: MakeClient,
    blocked: StartBlocked,
    conn: Conn,
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate, client, ids = blocked(2, concurrency=4)

    started = time.monotonic()
    with pytest.raises(drover.DrainIncomplete) as caught:
        client.stop(timeout=0.2)
    elapsed = time.monotonic() - started
    # The handlers hold on for SAFETY; the margin is for a busy machine.
    assert elapsed < SAFETY / 2, f"stop took {elapsed:.2f}s with a 0.2s budget"
    assert caught.value.count == 2
    assert caught.value.job_ids == tuple(ids)
    assert "2 job(s)" in str(caught.value)
    assert gate.inside == 2, "the handlers ignore cancellation and are still running"

    for job_id in ids:
        row = _row(conn, job_id)
        assert row["state"] == "retryable"
        assert row["leased_until"] is None
        assert row["due"], "a handed-back job must be claimable at once"
        assert row["attempt"] == 1
        assert [(e["attempt"], e["error"]) for e in row["errors"]] == [
            (1, "drover: worker shut down before this attempt finished")
        ]

    gate.release_all()
    poll(lambda: len(gate.finished) == 2, message="abandoned handlers finished")
    assert gate.saw_cancelled == dict.fromkeys(ids, True), "contexts were not cancelled"
    poll(
        lambda: len(_messages(caplog, "no longer this worker's to finish")) == 2,
        message="late outcomes discarded",
    )
    for job_id in ids:
        row = _row(conn, job_id)
        assert (row["state"], row["attempt"], len(row["errors"])) == ("retryable", 1, 1)

    recorder = Recorder()
    registry = drover.Workers()
    registry.register(args=Block)(recorder.record)
    second = make_client(workers=registry, concurrency=2, poll_interval=0.05)
    second.start()
    poll(lambda: _all_in(conn, ids, "completed"), message="second client completed them")
    second.stop(timeout=5)
    assert sorted(recorder.runs) == [(i, 2) for i in ids]
    for job_id in ids:
        assert _row(conn, job_id)["attempt"] == 2


def test_cooperative_handler_notices_cancellation_on_budget_expiry(
    poll: Poll, blocked: StartBlocked, conn: Conn
) -> None:
    gate, client, [job_id] = blocked(1, concurrency=2, cooperative=True)
    started = time.monotonic()
    try:
        client.stop(timeout=0.2)
    except drover.DrainIncomplete as exc:
        verdict: drover.DrainIncomplete | None = exc
    else:
        verdict = None
    assert time.monotonic() - started < SAFETY / 2
    assert gate.noticed_cancel.wait(SAFETY), "the handler never saw its context cancelled"
    poll(lambda: gate.inside == 0, message="handler returned")
    assert gate.saw_cancelled == {job_id: True}
    # Contexts are cancelled before the hand-back is written, so the handler races it:
    # either the hand-back won (the job is incomplete and back in the queue) or the
    # handler's own outcome was recorded first (the drain finished after all).
    row = _row(conn, job_id)
    if verdict is None:
        assert (row["state"], row["attempt"], row["errors"]) == ("completed", 1, [])
    else:
        assert verdict.job_ids == (job_id,)
        assert (row["state"], row["attempt"], len(row["errors"])) == ("retryable", 1, 1)


def test_stop_budget_bounds_the_call_when_a_running_job_was_taken_over(
    poll: Poll, blocked: StartBlocked, conn: Conn
) -> None:
    gate, client, [job_id] = blocked(1, concurrency=2)
    # The claim is lost while the handler runs: e.g. heartbeats failed, another
    # client's rescuer moved the job on and a worker claimed it again (attempt 2).
    conn.execute(
        "UPDATE drover_jobs SET attempt = attempt + 1,"
        " leased_until = now() + interval '1 minute' WHERE id = %s",
        (job_id,),
    )
    stopper = StopInThread(client, 0.2, on_return=lambda: gate.inside).start()
    returned = stopper.done.wait(SAFETY / 2)  # the handler holds on for SAFETY
    gate.release_all()
    stopper.join()
    poll(lambda: job_id in gate.finished, message="abandoned handler finished")
    assert gate.saw_cancelled == {job_id: True}
    row = _row(conn, job_id)
    assert (row["state"], row["attempt"], row["errors"]) == ("running", 2, [])
    assert returned, "stop(timeout=0.2) waited for a handler that ignores cancellation"
    assert stopper.snapshot == 1, "stop returned only after the abandoned handler finished"


def _race_start_and_stop(pool: psycopg_pool.ConnectionPool[Any]) -> str:
    """Call start() and stop() on a fresh client at the same moment; check what came out."""
    client = drover.Client(pool, drover.Config(workers=idle_workers(), poll_interval=0.05))
    barrier = threading.Barrier(2)
    results: dict[str, BaseException | None] = {}

    def call(name: str, fn: Callable[[], None]) -> None:
        barrier.wait(5)
        try:
            fn()
            results[name] = None
        except BaseException as exc:
            results[name] = exc

    racers = [
        threading.Thread(target=call, args=("start", client.start), name="race-start"),
        threading.Thread(target=call, args=("stop", lambda: client.stop(5)), name="race-stop"),
    ]
    for t in racers:
        t.start()
    for t in racers:
        t.join(SAFETY)
        assert not t.is_alive(), "start/stop race hung"

    assert results["start"] is None, results
    if isinstance(results["stop"], drover.NotStarted):
        outcome = "stop first"
        assert client.running
        client.stop(timeout=5)  # returns (None) rather than raising
    else:
        outcome = "start first"
        assert results["stop"] is None, results
    assert not client.running
    with pytest.raises(drover.AlreadyStarted):
        client.start()
    assert _client_threads(client) == []
    return outcome


def _application_pool(db_url: str, name: str, max_size: int) -> psycopg_pool.ConnectionPool[Any]:
    """A pool the application owns and hands to a client (which must never close it)."""
    return psycopg_pool.ConnectionPool(
        db_url, min_size=1, max_size=max_size, name=name, kwargs={"autocommit": True}, open=True
    )


def test_concurrent_start_and_stop_never_corrupt_state(db_url: str) -> None:
    with _application_pool(db_url, "lifecycle-race", max_size=4) as pool:
        outcomes = [_race_start_and_stop(pool) for _ in range(50)]
        assert not pool.closed, "a borrowed pool must stay open"
    assert len(outcomes) == 50


def test_no_claim_after_stop_begins(
    poll: Poll, make_client: MakeClient, gates: Callable[..., Gate], conn: Conn
) -> None:
    gate = gates()
    quick = Recorder()
    registry = gate.workers()
    registry.register(args=Quick)(quick.record)
    client = make_client(workers=registry, concurrency=2, poll_interval=0.05)
    blockers = [client.insert(Block(gate=1)).id, client.insert(Block(gate=2)).id]
    client.start()
    poll(lambda: gate.inside == 2, message="both blockers running")
    waiting = [r.id for r in client.insert_many([Quick(n=i) for i in range(3)])]
    fetcher = _engine(client).fetcher

    stopper = StopInThread(client, 15, on_return=lambda: None).start()
    poll(lambda: not client.running and not fetcher.alive, message="stop stopped the fetcher")
    claims = fetcher.claims

    # Free a slot mid-drain: a fetcher still claiming would take a waiting job at once.
    gate.release(2)
    poll(lambda: _row(conn, blockers[1])["state"] == "completed", message="blocker 2 recorded")

    def nothing_claimed() -> None:
        assert _count(conn, "running") == 1
        assert _all_in(conn, waiting, "available")
        assert fetcher.claims == claims

    observe(0.3, nothing_claimed)
    assert not stopper.done.is_set(), "the drain must still be waiting for blocker 1"
    gate.release(1)
    stopper.join()
    assert stopper.error is None
    assert _row(conn, blockers[0])["state"] == "completed"
    assert _all_in(conn, waiting, "available")
    assert quick.runs == []
    assert fetcher.claims == claims


def test_stop_interrupts_a_long_poll_sleep(poll: Poll, make_client: MakeClient) -> None:
    client = make_client(poll_interval=30)
    client.start()
    fetcher = _engine(client).fetcher
    poll(lambda: fetcher.claims >= 1, message="first (empty) claim round")
    started = time.monotonic()
    client.stop(timeout=None)
    assert time.monotonic() - started < 10.0  # not the 30 s sleep
    assert _client_threads(client) == []


def test_insert_on_started_client_wakes_the_fetcher(
    poll: Poll, make_client: MakeClient, conn: Conn
) -> None:
    recorder = Recorder()
    registry = drover.Workers()
    registry.register(args=Quick)(recorder.record)
    client = make_client(workers=registry, poll_interval=30)
    client.start()
    poll(lambda: _engine(client).fetcher.claims >= 1, message="fetcher asleep after empty round")
    started = time.monotonic()
    job = client.insert(Quick())
    # Half the 30 s poll interval: only a wake-up starts it this soon.
    assert recorder.ran.wait(15), "inserted job not run: the local wake-up did not happen"
    assert time.monotonic() - started < 15
    poll(lambda: _row(conn, job.id)["state"] == "completed", message="job completed")
    client.stop(timeout=5)


# --- heartbeat and crash recovery ---------------------------------------------------------


def test_heartbeat_keeps_a_long_job_leased(poll: Poll, blocked: StartBlocked, conn: Conn) -> None:
    gate, client, [job_id] = blocked(1, concurrency=1, lease_duration=1, rescue_interval=0.2)
    first = _row(conn, job_id)["leased_until"]
    assert first is not None
    leases: list[datetime] = [first]

    def held_past_first_lease() -> bool:
        row = _row(conn, job_id)
        assert (row["state"], row["attempt"], row["errors"]) == ("running", 1, []), row
        assert row["leased_until"] is not None and row["leased_until"] > row["now"], row
        leases.append(row["leased_until"])
        return bool((row["now"] - first).total_seconds() > 2.0)

    # Two full lease durations past the first lease, with the rescuer sweeping every 0.2 s.
    poll(held_past_first_lease, timeout=10, interval=0.1, message="held past the first lease")
    assert leases == sorted(leases), "leased_until went backwards"
    assert len(set(leases)) >= 4, "the lease was not renewed repeatedly"
    assert (leases[-1] - first).total_seconds() > 1.5

    gate.release_all()
    poll(lambda: _row(conn, job_id)["state"] == "completed", message="job completed")
    row = _row(conn, job_id)
    assert (row["attempt"], row["errors"]) == (1, [])
    assert gate.runs == [(job_id, 1)]
    client.stop(timeout=5)


class Child:
    """A subprocess whose stdout lines are read on a thread, so the test can wait with a deadline.

    The reader thread owns stdout and closes it at EOF; leaving the ``with`` block
    kills the process if it still runs and joins the reader.
    """

    def __init__(self, argv: list[str], stderr: Path) -> None:
        self.stderr = stderr
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with stderr.open("w") as err:
            self.proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=err, text=True, env=env
            )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self._reader = threading.Thread(target=self._read, name="test-stdout", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        with stdout:
            for line in stdout:
                self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(SAFETY)
        self._reader.join(SAFETY)

    def wait_for(self, prefix: str, timeout: float) -> str:
        """The first line starting with ``prefix``; fails after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                pytest.fail(f"no {prefix!r} line within {timeout}s; got {self.seen}")
            try:
                line = self.lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                pytest.fail(f"stdout closed before a {prefix!r} line: {self.diagnostics()}")
            self.seen.append(line)
            if line.startswith(prefix):
                return line

    def rest(self) -> list[str]:
        """Every line read, once the process closed its stdout."""
        self._reader.join(SAFETY)
        assert not self._reader.is_alive(), "stdout never closed"
        while (line := self.lines.get_nowait()) is not None:
            self.seen.append(line)
        return self.seen

    def diagnostics(self) -> str:
        return f"stdout {self.seen}, stderr:\n{self.stderr.read_text()}"


@pytest.mark.slow
def test_sigkilled_worker_job_is_rescued_and_run_again(
    poll: Poll, make_client: MakeClient, conn: Conn, db_url: str, tmp_path: Path
) -> None:
    recorder = Recorder()
    registry = drover.Workers()
    registry.register(args=Crashy)(recorder.record)
    rescuer = make_client(
        workers=registry,
        lease_duration=1,
        rescue_interval=0.2,
        poll_interval=0.05,
        retry_policy=RetryNow(),
    )
    job = rescuer.insert(Crashy())

    argv = [sys.executable, str(CRASH_WORKER), db_url]
    with Child(argv, tmp_path / "crash_worker.stderr") as child:
        line = child.wait_for("RUNNING", timeout=30)
        assert line == f"RUNNING {job.id}", child.diagnostics()
        row = _row(conn, job.id)
        assert (row["state"], row["attempt"]) == ("running", 1)
        child.proc.send_signal(signal.SIGKILL)
        assert child.proc.wait(SAFETY) == -signal.SIGKILL

    rescuer.start()
    poll(lambda: _row(conn, job.id)["state"] == "completed", timeout=15, message="rescued")
    rescuer.stop(timeout=5)
    row = _row(conn, job.id)
    assert row["attempt"] == 2
    assert [(e["attempt"], e["error"]) for e in row["errors"]] == [
        (1, "drover: lease expired, worker presumed dead")
    ]
    assert recorder.runs == [(job.id, 2)]


# --- run() --------------------------------------------------------------------------------

RUN_SCRIPT = textwrap.dedent(
    """
    import sys

    import drover


    class Ping(drover.JobArgs, kind="lifecycle_ping"):
        pass


    workers = drover.Workers()


    @workers.register
    def ping(job: drover.Job[Ping]) -> None:
        print("READY", flush=True)


    config = drover.Config(workers=workers, poll_interval=0.05, shutdown_timeout=5)
    client = drover.Client(sys.argv[1], config)
    client.insert(Ping())
    client.run()
    print("STOPPED", client.running, client._store.pool.closed, flush=True)
    """
)


@pytest.mark.slow
def test_run_stops_cleanly_on_sigterm(db_url: str, conn: Conn, tmp_path: Path) -> None:
    argv = [sys.executable, "-c", RUN_SCRIPT, db_url]
    with Child(argv, tmp_path / "run.stderr") as child:
        # The handler only runs once start() returned, and run() installs its
        # signal handlers before starting, so SIGTERM is handled from here on.
        child.wait_for("READY", timeout=30)
        child.proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        returncode = child.proc.wait(15)
        assert time.monotonic() - started < 10
        assert returncode == 0, child.diagnostics()
        assert child.rest()[-1] == "STOPPED False True", child.diagnostics()
    assert _states(conn) and set(_states(conn).values()) == {"completed"}


FORGOTTEN_SCRIPT = textwrap.dedent(
    """
    import sys
    import threading

    import drover


    class Ping(drover.JobArgs, kind="lifecycle_ping"):
        pass


    workers = drover.Workers()
    ran = threading.Event()


    @workers.register
    def ping(job: drover.Job[Ping]) -> None:
        ran.set()


    client = drover.Client(sys.argv[1], drover.Config(workers=workers, poll_interval=0.05))
    client.start()
    client.insert(Ping())
    assert ran.wait(30)
    print("RAN", flush=True)
    # The main thread ends with the client still started (never stopped) and
    # its pool threads idle.
    """
)


@pytest.mark.slow
def test_a_started_client_never_stopped_does_not_hold_the_interpreter_at_exit(
    db_url: str, tmp_path: Path
) -> None:
    # The pool threads are long executor tasks; the executor joins its threads
    # at exit, so an idle one must notice that the main thread has finished.
    argv = [sys.executable, "-c", FORGOTTEN_SCRIPT, db_url]
    with Child(argv, tmp_path / "forgotten.stderr") as child:
        child.wait_for("RAN", timeout=30)
        returncode = child.proc.wait(15)
        assert returncode == 0, child.diagnostics()


def test_run_outside_the_main_thread_raises(make_client: MakeClient) -> None:
    client = make_client(poll_interval=0.05)
    caught: list[BaseException] = []

    def target() -> None:
        try:
            client.run()
        except BaseException as exc:
            caught.append(exc)

    thread = threading.Thread(target=target, name="not-main")
    thread.start()
    thread.join(SAFETY)
    assert len(caught) == 1 and isinstance(caught[0], RuntimeError), caught
    assert "main thread" in str(caught[0])
    assert not client.running
    assert _client_threads(client) == []


# --- pool ownership -----------------------------------------------------------------------


def test_stop_closes_an_owned_pool(make_client: MakeClient) -> None:
    client = make_client(poll_interval=0.05)
    client.start()
    assert not client._store.pool.closed
    client.stop(timeout=5)
    assert client._store.pool.closed
    with pytest.raises(drover.DatabaseError):
        client.insert(Quick())


def test_stop_leaves_a_borrowed_pool_open(db_url: str) -> None:
    with _application_pool(db_url, "lifecycle-borrowed", max_size=2) as pool:
        client = drover.Client(pool, drover.Config(workers=idle_workers(), poll_interval=0.05))
        client.start()
        client.stop(timeout=5)
        client.close()
        assert not pool.closed
        row = client.insert(Quick())
        with pool.connection() as c:
            found = c.execute("SELECT state::text FROM drover_jobs WHERE id = %s", (row.id,))
            assert found.fetchone() == ("available",)


def test_client_pool_is_deprecated_and_still_answers(db_url: str) -> None:
    # Deprecated (ADR 0048): an application keeps its own pool; a client's own
    # pool is the client's. Passing a pool in is not deprecated, and warns nothing.
    with _application_pool(db_url, "lifecycle-deprecated", max_size=2) as pool:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            borrowing = drover.Client(pool)
            borrowing.insert(Quick())
        with pytest.warns(DeprecationWarning, match=r"Client\.pool is deprecated") as caught:
            assert borrowing.pool is pool
        borrowing.close()
    # The warning names the alternative and points at the caller's line.
    assert "keep a reference to the psycopg_pool.ConnectionPool" in str(caught[0].message)
    assert caught[0].filename == __file__
    with closing(drover.Client(db_url)) as owning:
        with pytest.warns(DeprecationWarning, match=r"Client\.pool is deprecated"):
            own = owning.pool
        assert own is not pool and not own.closed
    assert own.closed


# --- held connections ---------------------------------------------------------------------


def test_busy_loops_keep_their_connection_and_give_it_back_when_idle(
    poll: Poll, make_client: MakeClient, conn: Conn
) -> None:
    recorder = Recorder()
    workers = drover.Workers()
    workers.register(args=Quick)(recorder.record)
    client = make_client(workers=workers, concurrency=4, poll_interval=0.05)
    client.insert_many([Quick(n=i) for i in range(400)])
    requests_before = client._store.pool.get_stats().get("requests_num", 0)
    client.start()
    poll(lambda: _count(conn, "completed") == 400, message="all 400 completed")
    engine = _engine(client)
    rounds = engine.fetcher.claims
    requests = client._store.pool.get_stats().get("requests_num", 0) - requests_before
    # A checkout per claim round and per completion write would be at least
    # one per claim round; held connections make it a handful for the drain.
    assert rounds >= 50, rounds
    assert requests < rounds / 2, (requests, rounds)
    # Idle again: both loops give their connection back to the pool.
    poll(
        lambda: not engine.fetcher._session.holding and not engine.completer._session.holding,
        message="the fetcher and the completer gave their connections back",
    )
