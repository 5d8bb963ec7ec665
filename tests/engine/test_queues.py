"""Scheduled jobs, weighted queues, pausing and LISTEN/NOTIFY wake-ups against a real database.

Wake-up tests run the worker with a long poll interval, so a job that starts
within a few seconds can only have been woken by a notification; the producer
is a second client that is never started, so its inserts cannot nudge the
worker's fetcher locally.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from jobdb import Conn, MakeClient, Poll, observe

import drover
from drover._runtime import listener as listener_module
from drover.faults.harness.proxy import Mode, TcpProxy, proxy_target

SAFETY = 20.0
"""Longest a blocked handler waits on its own (a failing test never hangs)."""

IDLE_POLL = 30.0
"""A poll interval no wake-up test could mistake for a notification."""

WAKE_BUDGET = 15.0
"""How soon a woken worker must start a job: half ``IDLE_POLL``, which a busy machine
needs (a start-up, a round trip, a thread to be scheduled) and a missed wake-up exceeds."""

TEST_LISTENER = "drover-tests-raw-listener"
"""application_name of the test's own listening connection, left out of drover's backends."""

LISTEN_PIDS = (
    "SELECT pid FROM pg_stat_activity"
    " WHERE datname = current_database() AND query = 'LISTEN drover'"
    f" AND application_name <> '{TEST_LISTENER}' ORDER BY pid"
)


class Tick(drover.JobArgs, kind="queues_tick"):
    n: int = 0


class Hold(drover.JobArgs, kind="queues_hold"):
    """Blocks its handler until the test releases it."""


class Recorder:
    """Records when each job's handler started (wall clock and monotonic) and completes it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.wall: dict[int, datetime] = {}
        self.mono: dict[int, float] = {}
        self.queues: dict[int, str] = {}
        self.release = threading.Event()
        self.holding = 0

    def tick(self, job: drover.Job[Tick]) -> None:
        wall, mono = datetime.now(UTC), time.monotonic()
        with self.lock:
            self.wall[job.id] = wall
            self.mono[job.id] = mono
            self.queues[job.id] = job.queue

    def hold(self, job: drover.Job[Hold]) -> None:
        with self.lock:
            self.holding += 1
        try:
            self.release.wait(SAFETY)
        finally:
            with self.lock:
                self.holding -= 1

    def ran(self, job_id: int) -> bool:
        with self.lock:
            return job_id in self.mono

    def started_at(self, job_id: int) -> float:
        with self.lock:
            return self.mono[job_id]

    def ran_ids(self) -> set[int]:
        with self.lock:
            return set(self.mono)

    def workers(self) -> drover.Workers:
        registry = drover.Workers()
        registry.register(args=Tick)(self.tick)
        registry.register(args=Hold)(self.hold)
        return registry


@pytest.fixture
def recorder(make_client: MakeClient) -> Iterator[Recorder]:
    """A recorder whose held handlers are released before ``make_client`` stops leftovers."""
    rec = Recorder()
    yield rec
    rec.release.set()


@pytest.fixture
def raw_listener(db_url: str) -> Iterator[Conn]:
    """A connection of the test's own, listening on drover's channel."""
    with psycopg.connect(db_url, autocommit=True, application_name=TEST_LISTENER) as listener:
        listener.execute("LISTEN drover")
        yield listener


# --- helpers ------------------------------------------------------------------------------


def _engine(client: drover.Client) -> Any:
    engine = client._engine
    assert engine is not None
    return engine


def _state(conn: Conn, job_id: int) -> str:
    found = conn.execute("SELECT state::text FROM drover_jobs WHERE id = %s", (job_id,)).fetchone()
    assert found is not None, f"job {job_id} does not exist"
    return str(found[0])


def _states(conn: Conn, ids: list[int]) -> set[str]:
    return {_state(conn, i) for i in ids}


def _count(conn: Conn, queue: str, state: str) -> int:
    found = conn.execute(
        "SELECT count(*) FROM drover_jobs WHERE queue = %s AND state = %s::drover_job_state",
        (queue, state),
    ).fetchone()
    assert found is not None
    return int(found[0])


