"""``async def`` handlers on the client's event loop (ADR 0033), against a real database.

The outcome, middleware, metrics and logging contracts are parametrized over
both kinds of handler (``sync`` and ``async``): an async handler must behave
exactly as a sync one. Then what only async handlers have: the task is
cancelled (``CancelledError``) by a timeout, an operator's cancel and a
shutdown out of budget; a handler that blocks the loop is reported; an
awaiting job holds no pool thread; ``concurrency`` counts both kinds.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest
from jobdb import Conn, MakeClient, Poll, await_job_state, job_row, observe

import drover
import drover.testing

SAFETY = 20.0
"""Longest a blocked handler waits on its own (a failing test never hangs)."""

KINDS = ["sync", "async"]


class Task(drover.JobArgs, kind="aio_task"):
    action: str = "return"
    n: int = 0


class Other(drover.JobArgs, kind="aio_other"):
    n: int = 0


def _act(job: drover.Job[Task]) -> object:
    action = job.args.action
    if action == "return":
        return {"n": job.args.n, "seen": job.context.values.get("mark")}
    if action == "raise":
        raise ValueError(f"boom {job.args.n}")
    if action == "snooze":
        raise drover.Snooze(60)
    if action == "cancel":
        raise drover.Cancel("not wanted")
    raise AssertionError(action)


def task_workers(kind: str) -> drover.Workers:
    """A registry whose ``Task`` worker is sync or async and does the same thing."""
    workers = drover.Workers()
    if kind == "sync":

        @workers.register
        def handle(job: drover.Job[Task]) -> object:
            return _act(job)

    else:

        @workers.register
        async def handle_async(job: drover.Job[Task]) -> object:
            await asyncio.sleep(0)
            return _act(job)

    return workers


# --- the contract, over both kinds ---------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("action", "state", "error"),
    [
        ("return", "completed", None),
        ("raise", "retryable", "ValueError: boom 7"),
        ("snooze", "scheduled", None),
        ("cancel", "cancelled", "not wanted"),
    ],
)
def test_outcomes_are_the_same_for_both_kinds(
    kind: str, action: str, state: str, error: str | None, make_client: MakeClient, conn: Conn,
    poll: Poll,
) -> None:  # fmt: skip
    client = make_client(workers=task_workers(kind), poll_interval=0.05)
    job = client.insert(Task(action=action, n=7))
    with client:
        row = await_job_state(poll, conn, job.id, state)
        if action == "return":
            assert client.result(job.id, timeout=5) == {"n": 7, "seen": None}
    if error is None:
        assert row["errors"] == []
    else:
        assert error in row["errors"][-1]["error"]
    if action == "snooze":
        assert row["attempt"] == 0, "a snooze refunds the attempt"


@pytest.mark.parametrize("kind", KINDS)
def test_undecodable_args_end_dead_for_both_kinds(
    kind: str, make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    client = make_client(workers=task_workers(kind), poll_interval=0.05)
    job = client.insert(Task())
    conn.execute('UPDATE drover_jobs SET args = \'{"n": "x"}\' WHERE id = %s', [job.id])
    with client:
        row = await_job_state(poll, conn, job.id, "dead")
    assert "decode args" in row["errors"][-1]["error"]


def _marking_middleware() -> drover.Middleware:
    def sync_form(next_handler: drover.Handler) -> drover.Handler:
        def handle(ctx: drover.JobContext, row: drover.JobRow) -> None:
            ctx.values["mark"] = "sync form"
            next_handler(ctx, row)

        return handle

    def async_form(next_handler: drover.AsyncHandler) -> drover.AsyncHandler:
        async def handle(ctx: drover.JobContext, row: drover.JobRow) -> None:
            ctx.values["mark"] = "async form"
            await next_handler(ctx, row)

        return handle

    return drover.with_async_form(sync_form, async_form)


@pytest.mark.parametrize("kind", KINDS)
def test_middleware_wraps_both_kinds_in_its_own_form(
    kind: str, make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    client = make_client(
        workers=task_workers(kind), middleware=[_marking_middleware()], poll_interval=0.05
    )
    job = client.insert(Task(n=1))
    with client:
        assert client.result(job.id, timeout=10) == {"n": 1, "seen": f"{kind} form"}


def test_a_middleware_without_an_async_form_is_refused_with_async_workers(
    make_client: MakeClient,
) -> None:
    def plain(next_handler: drover.Handler) -> drover.Handler:
        return next_handler

    with pytest.raises(drover.ConfigError, match=r"Config.middleware\[0\].*no async form"):
        make_client(workers=task_workers("async"), middleware=[plain])
    # Sync workers only: a sync middleware is all they need.
    make_client(workers=task_workers("sync"), middleware=[plain])


@pytest.mark.parametrize("kind", KINDS)
def test_metrics_and_logs_are_the_same_for_both_kinds(
    kind: str,
    make_client: MakeClient,
    conn: Conn,
    poll: Poll,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    client = make_client(workers=task_workers(kind), metrics_registry=registry, poll_interval=0.05)
    ok = client.insert(Task(n=1))
    bad = client.insert(Task(action="raise", n=2))
    caplog.set_level(logging.INFO, logger="drover")
    with client:
        await_job_state(poll, conn, ok.id, "completed")
        await_job_state(poll, conn, bad.id, "retryable")

        def sample(name: str) -> float:
            return registry.get_sample_value(name, {"queue": "default"}) or 0.0

        poll(lambda: sample("drover_jobs_completed_total") == 1, message="completed counted")
        assert sample("drover_jobs_failed_total") == 1
        assert sample("drover_job_duration_seconds_count") == 2
        assert registry.get_sample_value("drover_jobs_executing") == 0
    events = {(r.__dict__.get("event"), r.__dict__.get("job_id")) for r in caplog.records}
    for event, job_id in [
        ("job_started", ok.id),
        ("job_finished", ok.id),
        ("job_started", bad.id),
        ("job_retry_scheduled", bad.id),
    ]:
        assert (event, job_id) in events, (event, job_id)
    # The async handler's failure ends in one record, with its traceback.
    (retry,) = [r for r in caplog.records if r.__dict__.get("event") == "job_retry_scheduled"]
    assert isinstance(retry.exc_info, tuple) and str(retry.exc_info[1]).startswith("boom ")
    assert ("job_failed", bad.id) not in events


@pytest.mark.parametrize("kind", KINDS)
def test_drover_testing_drains_both_kinds(kind: str, make_client: MakeClient) -> None:
    client = make_client(workers=task_workers(kind))
    with drover.testing.inline(client) as jobs:
        client.insert(Task(n=3))
        client.insert(Task(action="raise", n=4))
        worked = jobs.drain()
    assert [w.state for w in worked] == [drover.JobState.COMPLETED, drover.JobState.RETRYABLE]
    assert worked[1].error == "ValueError: boom 4"


def test_drover_testing_refuses_to_drain_inside_a_running_loop(make_client: MakeClient) -> None:
    client = make_client(workers=task_workers("async"))

    async def drain_inside() -> None:
        with drover.testing.inline(client) as jobs:
            client.insert(Task(n=5))
            with pytest.raises(drover.InvalidArgument, match="inside a running event loop"):
                jobs.drain()
            [row] = jobs.enqueued()
            assert client.get_job(row.id).state is drover.JobState.AVAILABLE  # nothing claimed
            worked = await asyncio.to_thread(jobs.drain)
        assert [w.state for w in worked] == [drover.JobState.COMPLETED]

    asyncio.run(drain_inside())


# --- cancellation of the task ----------------------------------------------------------------


class Sleeper(drover.JobArgs, kind="aio_sleeper"):
    n: int = 0


class SleepRecorder:
    """An async handler that awaits a long sleep and records how it ended."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.inside = 0
        self.ended: dict[int, str] = {}
        self.lock = threading.Lock()

    async def handle(self, job: drover.Job[Sleeper]) -> None:
        with self.lock:
            self.inside += 1
        self.started.set()
        try:
            await asyncio.sleep(SAFETY)
        except asyncio.CancelledError as exc:
            with self.lock:
                self.ended[job.id] = f"CancelledError({exc.args[0] if exc.args else ''})"
            raise
        finally:
            with self.lock:
                self.inside -= 1
        self.ended[job.id] = "returned"


