"""What a started client does with each way a handler can end: the disposition of an attempt.

Every test runs jobs through a real, started client on its own database and
reads the outcome back from the row: state, attempt, errors, scheduled_at,
finalized_at and leased_until.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from jobdb import Conn, MakeClient, Poll, await_job_state, db_now, job_row, start_client

import drover


class Task(drover.JobArgs, kind="task"):
    n: int = 0


class Probe(drover.JobArgs, kind="probe"):
    """A harmless job: once it completes, the fetch loop has gone round again."""


class Ghost(drover.JobArgs, kind="ghost"):
    """Inserted, but no worker is ever registered for it."""


class Immediate:
    """Retries are due at once."""

    def next_retry(self, job: drover.JobRow) -> datetime:
        return datetime.now(UTC)


class Later:
    """Retries wait an hour, so a failed job stays ``retryable`` to be looked at."""

    def next_retry(self, job: drover.JobRow) -> datetime:
        return datetime.now(UTC) + timedelta(hours=1)


class Counter:
    """A thread-safe call counter for handlers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.value = 0

    def bump(self) -> int:
        with self._lock:
            self.value += 1
            return self.value


# --- helpers ------------------------------------------------------------------------------------


def _start(make_client: MakeClient, workers: drover.Workers, **fields: Any) -> drover.Client:
    """A started client whose retries are due at once unless ``fields`` say otherwise."""
    return start_client(make_client, workers, **{"retry_policy": Immediate(), **fields})


def _at(entry: dict[str, Any]) -> datetime:
    text = entry["at"]
    assert isinstance(text, str)
    assert text.endswith("Z"), text
    moment = datetime.fromisoformat(text)
    assert moment.utcoffset() == timedelta(0)
    return moment


def _probe_completes(client: drover.Client, conn: Conn, poll: Poll) -> None:
    """Insert a probe job and wait for it: the fetch loop has had the chance to re-run others."""
    probe = client.insert(Probe())
    await_job_state(poll, conn, probe.id, "completed")


def _probe_worker(workers: drover.Workers) -> None:
    @workers.register(args=Probe)
    def probe(job: drover.Job[Probe]) -> None:
        pass


# --- success and ordinary failure ---------------------------------------------------------------


def test_success_completes_the_job(make_client: MakeClient, conn: Conn, poll: Poll) -> None:
    workers = drover.Workers()
    calls = Counter()

    @workers.register(args=Task)
    def succeed(job: drover.Job[Task]) -> None:
        calls.bump()

    client = _start(make_client, workers)
    job = client.insert(Task())
    row = await_job_state(poll, conn, job.id, "completed")
    assert (row["attempt"], row["errors"], row["leased_until"]) == (1, [], None)
    assert row["finalized_at"] is not None
    assert row["finalized_at"] >= row["created_at"]
    assert calls.value == 1