def _listen_pids(conn: Conn) -> list[int]:
    return [int(pid) for (pid,) in conn.execute(LISTEN_PIDS).fetchall()]


def _queue_rows(conn: Conn) -> list[tuple[str, datetime | None]]:
    return [
        (str(name), paused_at)
        for name, paused_at in conn.execute(
            "SELECT name, paused_at FROM drover_queues ORDER BY name"
        ).fetchall()
    ]


def _notifications(listener: Conn, timeout: float, stop_after: int | None = None) -> list[str]:
    """Payloads delivered to ``listener`` within ``timeout`` (sooner once ``stop_after`` came)."""
    return [n.payload for n in listener.notifies(timeout=timeout, stop_after=stop_after)]


def _start_idle_worker(
    poll: Poll, make_client: MakeClient, recorder: Recorder, **fields: Any
) -> drover.Client:
    """A started worker with a long poll interval, listening and asleep after its first round."""
    fields.setdefault("poll_interval", IDLE_POLL)
    worker = make_client(workers=recorder.workers(), **fields)
    worker.start()
    engine = _engine(worker)
    poll(lambda: engine.fetcher.claims >= len(worker.config.queues), message="first empty round")
    if worker.config.notify:
        listener = engine.listener
        assert listener is not None
        poll(listener.listening.is_set, message="listener connected")
    return worker


def _wait_listen_backend(poll: Poll, conn: Conn) -> list[int]:
    # A NOTIFY sent before the LISTEN is lost, so tests wait for the server to show it.
    pids: list[int] = poll(lambda: _listen_pids(conn), message="a backend running LISTEN drover")
    return pids


# --- scheduled jobs and queues ------------------------------------------------------------


def test_a_scheduled_job_waits_for_its_time_then_runs_without_a_promoter(
    poll: Poll, make_client: MakeClient, recorder: Recorder, conn: Conn
) -> None:
    worker = make_client(workers=recorder.workers(), poll_interval=0.05, notify=False)
    worker.start()
    fetcher = _engine(worker).fetcher
    poll(lambda: fetcher.claims >= 1, message="worker polling")
    wanted = datetime.now(UTC) + timedelta(seconds=0.4)
    job = worker.insert(Tick(), drover.InsertOpts(scheduled_at=wanted))
    assert job.state is drover.JobState.SCHEDULED
    assert job.scheduled_at == wanted

    poll(lambda: _state(conn, job.id) == "completed", message="scheduled job completed")
    started = recorder.wall[job.id]
    assert started >= job.scheduled_at - timedelta(milliseconds=50), (
        f"handler started {(job.scheduled_at - started).total_seconds():.3f}s early"
    )
    # Nothing promoted it: it was claimed straight from 'scheduled' by ordinary polling.
    assert fetcher.claims >= 3
    row = worker.get_job(job.id)
    assert (row.attempt, row.scheduled_at) == (1, wanted)
    worker.stop(timeout=5)


def test_a_queue_nobody_works_is_not_an_error(
    poll: Poll,
    make_client: MakeClient,
    recorder: Recorder,
    conn: Conn,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="drover")
    worker = make_client(workers=recorder.workers(), poll_interval=0.05)
    orphan = worker.insert(Tick(n=1), drover.InsertOpts(queue="nobody"))
    assert orphan.state is drover.JobState.AVAILABLE
    assert orphan.queue == "nobody"
    worker.start()
    fetcher = _engine(worker).fetcher
    served = worker.insert(Tick(n=2))
    poll(lambda: _state(conn, served.id) == "completed", message="default job completed")
    after = fetcher.claims
    poll(lambda: fetcher.claims >= after + 3, message="a few more empty rounds")

    row = worker.get_job(orphan.id)
    assert (row.state, row.attempt, row.errors) == (drover.JobState.AVAILABLE, 0, ())
    assert recorder.ran_ids() == {served.id}
    worker.stop(timeout=5)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.slow