def sleeper_workers(recorder: SleepRecorder, timeout: float | None = None) -> drover.Workers:
    workers = drover.Workers()
    if timeout is None:
        workers.register(args=Sleeper)(recorder.handle)
    else:

        class TimedSleeper(drover.Worker[Sleeper]):
            async def work(self, job: drover.Job[Sleeper]) -> None:
                await recorder.handle(job)

        TimedSleeper.timeout = timeout
        workers.add(TimedSleeper())
    return workers


def test_a_worker_timeout_cancels_the_task(make_client: MakeClient, conn: Conn, poll: Poll) -> None:
    recorder = SleepRecorder()
    client = make_client(workers=sleeper_workers(recorder, timeout=0.2), poll_interval=0.05)
    job = client.insert(Sleeper())
    started = time.monotonic()
    with client:
        row = await_job_state(poll, conn, job.id, "retryable")
    assert time.monotonic() - started < SAFETY / 2
    assert recorder.ended == {job.id: "CancelledError()"}
    assert "cancelled at its deadline" in row["errors"][-1]["error"]


def test_the_timeout_middleware_cancels_the_task(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    recorder = SleepRecorder()
    client = make_client(
        workers=sleeper_workers(recorder), middleware=[drover.Timeout(0.2)], poll_interval=0.05
    )
    job = client.insert(Sleeper())
    with client:
        row = await_job_state(poll, conn, job.id, "retryable")
    assert recorder.ended == {job.id: "CancelledError()"}
    assert "TimeoutError" in row["errors"][-1]["error"]


def test_an_operators_cancel_cancels_the_task_and_ends_the_job_cancelled(
    make_client: MakeClient, conn: Conn, poll: Poll, db_url: str
) -> None:
    recorder = SleepRecorder()
    client = make_client(workers=sleeper_workers(recorder), poll_interval=0.05)
    job = client.insert(Sleeper())
    with client:
        assert recorder.started.wait(10)
        with drover.Inspector(db_url) as inspector:
            inspector.cancel_job(job.id, reason="operator test")
        row = await_job_state(poll, conn, job.id, "cancelled")
    assert recorder.ended[job.id].startswith("CancelledError(cancelled by operator")
    assert "operator test" in row["errors"][-1]["error"]


def test_a_lost_lease_cancels_the_task_and_writes_nothing(
    make_client: MakeClient, conn: Conn, poll: Poll, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = SleepRecorder()
    client = make_client(
        workers=sleeper_workers(recorder),
        poll_interval=0.05,
        lease_duration=30,
        heartbeat_interval=0.1,
        rescue_interval=60,
    )
    job = client.insert(Sleeper())
    with client:
        assert recorder.started.wait(10)
        # Another execution's claim now (as after a rescue and a re-claim elsewhere).
        conn.execute("UPDATE drover_jobs SET attempt = attempt + 1 WHERE id = %s", [job.id])
        poll(lambda: job.id in recorder.ended, message="the task was cancelled")
        assert recorder.ended[job.id] == "CancelledError(lease lost)"
        poll(
            lambda: any("no longer this worker's" in r.getMessage() for r in caplog.records),
            message="the stale outcome refused",
        )
        row = job_row(conn, job.id)
        assert (row["state"], row["attempt"], row["errors"]) == ("running", 2, [])


def test_shutdown_out_of_budget_cancels_the_tasks_and_hands_the_jobs_back(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    recorder = SleepRecorder()
    client = make_client(workers=sleeper_workers(recorder), poll_interval=0.05)
    ids = [client.insert(Sleeper(n=i)).id for i in range(3)]
    client.start()
    poll(lambda: recorder.inside == 3, message="three async jobs running")
    started = time.monotonic()
    with pytest.raises(drover.DrainIncomplete) as caught:
        client.stop(timeout=0.3)
    assert time.monotonic() - started < SAFETY / 2  # the handlers would sleep SAFETY
    assert sorted(caught.value.job_ids) == ids
    assert recorder.ended == dict.fromkeys(ids, "CancelledError(shutdown)")
    assert recorder.inside == 0
    for job_id in ids:
        row = job_row(conn, job_id)
        assert (row["state"], row["attempt"]) == ("retryable", 1)
        assert row["errors"][-1]["error"] == "drover: worker shut down before this attempt finished"


def test_shutdown_drains_async_jobs_within_the_budget(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    gate = threading.Event()
    inside = []

    workers = drover.Workers()

    @workers.register
    async def short(job: drover.Job[Sleeper]) -> None:
        inside.append(job.id)
        await asyncio.to_thread(gate.wait, SAFETY)
        await asyncio.sleep(0.5)  # still running when stop() begins

    client = make_client(workers=workers, poll_interval=0.05, concurrency=20)
    ids = [r.id for r in client.insert_many([Sleeper(n=i) for i in range(20)])]
    client.start()
    poll(lambda: len(inside) == 20, message="twenty async jobs running")
    gate.set()
    started = time.monotonic()
    client.stop(timeout=SAFETY)  # no DrainIncomplete: every job finished within it
    elapsed = time.monotonic() - started
    assert elapsed > 0.3, f"stop took {elapsed:.2f}s: it did not wait for the jobs"
    states = {job_row(conn, i)["state"] for i in ids}
    assert states == {"completed"}


# --- what blocks the loop, and what async jobs do not take -----------------------------------


def test_a_handler_that_blocks_the_loop_is_reported(
    make_client: MakeClient, conn: Conn, poll: Poll, caplog: pytest.LogCaptureFixture
) -> None:
    from prometheus_client import CollectorRegistry

    workers = drover.Workers()

    @workers.register
    async def blocker(job: drover.Job[Sleeper]) -> None:
        time.sleep(0.6)  # the mistake under test: a blocking call in an async handler

    registry = CollectorRegistry()
    client = make_client(workers=workers, metrics_registry=registry, poll_interval=0.05)
    job = client.insert(Sleeper())
    with client:
        await_job_state(poll, conn, job.id, "completed")
        poll(
            lambda: [r for r in caplog.records if r.__dict__.get("job_id") == job.id
                     and r.__dict__.get("event") == "event_loop_blocked"],
            message="blocked loop logged",
        )  # fmt: skip

        def slow_probes() -> float:
            # Observed by the watch's thread once the loop answers the probe: it may
            # come after the job's completion is written, so wait for it.
            slow = registry.get_sample_value("drover_event_loop_lag_seconds_bucket", {"le": "0.25"})
            total = registry.get_sample_value("drover_event_loop_lag_seconds_count")
            return 0.0 if total is None or slow is None else total - slow

        poll(lambda: slow_probes() >= 1, message="a lag probe over 0.25 s observed")
    # A loaded machine may add a late probe of its own; the job's is there.
    [record, *_] = [
        r
        for r in caplog.records
        if r.__dict__.get("event") == "event_loop_blocked" and r.__dict__.get("job_id") == job.id
    ]
    assert record.levelno == logging.WARNING
    assert f"job {job.id} (aio_sleeper" in record.getMessage()


def test_awaiting_async_jobs_hold_no_pool_thread(make_client: MakeClient, poll: Poll) -> None:
    recorder = SleepRecorder()
    client = make_client(workers=sleeper_workers(recorder), poll_interval=0.05, concurrency=50)
    client.insert_many([Sleeper(n=i) for i in range(50)])
    client.start()
    poll(lambda: recorder.inside == 50, message="fifty async jobs awaiting")
    pool_threads = [t.name for t in threading.enumerate() if t.name.startswith("drover-job-")]
    assert pool_threads == []
    with pytest.raises(drover.DrainIncomplete):
        client.stop(timeout=0.1)


def test_concurrency_counts_running_jobs_of_both_kinds(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    gate = threading.Event()
    lock = threading.Lock()
    inside = {"sync": 0, "async": 0}
    peak = {"total": 0}

    def enter(which: str) -> None:
        with lock:
            inside[which] += 1
            peak["total"] = max(peak["total"], inside["sync"] + inside["async"])

    def leave(which: str) -> None:
        with lock:
            inside[which] -= 1

    workers = drover.Workers()

    @workers.register
    def sync_one(job: drover.Job[Other]) -> None:
        enter("sync")
        gate.wait(SAFETY)
        leave("sync")

    @workers.register
    async def async_one(job: drover.Job[Sleeper]) -> None:
        enter("async")
        await asyncio.to_thread(gate.wait, SAFETY)
        leave("async")

    client = make_client(workers=workers, poll_interval=0.05, concurrency=4)
    # Interleaved, so that one claim round takes jobs of both kinds.
    both: list[drover.JobArgs] = []
    for i in range(4):
        both += [Other(n=i), Sleeper(n=i)]
    rows = client.insert_many(both)
    client.start()
    poll(lambda: inside["sync"] + inside["async"] == 4, message="four jobs running")

    def four_at_most() -> None:
        assert inside["sync"] + inside["async"] == 4
        assert inside["sync"] and inside["async"], inside
        (running,) = conn.execute(
            "SELECT count(*) FROM drover_jobs WHERE state = 'running'"
        ).fetchone()  # type: ignore[misc]
        assert running == 4

    observe(0.3, four_at_most)
    gate.set()
    for row in rows:
        await_job_state(poll, conn, row.id, "completed")
    client.stop(timeout=5)
    assert peak["total"] == 4


def test_a_mixed_client_runs_sync_and_async_workers(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    threads: dict[str, str] = {}
    workers = drover.Workers()

    @workers.register
    def sync_one(job: drover.Job[Other]) -> int:
        threads["sync"] = threading.current_thread().name
        return job.args.n

    @workers.register
    async def async_one(job: drover.Job[Sleeper]) -> int:
        threads["async"] = threading.current_thread().name
        return job.args.n * 10

    client = make_client(workers=workers, poll_interval=0.05)
    a = client.insert(Other(n=2))
    b = client.insert(Sleeper(n=3))
    with client:
        assert client.result(a.id, timeout=10) == 2
        assert client.result(b.id, timeout=10) == 30
    assert threads["sync"].startswith("drover-job-")
    assert threads["async"].startswith("drover-eventloop-")


def test_an_async_worker_is_detected_at_registration() -> None:
    workers = drover.Workers()

    class AsyncWorker(drover.Worker[Task]):
        async def work(self, job: drover.Job[Task]) -> None:
            return None

    @workers.register
    async def other(job: drover.Job[Other]) -> None:
        return None

    workers.add(AsyncWorker())
    assert workers.async_kinds() == ["aio_other", "aio_task"]
    assert workers.is_async("aio_task")
    assert not workers.is_async("unknown")
    plain = drover.Workers()
    plain.register(args=Sleeper)(lambda job: None)
    assert not plain.is_async("aio_sleeper")