def test_failure_with_attempts_left_is_retryable_on_the_default_backoff(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    workers = drover.Workers()

    @workers.register(args=Task)
    def explode_with_boom(job: drover.Job[Task]) -> None:
        raise ValueError("boom")

    client = _start(make_client, workers, retry_policy=None)
    assert isinstance(client.config.retry_policy, drover.ExponentialRetryPolicy)
    before = db_now(conn)
    job = client.insert(Task())
    # The default policy makes the retry due after about a second, when the
    # job runs again: this snapshot is the row right after the first failure.
    row = await_job_state(poll, conn, job.id, "retryable", attempt=1)
    assert (row["finalized_at"], row["leased_until"]) == (None, None)
    (entry,) = row["errors"]
    assert set(entry) == {"attempt", "at", "error", "trace"}
    assert entry["attempt"] == 1
    assert entry["error"] == "ValueError: boom"
    assert "ValueError: boom" in entry["trace"]
    assert "explode_with_boom" in entry["trace"]
    failed_at = _at(entry)
    assert before - timedelta(seconds=1) <= failed_at <= db_now(conn) + timedelta(seconds=1)
    # attempt ** 4 seconds, spread ±10 %, from the moment of the failure.
    assert timedelta(seconds=0.9) <= row["scheduled_at"] - failed_at <= timedelta(seconds=1.2)
    assert timedelta(seconds=0.9) <= row["scheduled_at"] - before <= timedelta(seconds=1.6), (
        "compared with the database clock at insert"
    )


def test_fail_twice_then_succeed_keeps_both_error_entries(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    workers = drover.Workers()
    calls = Counter()

    @workers.register(args=Task)
    def flaky(job: drover.Job[Task]) -> None:
        if calls.bump() < 3:
            raise ValueError(f"failure on attempt {job.attempt}")

    client = _start(make_client, workers)
    job = client.insert(Task())
    row = await_job_state(poll, conn, job.id, "completed")
    assert row["attempt"] == 3
    assert [(e["attempt"], e["error"]) for e in row["errors"]] == [
        (1, "ValueError: failure on attempt 1"),
        (2, "ValueError: failure on attempt 2"),
    ]
    assert row["finalized_at"] is not None
    assert row["leased_until"] is None
    assert calls.value == 3


@pytest.mark.parametrize("max_attempts", [3, 1])
def test_a_job_that_always_fails_is_dead_once_its_attempts_are_used(
    make_client: MakeClient, conn: Conn, poll: Poll, max_attempts: int
) -> None:
    workers = drover.Workers()
    calls = Counter()

    @workers.register(args=Task)
    def always_fails(job: drover.Job[Task]) -> None:
        calls.bump()
        raise ValueError(f"boom {job.attempt}")

    client = _start(make_client, workers)
    job = client.insert(Task(), drover.InsertOpts(max_attempts=max_attempts))
    row = await_job_state(poll, conn, job.id, "dead")
    assert row["attempt"] == max_attempts
    assert [e["attempt"] for e in row["errors"]] == list(range(1, max_attempts + 1))
    assert [e["error"] for e in row["errors"]] == [
        f"ValueError: boom {n}" for n in range(1, max_attempts + 1)
    ]
    assert row["finalized_at"] is not None
    assert row["leased_until"] is None
    assert calls.value == max_attempts


# --- Cancel and Snooze ----------------------------------------------------------------------------


def _raise_cancel() -> None:
    raise drover.Cancel("bad input")


def _raise_from_cancel() -> None:
    raise RuntimeError("x") from drover.Cancel("why")


def _raise_snooze_from_cancel() -> None:
    raise drover.Snooze(0) from drover.Cancel("cancel beats snooze")


@pytest.mark.parametrize(
    ("raise_", "error", "in_trace"),
    [
        (_raise_cancel, "job cancelled by handler: bad input", "bad input"),
        (
            _raise_from_cancel,
            "RuntimeError: x (job cancelled by handler: why)",
            "job cancelled by handler: why",
        ),
        (
            _raise_snooze_from_cancel,
            "job snoozed for 0:00:00 (job cancelled by handler: cancel beats snooze)",
            "cancel beats snooze",
        ),
    ],
    ids=["cancel", "chained-cancel", "snooze-from-cancel"],
)
def test_cancel_ends_the_job_after_one_run(
    make_client: MakeClient,
    conn: Conn,
    poll: Poll,
    raise_: Callable[[], None],
    error: str,
    in_trace: str,
) -> None:
    workers = drover.Workers()
    _probe_worker(workers)
    calls = Counter()

    @workers.register(args=Task)
    def refuse(job: drover.Job[Task]) -> None:
        calls.bump()
        raise_()

    client = _start(make_client, workers)
    job = client.insert(Task())
    row = await_job_state(poll, conn, job.id, "cancelled")
    assert (row["attempt"], row["leased_until"]) == (1, None)
    assert row["finalized_at"] is not None
    (entry,) = row["errors"]
    assert (entry["attempt"], entry["error"]) == (1, error)
    assert in_trace in entry["trace"]
    # Even with retries due at once, a cancelled job never runs again.
    _probe_completes(client, conn, poll)
    assert calls.value == 1
    assert job_row(conn, job.id)["state"] == "cancelled"


@pytest.mark.parametrize("delay", [3600, 3600.0, timedelta(hours=1)], ids=["int", "float", "td"])
def test_snooze_reschedules_without_spending_an_attempt(
    make_client: MakeClient, conn: Conn, poll: Poll, delay: float | timedelta
) -> None:
    workers = drover.Workers()
    calls = Counter()

    @workers.register(args=Task)
    def snooze(job: drover.Job[Task]) -> None:
        calls.bump()
        raise drover.Snooze(delay)

    client = _start(make_client, workers)
    before = db_now(conn)
    job = client.insert(Task())
    row = await_job_state(poll, conn, job.id, "scheduled")
    after = db_now(conn)
    hour = timedelta(hours=1)
    assert before + hour - timedelta(seconds=1) <= row["scheduled_at"]
    assert row["scheduled_at"] <= after + hour + timedelta(seconds=1)
    assert (row["attempt"], row["errors"], row["finalized_at"], row["leased_until"]) == (
        0,
        [],
        None,
        None,
    )
    assert calls.value == 1


def test_snoozing_never_brings_a_job_closer_to_dead(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    workers = drover.Workers()
    calls = Counter()

    @workers.register(args=Task)
    def snooze_five_times(job: drover.Job[Task]) -> None:
        assert job.attempt == 1, "every run is the first attempt again"
        if calls.bump() <= 5:
            raise drover.Snooze(0)

    client = _start(make_client, workers)
    job = client.insert(Task(), drover.InsertOpts(max_attempts=1))
    row = await_job_state(poll, conn, job.id, "completed")
    assert (row["attempt"], row["errors"]) == (1, [])
    assert row["finalized_at"] is not None
    assert calls.value == 6


# --- failures drover itself detects ---------------------------------------------------------------


def _insert_undecodable(conn: Conn) -> int:
    row = conn.execute(
        "INSERT INTO drover_jobs (kind, args) VALUES ('task', '{\"n\": \"not-an-int\"}') "
        "RETURNING id"
    ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("ghost", [True, False], ids=["unregistered-kind", "undecodable-args"])
def test_a_job_no_handler_can_take_fails_with_drovers_own_message(
    make_client: MakeClient, conn: Conn, poll: Poll, ghost: bool
) -> None:
    workers = drover.Workers()
    calls = Counter()

    @workers.register(args=Task)
    def never_reached(job: drover.Job[Task]) -> None:
        calls.bump()

    client = _start(make_client, workers, retry_policy=Later())
    job_id = client.insert(Ghost()).id if ghost else _insert_undecodable(conn)
    # An unknown kind is retried (a rolling deploy heals). No retry can fix stored
    # args: the first attempt is the last, whatever max_attempts says, and the
    # validation message is kept for the operator.
    row = await_job_state(poll, conn, job_id, "retryable" if ghost else "dead")
    assert (row["attempt"], row["max_attempts"], row["leased_until"]) == (1, 25, None)
    (entry,) = row["errors"]
    assert entry["attempt"] == 1
    assert calls.value == 0
    if ghost:
        assert row["finalized_at"] is None
        assert entry["error"] == 'no worker registered for kind "ghost"'
        assert row["scheduled_at"] - _at(entry) > timedelta(minutes=59), "the policy was used"
    else:
        assert row["finalized_at"] is not None
        assert entry["error"].startswith(f'decode args for job {job_id} (kind "task"): ')
        assert "not-an-int" in entry["error"] or "integer" in entry["error"]


class Interrupt(drover.JobArgs, kind="interrupt"):
    how: str


def test_keyboard_interrupt_and_system_exit_are_failed_attempts_and_the_pool_survives(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    workers = drover.Workers()
    threads: list[int] = []

    @workers.register(args=Interrupt)
    def interrupt(job: drover.Job[Interrupt]) -> None:
        threads.append(threading.get_ident())
        if job.args.how == "keyboard":
            raise KeyboardInterrupt
        if job.args.how == "exit":
            raise SystemExit("stopping")

    client = _start(make_client, workers, concurrency=1, retry_policy=Later())
    keyboard = client.insert(Interrupt(how="keyboard"))
    row = await_job_state(poll, conn, keyboard.id, "retryable")
    assert [(e["attempt"], e["error"]) for e in row["errors"]] == [(1, "KeyboardInterrupt")]
    assert "KeyboardInterrupt" in row["errors"][0]["trace"]

    exiting = client.insert(Interrupt(how="exit"))
    row = await_job_state(poll, conn, exiting.id, "retryable")
    assert [(e["attempt"], e["error"]) for e in row["errors"]] == [(1, "SystemExit: stopping")]

    fine = client.insert(Interrupt(how="return"))
    await_job_state(poll, conn, fine.id, "completed")
    assert len(threads) == 3
    assert len(set(threads)) == 1, "the single pool thread ran all three"


# --- retry policy ---------------------------------------------------------------------------------


class Distinctive:
    """Answers one odd, far-off time and remembers the rows it was asked about."""

    def __init__(self) -> None:
        self.at = (datetime.now(UTC) + timedelta(days=3, minutes=17)).replace(microsecond=654321)
        self.seen: list[drover.JobRow] = []

    def next_retry(self, job: drover.JobRow) -> datetime:
        self.seen.append(job)
        return self.at


def test_the_configured_policy_decides_the_retry_time(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    workers = drover.Workers()

    @workers.register(args=Task)
    def fail(job: drover.Job[Task]) -> None:
        raise ValueError("boom")

    policy = Distinctive()
    client = _start(make_client, workers, retry_policy=policy)
    job = client.insert(Task(n=5))
    row = await_job_state(poll, conn, job.id, "retryable")
    assert row["scheduled_at"] == policy.at
    (seen,) = policy.seen
    assert (seen.id, seen.kind, seen.queue, seen.attempt, seen.max_attempts) == (
        job.id,
        "task",
        "default",
        1,
        25,
    )
    assert seen.args == {"n": 5}


class Raises:
    def next_retry(self, job: drover.JobRow) -> datetime:
        raise RuntimeError("policy exploded")


class Naive:
    def next_retry(self, job: drover.JobRow) -> datetime:
        return datetime.now() + timedelta(days=1)  # deliberately naive


class NotATime:
    def next_retry(self, job: drover.JobRow) -> datetime:
        return "tomorrow"  # type: ignore[return-value]


@pytest.mark.parametrize("policy", [Raises(), Naive(), NotATime()], ids=lambda p: type(p).__name__)
def test_a_broken_policy_falls_back_to_the_default_schedule(
    make_client: MakeClient,
    conn: Conn,
    poll: Poll,
    caplog: pytest.LogCaptureFixture,
    policy: drover.RetryPolicy,
) -> None:
    caplog.set_level(logging.ERROR, logger="drover")
    workers = drover.Workers()

    @workers.register(args=Task)
    def fail(job: drover.Job[Task]) -> None:
        raise ValueError("boom")

    client = _start(make_client, workers, retry_policy=policy)
    job = client.insert(Task())
    row = await_job_state(poll, conn, job.id, "retryable", attempt=1)
    (entry,) = row["errors"]
    assert timedelta(seconds=0.9) <= row["scheduled_at"] - _at(entry) <= timedelta(seconds=1.2)
    records = [
        r
        for r in caplog.records
        if r.name == "drover" and r.getMessage().startswith("retry policy failed for job ")
    ]
    assert len(records) >= 1
    assert records[0].levelno == logging.ERROR
    assert getattr(records[0], "job_id", None) == job.id


# --- the handler's view -------------------------------------------------------------------------


class Slow(drover.JobArgs, kind="slow"):
    pass


class SlowWorker(drover.Worker[Slow]):
    timeout = 0.2

    def __init__(self) -> None:
        self.seen: dict[str, Any] = {}

    def work(self, job: drover.Job[Slow]) -> None:
        started = time.monotonic()
        woke = job.context.wait(10)
        self.seen.update(
            woke=woke,
            waited=time.monotonic() - started,
            cancelled=job.context.cancelled,
            reason=job.context.reason,
        )


def test_a_worker_timeout_cancels_the_context_and_the_job_still_records_its_outcome(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    workers = drover.Workers()
    worker = workers.add(SlowWorker())
    client = _start(make_client, workers)
    job = client.insert(Slow())
    row = await_job_state(poll, conn, job.id, "completed")
    assert (row["attempt"], row["errors"]) == (1, [])
    assert worker.seen["woke"] is True
    assert worker.seen["cancelled"] is True
    assert worker.seen["reason"] == "deadline exceeded"
    assert 0.1 <= worker.seen["waited"] < 5.0


def test_the_worker_sees_the_claimed_rows_fields(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    workers = drover.Workers()
    seen: list[drover.Job[Task]] = []

    @workers.register(args=Task)
    def look(job: drover.Job[Task]) -> None:
        seen.append(job)

    client = _start(make_client, workers, queues={"jobs": 1})
    inserted = client.insert(Task(n=7), drover.InsertOpts(queue="jobs", max_attempts=4))
    await_job_state(poll, conn, inserted.id, "completed")
    (job,) = seen
    assert (job.id, job.kind, job.queue, job.attempt, job.max_attempts) == (
        inserted.id,
        "task",
        "jobs",
        1,
        4,
    )
    assert job.created_at == inserted.created_at
    assert isinstance(job.args, Task)
    assert job.args == Task(n=7)
    assert isinstance(job.context, drover.JobContext)
    assert job.context.deadline is None, "no timeout on this worker"


# --- middleware -----------------------------------------------------------------------------------

# What swallowing, refusing or calling next twice does to the outcome, and the log records
# of each disposition, are in test_middleware.py beside drover's own Logging middleware.


def test_values_set_by_middleware_reach_the_worker(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    workers = drover.Workers()
    seen: list[dict[str, Any]] = []

    class TimedWorker(drover.Worker[Task]):
        timeout = 30  # the worker's context is a child of the one middleware saw

        def work(self, job: drover.Job[Task]) -> None:
            seen.append(dict(job.context.values))

    workers.add(TimedWorker())

    def tag(next_handler: drover.Handler) -> drover.Handler:
        def handle(ctx: drover.JobContext, row: drover.JobRow) -> None:
            ctx.values["tenant"] = f"tenant-{row.args['n']}"
            next_handler(ctx, row)

        return handle

    client = _start(make_client, workers, middleware=[tag])
    job = client.insert(Task(n=42))
    await_job_state(poll, conn, job.id, "completed")
    assert seen == [{"tenant": "tenant-42"}]


def test_middleware_index_zero_is_outermost(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    workers = drover.Workers()
    trail: list[str] = []

    @workers.register(args=Task)
    def work(job: drover.Job[Task]) -> None:
        trail.append("worker")

    def tracing(name: str) -> drover.Middleware:
        def middleware(next_handler: drover.Handler) -> drover.Handler:
            def handle(ctx: drover.JobContext, row: drover.JobRow) -> None:
                trail.append(f"{name}:in")
                next_handler(ctx, row)
                trail.append(f"{name}:out")

            return handle

        return middleware

    client = _start(make_client, workers, middleware=[tracing("a"), tracing("b")])
    job = client.insert(Task())
    await_job_state(poll, conn, job.id, "completed")
    assert trail == ["a:in", "b:in", "worker", "b:out", "a:out"]


class Reciept(drover.JobArgs, kind="send_reciept"):
    pass


class Receipt(drover.JobArgs, kind="send_receipt"):
    pass


def test_a_misspelled_kind_fails_naming_the_registered_kind_it_is_close_to(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    workers = drover.Workers()

    @workers.register
    def send(job: drover.Job[Receipt]) -> None:
        pass

    client = _start(make_client, workers, retry_policy=Later())
    job_id = client.insert(Reciept()).id
    row = await_job_state(poll, conn, job_id, "retryable")
    (entry,) = row["errors"]
    assert entry["error"] == (
        "no worker registered for kind \"send_reciept\" (did you mean 'send_receipt'?)"
    )