def test_a_one_to_a_thousand_queue_drains_next_to_a_saturated_one(
    poll: Poll, make_client: MakeClient, conn: Conn
) -> None:
    registry = drover.Workers()
    registry.register(args=Tick)(lambda job: None)
    worker = make_client(
        workers=registry,
        concurrency=2,
        poll_interval=0.05,
        queues={"busy": 1000, "rare": 1},
        notify=False,
    )
    # A backlog far larger than the ~5 000 rounds the rare queue needs on average (it is
    # tried first once in 1 001 rounds), so busy stays saturated throughout; running out
    # first is a one-in-100 000 event.
    backlog = 40_000
    worker.insert_many([(Tick(), drover.InsertOpts(queue="busy")) for _ in range(backlog)])
    rare = [r.id for r in worker.insert_many([(Tick(), drover.InsertOpts(queue="rare"))] * 5)]
    worker.start()

    poll(
        lambda: _states(conn, rare) == {"completed"},
        timeout=90,
        interval=0.05,
        message="all 5 rare jobs completed",
    )
    waiting = _count(conn, "busy", "available")
    assert waiting > 0, "busy ran dry first: the rare queue was never shown to drain beside it"
    assert _count(conn, "busy", "completed") > 0
    worker.stop(timeout=10)


def test_a_round_moves_on_to_the_next_queue_when_the_first_cannot_fill_the_slots(
    poll: Poll, make_client: MakeClient, recorder: Recorder, conn: Conn
) -> None:
    # busy holds one job, rare one: whichever is tried first, the round still claims both.
    # Were only the first queue tried, the other would wait out the 30 s poll interval.
    worker = make_client(
        workers=recorder.workers(),
        concurrency=2,
        poll_interval=IDLE_POLL,
        queues={"busy": 1000, "rare": 1},
        notify=False,
    )
    busy = worker.insert(Tick(), drover.InsertOpts(queue="busy"))
    rare = worker.insert(Tick(), drover.InsertOpts(queue="rare"))
    worker.start()
    poll(
        lambda: _states(conn, [busy.id, rare.id]) == {"completed"},
        timeout=WAKE_BUDGET,
        message="both queues' jobs completed in the first rounds",
    )
    assert recorder.queues == {busy.id: "busy", rare.id: "rare"}
    worker.stop(timeout=5)


# --- pausing ------------------------------------------------------------------------------


def test_pause_and_resume_from_another_client(
    poll: Poll, make_client: MakeClient, recorder: Recorder, conn: Conn
) -> None:
    worker = make_client(workers=recorder.workers(), concurrency=4, poll_interval=0.05)
    operator = make_client()  # never started: pausing needs no running client
    worker.start()
    fetcher = _engine(worker).fetcher
    held = worker.insert(Hold())
    poll(lambda: recorder.holding == 1, message="a job running before the pause")

    operator.pause_queue("default")
    rows = _queue_rows(conn)
    assert [name for name, _ in rows] == ["default"]
    first_paused_at = rows[0][1]
    assert first_paused_at is not None
    assert [(s.name, s.paused) for s in worker.queue_states()] == [("default", True)]
    assert operator.queue_states()[0].paused_at == first_paused_at

    # A paused queue accepts inserts; they wait while the worker keeps polling.
    waiting = [operator.insert(Tick(n=i)).id for i in range(3)]
    assert _states(conn, waiting) == {"available"}
    before = fetcher.claims
    poll(lambda: fetcher.claims >= before + 4, message="worker polled the paused queue")
    assert _states(conn, waiting) == {"available"}
    assert recorder.ran_ids() == set()

    # The job that was already running finishes normally.
    recorder.release.set()
    poll(lambda: _state(conn, held.id) == "completed", message="running job finished")
    before = fetcher.claims
    poll(lambda: fetcher.claims >= before + 3, message="worker kept polling")
    assert _states(conn, waiting) == {"available"}

    # Pausing again is a no-op that keeps the first pause time.
    operator.pause_queue("default")
    assert _queue_rows(conn) == [("default", first_paused_at)]

    operator.resume_queue("default")
    poll(lambda: _states(conn, waiting) == {"completed"}, message="resumed jobs completed")
    assert recorder.ran_ids() == set(waiting)
    states = operator.queue_states()
    assert [(s.name, s.paused, s.paused_at) for s in states] == [("default", False, None)]

    # Resuming a queue that is not paused, or was never paused, changes nothing.
    updated_at = states[0].updated_at
    operator.resume_queue("default")
    operator.resume_queue("never_paused")
    assert [(s.name, s.paused_at, s.updated_at) for s in operator.queue_states()] == [
        ("default", None, updated_at)
    ]
    worker.stop(timeout=5)


def test_a_client_started_after_the_pause_honours_it(
    poll: Poll, make_client: MakeClient, recorder: Recorder, conn: Conn
) -> None:
    operator = make_client()
    operator.pause_queue("default")
    job = operator.insert(Tick())
    worker = make_client(workers=recorder.workers(), poll_interval=0.05)
    worker.start()
    fetcher = _engine(worker).fetcher
    poll(lambda: fetcher.claims >= 5, message="worker polled the paused queue")
    assert _state(conn, job.id) == "available"
    operator.resume_queue("default")
    poll(lambda: _state(conn, job.id) == "completed", message="job completed after resume")
    worker.stop(timeout=5)


def test_pausing_one_queue_leaves_the_others_running(
    poll: Poll, make_client: MakeClient, recorder: Recorder, conn: Conn
) -> None:
    worker = make_client(
        workers=recorder.workers(), poll_interval=0.05, queues={"stopped": 1, "going": 1}
    )
    worker.pause_queue("stopped")
    held_back = worker.insert(Tick(), drover.InsertOpts(queue="stopped"))
    served = worker.insert(Tick(), drover.InsertOpts(queue="going"))
    worker.start()
    poll(lambda: _state(conn, served.id) == "completed", message="unpaused queue served")
    fetcher = _engine(worker).fetcher
    before = fetcher.claims
    poll(lambda: fetcher.claims >= before + 4, message="more rounds over both queues")
    assert _state(conn, held_back.id) == "available"
    assert [(s.name, s.paused) for s in worker.queue_states()] == [("stopped", True)]
    worker.stop(timeout=5)


def test_resume_on_the_working_client_wakes_its_own_fetcher(
    poll: Poll, make_client: MakeClient, recorder: Recorder, conn: Conn
) -> None:
    worker = _start_idle_worker(poll, make_client, recorder, notify=False)
    fetcher = _engine(worker).fetcher
    worker.pause_queue("default")
    before = fetcher.claims
    job = worker.insert(Tick())  # nudges the fetcher, which finds the queue paused
    poll(lambda: fetcher.claims > before, message="the insert's nudge round")
    assert _state(conn, job.id) == "available"
    worker.resume_queue("default")
    poll(
        lambda: _state(conn, job.id) == "completed",
        timeout=WAKE_BUDGET,
        message="job run right after resume, not a 30 s poll later",
    )
    worker.stop(timeout=5)


@pytest.mark.parametrize("name", ["", "   ", 7])
def test_an_invalid_queue_name_is_refused_without_writing(
    make_client: MakeClient, conn: Conn, name: Any
) -> None:
    operator = make_client()
    with pytest.raises(drover.InvalidInsertOpts) as raised:
        operator.pause_queue(name)
    assert isinstance(raised.value, drover.DroverError)
    with pytest.raises(drover.InvalidInsertOpts):
        operator.resume_queue(name)
    assert _queue_rows(conn) == []


def test_a_none_queue_name_is_refused_without_writing(make_client: MakeClient, conn: Conn) -> None:
    operator = make_client()
    try:
        with pytest.raises(drover.InvalidInsertOpts):
            operator.pause_queue(None)  # type: ignore[arg-type]
        with pytest.raises(drover.InvalidInsertOpts):
            operator.resume_queue(None)  # type: ignore[arg-type]
    finally:
        assert _queue_rows(conn) == []


# --- instant wake-ups ---------------------------------------------------------------------


def test_an_insert_from_another_client_wakes_an_idle_worker(
    poll: Poll, make_client: MakeClient, recorder: Recorder, conn: Conn
) -> None:
    worker = _start_idle_worker(poll, make_client, recorder)
    _wait_listen_backend(poll, conn)
    producer = make_client()
    sent = time.monotonic()
    job = producer.insert(Tick())
    poll(
        lambda: _state(conn, job.id) == "completed",
        timeout=WAKE_BUDGET,
        message="woken worker completed the job well inside the 30 s poll interval",
    )
    assert recorder.started_at(job.id) - sent < WAKE_BUDGET
    worker.stop(timeout=5)
    # The dedicated LISTEN connection goes with the client.
    poll(lambda: _listen_pids(conn) == [], message="LISTEN backend closed on stop")


def test_insert_tx_wakes_only_when_the_caller_commits(
    poll: Poll,
    make_client: MakeClient,
    recorder: Recorder,
    conn: Conn,
    db_url: str,
    raw_listener: Conn,
) -> None:
    worker = _start_idle_worker(poll, make_client, recorder)
    _wait_listen_backend(poll, conn)
    fetcher = _engine(worker).fetcher
    producer = make_client()
    idle_claims = fetcher.claims

    def not_woken() -> None:
        assert fetcher.claims == idle_claims, "the fetcher was woken"

    with psycopg.connect(db_url) as tx:
        # Rolled back: no job, no wake-up.
        gone = producer.insert_tx(tx, Tick(n=1))
        tx.rollback()
        assert _notifications(raw_listener, 0.3) == []
        observe(0.3, not_woken)
        assert (
            conn.execute("SELECT 1 FROM drover_jobs WHERE id = %s", (gone.id,)).fetchone() is None
        )

        # Open: nothing is delivered until the caller commits.
        job = producer.insert_tx(tx, Tick(n=2))
        assert _notifications(raw_listener, 0.3) == []
        observe(0.3, not_woken)
        assert not recorder.ran(job.id)
        committed = time.monotonic()
        tx.commit()

    poll(
        lambda: _state(conn, job.id) == "completed",
        timeout=WAKE_BUDGET,
        message="job run right after the commit",
    )
    assert recorder.started_at(job.id) - committed < WAKE_BUDGET
    assert _notifications(raw_listener, WAKE_BUDGET, stop_after=1) == ["default"]
    worker.stop(timeout=5)


def test_one_transaction_notifies_each_queue_once(
    make_client: MakeClient, db_url: str, raw_listener: Conn
) -> None:
    producer = make_client()
    producer.insert_many(
        [(Tick(n=i), drover.InsertOpts(queue="q1" if i % 2 else "q2")) for i in range(5)]
    )
    with psycopg.connect(db_url) as tx:
        producer.insert_tx(tx, Tick(n=10), drover.InsertOpts(queue="q3"))
        producer.insert_tx(tx, Tick(n=11), drover.InsertOpts(queue="q3"))
        producer.insert_many_tx(tx, [(Tick(n=12), drover.InsertOpts(queue="q3"))])
        tx.commit()
    delivered = _notifications(raw_listener, WAKE_BUDGET, stop_after=3)
    assert sorted(delivered) == ["q1", "q2", "q3"]
    assert _notifications(raw_listener, 0.3) == [], "a queue was notified more than once"


@pytest.mark.parametrize("workers", [1, 2], ids=["one-worker-on-both", "a-worker-per-queue"])
def test_insert_many_across_two_queues_wakes_the_workers_of_each(
    poll: Poll, make_client: MakeClient, recorder: Recorder, conn: Conn, workers: int
) -> None:
    # One worker serving both queues, or one per queue: then each needs its
    # own queue's notification.
    if workers == 1:
        started = [_start_idle_worker(poll, make_client, recorder, queues={"q1": 1, "q2": 1})]
        _wait_listen_backend(poll, conn)
    else:
        started = [
            _start_idle_worker(poll, make_client, recorder, queues={queue: 1})
            for queue in ("q1", "q2")
        ]
        poll(lambda: len(_listen_pids(conn)) == 2, message="both LISTEN backends")
    producer = make_client()
    rows = producer.insert_many(
        [(Tick(n=1), drover.InsertOpts(queue="q1")), (Tick(n=2), drover.InsertOpts(queue="q2"))]
    )
    poll(
        lambda: _states(conn, [r.id for r in rows]) == {"completed"},
        timeout=WAKE_BUDGET,
        message="both queues' jobs completed after one batch insert",
    )
    assert recorder.queues == {rows[0].id: "q1", rows[1].id: "q2"}
    for worker in started:
        worker.stop(timeout=5)


def test_a_notification_for_another_queue_does_not_wake_the_worker(
    poll: Poll, make_client: MakeClient, recorder: Recorder, conn: Conn, raw_listener: Conn
) -> None:
    worker = _start_idle_worker(poll, make_client, recorder, queues={"mine": 1})
    _wait_listen_backend(poll, conn)
    fetcher = _engine(worker).fetcher
    idle_claims = fetcher.claims
    producer = make_client()
    producer.insert(Tick(), drover.InsertOpts(queue="theirs"))
    assert _notifications(raw_listener, WAKE_BUDGET, stop_after=1) == ["theirs"]

    def not_woken() -> None:
        assert fetcher.claims == idle_claims, "woken by another queue's notification"

    observe(0.5, not_woken)
    # The same worker is woken for its own queue.
    job = producer.insert(Tick(), drover.InsertOpts(queue="mine"))
    poll(lambda: _state(conn, job.id) == "completed", timeout=WAKE_BUDGET, message="own queue")
    worker.stop(timeout=5)


def test_a_lost_listener_reconnects_at_once_and_wake_ups_resume(
    poll: Poll,
    make_client: MakeClient,
    recorder: Recorder,
    conn: Conn,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The poll interval is 30 s: the reconnect must not wait for it (it once did, so
    # wake-ups stayed away a whole interval), and a job that starts within the wake
    # budget after its insert can only have been woken by a notification.
    caplog.set_level(logging.INFO, logger="drover")
    worker = _start_idle_worker(poll, make_client, recorder)
    engine = _engine(worker)
    listener, fetcher = engine.listener, engine.fetcher
    assert listener is not None
    [lost] = _wait_listen_backend(poll, conn)
    rounds = fetcher.claims

    conn.execute("SELECT pg_terminate_backend(%s)", (lost,))
    [again] = poll(
        lambda: [p for p in _listen_pids(conn) if p != lost],
        timeout=10.0,  # the first back-off is 0.1 s; the margin is for a busy machine
        message="a new LISTEN backend within the reconnect back-off",
    )
    assert again != lost
    poll(lambda: listener.reconnects == 1 and listener.listening.is_set(), message="reconnected")
    # Notifications sent while it was away are lost, so the reconnect looks once.
    poll(
        lambda: fetcher.claims > rounds,
        timeout=WAKE_BUDGET,
        message="a fetch round after reconnecting",
    )
    messages = [r.getMessage() for r in caplog.records if r.name == "drover"]
    # The loss is one episode of database trouble: one warning (ADR 0044).
    troubles = [r for r in caplog.records if getattr(r, "event", None) == "database_trouble"]
    assert [getattr(r, "service", None) for r in troubles] == ["listener"]
    assert any(m.startswith("listening for job notifications again") for m in messages)
    registry = worker.metrics_registry
    assert registry.get_sample_value("drover_listener_reconnects_total") == 1.0

    producer = make_client()
    sent = time.monotonic()
    job = producer.insert(Tick())
    poll(lambda: recorder.ran(job.id), timeout=WAKE_BUDGET, message="job started")
    latency = recorder.started_at(job.id) - sent
    assert latency < WAKE_BUDGET, f"started after {latency:.2f}s: not woken"
    poll(lambda: _state(conn, job.id) == "completed", message="job completed")
    worker.stop(timeout=5)


def test_listening_is_cleared_as_soon_as_the_listen_connection_is_lost(
    poll: Poll,
    make_client: MakeClient,
    recorder: Recorder,
    conn: Conn,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(listener_module, "_FIRST_RETRY", 10.0)  # stay away long enough to see
    worker = _start_idle_worker(poll, make_client, recorder, poll_interval=10)
    listener = _engine(worker).listener
    assert listener is not None
    [lost] = _wait_listen_backend(poll, conn)
    conn.execute("SELECT pg_terminate_backend(%s)", (lost,))
    poll(lambda: _listen_pids(conn) == [], message="LISTEN backend gone")
    poll(
        lambda: not listener.listening.is_set(),
        timeout=6.0,  # well inside the back-off, after which it would be set again
        message="listening still set with no LISTEN connection (during the 10 s backoff)",
    )


def test_a_half_open_listen_connection_is_detected_and_replaced(
    poll: Poll,
    make_client: MakeClient,
    recorder: Recorder,
    conn: Conn,
    db_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Half-open: the proxy keeps the socket open and swallows every byte, so the
    # connection never fails on its own; only the listener's timed ping notices.
    monkeypatch.setattr(listener_module, "_PING_EVERY", 0.3)
    monkeypatch.setattr(listener_module, "_PING_DEADLINE", 0.5)
    with TcpProxy(proxy_target(db_url)) as proxy:
        worker = drover.Client(
            proxy.via(db_url),
            drover.Config(workers=recorder.workers(), poll_interval=IDLE_POLL),
        )
        try:
            worker.start()
            engine = _engine(worker)
            listener = engine.listener
            assert listener is not None
            poll(listener.listening.is_set, message="listener connected")
            # The fetcher's first round too, before the network goes: under load it can
            # come later, and a claim sent into the black hole hangs the fetcher for good.
            poll(lambda: engine.fetcher.claims >= 1, message="first empty round")
            proxy.set_mode(Mode.BLACKHOLE)
            poll(
                lambda: not listener.listening.is_set(),
                timeout=10.0,
                message="the half-open LISTEN connection given up within ping + deadline",
            )
            proxy.set_mode(Mode.PASS)
            poll(
                lambda: listener.reconnects >= 1 and listener.listening.is_set(),
                timeout=10.0,
                message="listening again once the network heals",
            )
            poll(lambda: len(_listen_pids(conn)) == 1, message="exactly one LISTEN backend")
            # Wake-ups work again: a producer on a direct connection, 30 s poll interval.
            producer = make_client()
            job = producer.insert(Tick())
            poll(lambda: recorder.ran(job.id), timeout=WAKE_BUDGET, message="woken after heal")
        finally:
            with contextlib.suppress(drover.DrainIncomplete):
                worker.stop(timeout=5)
            worker.close()


def test_without_notify_there_is_no_listener_and_polling_finds_jobs(
    poll: Poll,
    make_client: MakeClient,
    recorder: Recorder,
    conn: Conn,
    db_url: str,
    raw_listener: Conn,
) -> None:
    worker = make_client(workers=recorder.workers(), poll_interval=0.05, notify=False)
    worker.start()
    engine = _engine(worker)
    assert engine.listener is None
    poll(lambda: engine.fetcher.claims >= 3, message="worker polling")
    assert _listen_pids(conn) == []
    assert not [t for t in threading.enumerate() if t.name == f"drover-listener-{worker._id}"]

    producer = make_client(notify=False)
    one = producer.insert(Tick(n=1))
    many = producer.insert_many([Tick(n=2), Tick(n=3)])
    with psycopg.connect(db_url) as tx:
        in_tx = producer.insert_tx(tx, Tick(n=4))
        tx.commit()
    ids = [one.id, *(r.id for r in many), in_tx.id]
    assert _notifications(raw_listener, 0.3) == [], "notify=False still sent NOTIFY"
    poll(lambda: _states(conn, ids) == {"completed"}, message="jobs found by polling")
    assert recorder.ran_ids() == set(ids)
    worker.stop(timeout=5)
