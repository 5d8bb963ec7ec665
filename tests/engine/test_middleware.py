"""Middleware around every execution: drover's own Logging, JobLogFilter, Timeout and failures.

Every test runs jobs through a real, started client on its own database and
reads outcomes back from the row; log assertions use the records the client
wrote while those jobs ran. What a middleware that swallows, refuses or calls
next twice does to the outcome is here, with what Logging reports of it; the
rest of the chain's semantics (``ctx.values``, order) live in ``test_dispositions.py``.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from jobdb import Conn, MakeClient, Poll, await_job_state, job_row, start_client

import drover

STARTED = "job_started"
FINISHED = "job_finished"
RETRY = "job_retry_scheduled"
DEAD = "job_dead"
SNOOZED = "job_snoozed"
CANCELLED = "job_cancelled"
HANDBACK = "drover: worker shut down before this attempt finished"


class Task(drover.JobArgs, kind="task"):
    n: int = 0


class Timed(drover.JobArgs, kind="timed"):
    fail: bool = False


class Later:
    """Retries wait an hour, so a failed job stays ``retryable`` to be looked at."""

    def next_retry(self, job: drover.JobRow) -> datetime:
        return datetime.now(UTC) + timedelta(hours=1)


class Abort(BaseException):
    """A BaseException that is neither KeyboardInterrupt nor SystemExit."""


# --- helpers ------------------------------------------------------------------------------------


def _start(make_client: MakeClient, workers: drover.Workers, **fields: Any) -> drover.Client:
    """A started client whose retries wait an hour unless ``fields`` say otherwise."""
    return start_client(make_client, workers, **{"retry_policy": Later(), **fields})


def _job_records(
    caplog: pytest.LogCaptureFixture, job_id: int, logger: str = "drover"
) -> list[logging.LogRecord]:
    """The records ``logger`` wrote about ``job_id`` at INFO or above, in order."""
    return [
        r
        for r in caplog.records
        if r.name == logger and r.levelno >= logging.INFO and getattr(r, "job_id", None) == job_id
    ]


def _shape(records: list[logging.LogRecord]) -> list[tuple[str, int]]:
    """Each record's ``event`` and level, after checking its text names the job."""
    for r in records:
        fields = vars(r)
        job = (
            f"job {fields['job_id']} ({fields['job_kind']}, queue {fields['queue']}, "
            f"attempt {fields['attempt']}/"
        )
        assert r.getMessage().startswith(job), r.getMessage()
    return [(vars(r)["event"], r.levelno) for r in records]


def _assert_job_fields(record: logging.LogRecord, job_id: int, queue: str = "default") -> None:
    assert getattr(record, "job_id", None) == job_id
    assert getattr(record, "job_kind", None) in {"task", "timed"}
    assert getattr(record, "queue", None) == queue
    assert getattr(record, "attempt", None) == 1


def _assert_duration(record: logging.LogRecord, at_least_ms: float = 0.0) -> None:
    duration = getattr(record, "duration_ms", None)
    assert isinstance(duration, int | float), f"duration_ms is {duration!r}"
    assert not isinstance(duration, bool)
    assert at_least_ms <= duration < 60_000, duration


def _failing_worker(workers: drover.Workers, exc: BaseException) -> None:
    @workers.register(args=Task)
    def fail(job: drover.Job[Task]) -> None:
        raise exc


# --- 1. the Logging middleware the client installs ------------------------------------------------


@pytest.mark.parametrize(
    "middleware", [None, []], ids=["default-config", "logging-installed-with-an-empty-list"]
)
def test_a_successful_execution_logs_one_start_and_one_finish(
    make_client: MakeClient,
    conn: Conn,
    poll: Poll,
    caplog: pytest.LogCaptureFixture,
    middleware: list[drover.Middleware] | None,
) -> None:
    caplog.set_level(logging.INFO, logger="drover")
    workers = drover.Workers()

    @workers.register(args=Task)
    def linger(job: drover.Job[Task]) -> None:
        job.context.wait(0.1)  # something to measure, not a synchronisation

    # Logging is drover's own: not even an empty middleware list configures it away.
    fields = {} if middleware is None else {"middleware": middleware}
    client = _start(make_client, workers, **fields)
    job = client.insert(Task())
    await_job_state(poll, conn, job.id, "completed")
    records = _job_records(caplog, job.id)
    assert _shape(records) == [(STARTED, logging.INFO), (FINISHED, logging.INFO)]
    started, finished = records
    for record in records:
        _assert_job_fields(record, job.id)
        assert getattr(record, "job_kind", None) == "task"
    assert not hasattr(started, "duration_ms")
    _assert_duration(finished, at_least_ms=50.0)  # milliseconds, not seconds
    assert not hasattr(finished, "error")


def test_default_log_format_names_the_job_once_without_a_doubled_prefix(
    make_client: MakeClient, conn: Conn, poll: Poll, caplog: pytest.LogCaptureFixture
) -> None:
    # What logging.basicConfig() prints: LEVEL:logger:message, nothing of extra.
    caplog.set_level(logging.INFO, logger="drover")
    workers = drover.Workers()
    _failing_worker(workers, ValueError("boom"))
    client = _start(make_client, workers, queues={"mail": 1})
    job = client.insert(Task(), drover.InsertOpts(queue="mail", max_attempts=2))
    await_job_state(poll, conn, job.id, "retryable")
    formatter = logging.Formatter(logging.BASIC_FORMAT)
    lines = [formatter.format(r) for r in _job_records(caplog, job.id)]
    named = f"drover:job {job.id} (task, queue mail, attempt 1/2)"
    assert lines[0] == f"INFO:{named} started"
    # One record ends the failed execution: how long it ran, what next, what
    # failed, and the traceback under it, down to the handler's line.
    assert len(lines) == 2, lines
    first, *trace = lines[1].splitlines()
    assert first.startswith(f"WARNING:{named} failed after ")
    assert " ms, retry scheduled at " in first and first.endswith(": ValueError: boom")
    assert trace[0] == "Traceback (most recent call last):"
    assert any("in fail" in line for line in trace) and trace[-1] == "ValueError: boom"
    every = "\n".join(formatter.format(r) for r in caplog.records)
    assert "drover:drover" not in every


@pytest.mark.parametrize(
    ("raised", "max_attempts", "state", "error", "disposition", "disposition_error"),
    [
        pytest.param(ValueError("boom"), 25, "retryable", "ValueError: boom",
                     (RETRY, logging.WARNING), "ValueError: boom", id="retry"),
        pytest.param(ValueError("last"), 1, "dead", "ValueError: last",
                     (DEAD, logging.ERROR), "ValueError: last", id="dead-at-error"),
        pytest.param(drover.Snooze(3600), 25, "scheduled", None,
                     (SNOOZED, logging.INFO), None, id="snooze-at-info"),
        pytest.param(drover.Cancel("no"), 25, "cancelled", "job cancelled by handler: no",
                     (CANCELLED, logging.WARNING), "job cancelled by handler: no", id="cancel"),
    ],
)  # fmt: skip
def test_a_failed_execution_logs_its_start_and_then_one_record_with_its_disposition(
    make_client: MakeClient,
    conn: Conn,
    poll: Poll,
    caplog: pytest.LogCaptureFixture,
    raised: BaseException,
    max_attempts: int,
    state: str,
    error: str | None,
    disposition: tuple[str, int],
    disposition_error: str | None,
) -> None:
    # The disposition's record is the execution's end record: its duration, what
    # failed and the exception's traceback (not for a snooze, how a polling job
    # waits, nor for a cancel the handler asked for).
    caplog.set_level(logging.INFO, logger="drover")
    workers = drover.Workers()
    _failing_worker(workers, raised)
    client = _start(make_client, workers)
    job = client.insert(Task(), drover.InsertOpts(max_attempts=max_attempts))
    row = await_job_state(poll, conn, job.id, state)
    records = _job_records(caplog, job.id)
    assert _shape(records) == [(STARTED, logging.INFO), disposition]
    _, decided = records
    assert [e["error"] for e in row["errors"]] == ([] if error is None else [error])
    assert decided.getMessage().startswith(f"job {job.id} (task, queue default, attempt 1/")
    assert " after " in decided.getMessage()
    _assert_duration(decided)
    traced = isinstance(raised, ValueError)
    assert bool(decided.exc_info) is traced
    if traced:
        assert isinstance(decided.exc_info, tuple) and decided.exc_info[1] is raised
    _assert_job_fields(decided, job.id)
    assert getattr(decided, "job_kind", None) == "task"
    assert getattr(decided, "max_attempts", None) == max_attempts
    assert getattr(decided, "error", None) == disposition_error
    event = disposition[0]
    others = {RETRY, DEAD, SNOOZED, CANCELLED} - {event}
    assert [r for r in caplog.records if getattr(r, "event", None) in others] == []
    if event == RETRY:
        assert datetime.fromisoformat(getattr(decided, "retry_at", "")) == row["scheduled_at"]


def test_log_tracebacks_off_keeps_the_failure_to_one_line_and_the_trace_in_the_row(
    make_client: MakeClient, conn: Conn, poll: Poll, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="drover")
    workers = drover.Workers()
    _failing_worker(workers, ValueError("quiet"))
    client = _start(make_client, workers, log_tracebacks=False)
    job = client.insert(Task(), drover.InsertOpts(max_attempts=1))
    row = await_job_state(poll, conn, job.id, "dead")
    (dead,) = [r for r in _job_records(caplog, job.id) if r.levelno == logging.ERROR]
    assert dead.getMessage().endswith(": ValueError: quiet") and not dead.exc_info
    assert "Traceback (most recent call last)" in row["errors"][0]["trace"]


def test_log_tracebacks_must_be_a_bool() -> None:
    with pytest.raises(
        drover.ConfigError, match=r"Config.log_tracebacks must be True or False, not 'no'"
    ):
        drover.Config(log_tracebacks="no")  # type: ignore[arg-type]


# --- 2. the configured chain and logger, under Logging --------------------------------------------


def _swallow(next_handler: drover.Handler) -> drover.Handler:
    def handle(ctx: drover.JobContext, row: drover.JobRow) -> None:
        with contextlib.suppress(ValueError):
            next_handler(ctx, row)

    return handle


def _refuse(next_handler: drover.Handler) -> drover.Handler:
    def handle(ctx: drover.JobContext, row: drover.JobRow) -> None:
        raise PermissionError(f"refused job {row.id}")

    return handle


def _twice(next_handler: drover.Handler) -> drover.Handler:
    def handle(ctx: drover.JobContext, row: drover.JobRow) -> None:
        next_handler(ctx, row)
        next_handler(ctx, row)

    return handle


SUCCEEDED = [(STARTED, logging.INFO), (FINISHED, logging.INFO)]
RETRIED = [(STARTED, logging.INFO), (RETRY, logging.WARNING)]


@pytest.mark.parametrize(
    ("middleware", "worker_fails", "state", "error", "worker_calls", "shape"),
    [
        pytest.param(_swallow, True, "completed", None, 1, SUCCEEDED, id="swallowing-completes"),
        pytest.param(_refuse, False, "retryable", "PermissionError: refused job {id}", 0, RETRIED,
                     id="refusing-fails-and-the-worker-never-runs"),
        pytest.param(_twice, False, "completed", None, 2, SUCCEEDED, id="calling-next-twice"),
    ],
)  # fmt: skip
def test_what_middleware_does_with_the_call_decides_the_outcome(
    make_client: MakeClient,
    conn: Conn,
    poll: Poll,
    caplog: pytest.LogCaptureFixture,
    middleware: drover.Middleware,
    worker_fails: bool,
    state: str,
    error: str | None,
    worker_calls: int,
    shape: list[tuple[str, int]],
) -> None:
    """The row, and Logging, see what the whole configured chain did, not what the worker did."""
    caplog.set_level(logging.INFO, logger="drover")
    workers = drover.Workers()
    calls: list[int] = []

    @workers.register(args=Task)
    def work(job: drover.Job[Task]) -> None:
        calls.append(job.id)
        if worker_fails:
            raise ValueError("swallowed")

    client = _start(make_client, workers, middleware=[middleware])
    job = client.insert(Task())
    row = await_job_state(poll, conn, job.id, state)
    expected = None if error is None else error.format(id=job.id)
    assert row["attempt"] == 1
    assert [(e["attempt"], e["error"]) for e in row["errors"]] == (
        [] if expected is None else [(1, expected)]
    )
    assert calls == [job.id] * worker_calls
    records = _job_records(caplog, job.id)
    assert _shape(records) == shape
    if expected is not None:
        assert getattr(records[1], "error", None) == expected


def test_a_configured_logger_receives_the_job_records(
    make_client: MakeClient, conn: Conn, poll: Poll, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="drover")
    caplog.set_level(logging.INFO, logger="myapp.jobs")
    workers = drover.Workers()

    @workers.register(args=Task)
    def work(job: drover.Job[Task]) -> None:
        if job.args.n:
            raise ValueError("custom")

    client = _start(make_client, workers, middleware=[], logger=logging.getLogger("myapp.jobs"))
    ok = client.insert(Task())
    bad = client.insert(Task(n=1))
    await_job_state(poll, conn, ok.id, "completed")
    await_job_state(poll, conn, bad.id, "retryable")
    assert _shape(_job_records(caplog, ok.id, "myapp.jobs")) == [
        (STARTED, logging.INFO),
        (FINISHED, logging.INFO),
    ]
    assert _shape(_job_records(caplog, bad.id, "myapp.jobs")) == [
        (STARTED, logging.INFO),
        (RETRY, logging.WARNING),
    ]
    assert _job_records(caplog, ok.id) == []
    assert _job_records(caplog, bad.id) == []


def test_the_middleware_list_is_composed_once(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    workers = drover.Workers()

    @workers.register(args=Task)
    def work(job: drover.Job[Task]) -> None:
        pass

    configured: list[drover.Middleware] = []
    client = _start(make_client, workers, middleware=configured)
    configured.append(_refuse)
    job = client.insert(Task())
    row = await_job_state(poll, conn, job.id, "completed")
    assert row["errors"] == []


# --- 3. the drover logger and the root logger -----------------------------------------------------


def test_the_drover_logger_has_a_null_handler_and_root_is_untouched() -> None:
    drover_logger = logging.getLogger("drover")
    ours = drover_logger.handlers
    assert any(type(h) is logging.NullHandler for h in ours), ours
    assert drover_logger.propagate is True
    root = logging.getLogger()
    assert not any(h in ours for h in root.handlers)
    assert not any(type(h).__module__.startswith("drover") for h in root.handlers)


_CLEAN_PROCESS = textwrap.dedent(
    """
    import logging
    import sys

    root = logging.getLogger()
    assert root.handlers == [], root.handlers
    level = root.level

    import drover

    class Job(drover.JobArgs, kind="task"):
        pass

    import threading

    workers = drover.Workers()
    done = []
    ran = threading.Event()

    @workers.register(args=Job)
    def work(job):
        done.append(job.id)
        ran.set()

    client = drover.Client(sys.argv[1], drover.Config(workers=workers, poll_interval=0.05))
    client.start()
    inserted = client.insert(Job())
    assert ran.wait(30), "the job never ran"
    client.stop(timeout=5)
    assert done == [inserted.id], done
    assert root.handlers == [], root.handlers
    assert root.level == level, (root.level, level)
    assert [type(h) for h in logging.getLogger("drover").handlers] == [logging.NullHandler]
    # The NullHandler keeps logging's last-resort handler from printing this.
    logging.getLogger("drover").warning("drover: must not reach stderr")
    print("ok")
    """
)


def test_drover_never_configures_logging_in_a_clean_process(db_url: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _CLEAN_PROCESS, db_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
    assert result.stderr == ""


# --- 4. JobLogFilter ------------------------------------------------------------------------------


class Collect(logging.Handler):
    """Keeps every record it is handed (after its filters ran)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def named(self, message: str) -> list[logging.LogRecord]:
        return [r for r in self.records if r.getMessage() == message]


@pytest.fixture
def myapp() -> Iterator[Collect]:
    """A collecting handler with a JobLogFilter on the ``myapp`` logger, removed afterwards."""
    logger = logging.getLogger("myapp")
    handler = Collect()
    handler.addFilter(drover.JobLogFilter())
    previous = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


def _filter_fields(record: logging.LogRecord) -> tuple[object, ...]:
    """The fields JobLogFilter sets (job_id, job_kind, queue, attempt) as ``record`` has them."""
    return tuple(getattr(record, name) for name in ("job_id", "job_kind", "queue", "attempt"))


@pytest.mark.parametrize(
    "extra",
    [{}, {"job_id": "mine"}],
    ids=["adds-the-running-jobs-fields", "keeps-fields-a-record-already-has"],
)
def test_job_log_filter_fills_in_the_running_jobs_fields(
    make_client: MakeClient, conn: Conn, poll: Poll, myapp: Collect, extra: dict[str, Any]
) -> None:
    workers = drover.Workers()

    @workers.register(args=Task)
    def work(job: drover.Job[Task]) -> None:
        logging.getLogger("myapp").info("inside %s", job.id, extra=extra)

    client = _start(make_client, workers, queues={"jobs": 1})
    job = client.insert(Task(), drover.InsertOpts(queue="jobs"))
    await_job_state(poll, conn, job.id, "completed")
    (record,) = myapp.named(f"inside {job.id}")
    assert (record.threadName or "").startswith("drover-job-")
    job_id = extra.get("job_id", job.id)
    assert _filter_fields(record) == (job_id, "task", "jobs", 1)


def test_job_log_filter_sets_none_outside_a_job(myapp: Collect) -> None:
    logging.getLogger("myapp").info("outside")
    (record,) = myapp.named("outside")
    assert _filter_fields(record) == (None, None, None, None)


def test_job_log_filter_keeps_concurrent_jobs_apart(
    make_client: MakeClient, conn: Conn, poll: Poll, myapp: Collect
) -> None:
    workers = drover.Workers()
    together = threading.Barrier(2, timeout=10)

    @workers.register(args=Task)
    def work(job: drover.Job[Task]) -> None:
        together.wait()  # both jobs are running at once
        logging.getLogger("myapp").info("job n=%d", job.args.n)
        together.wait()  # neither has left its job before both logged

    client = _start(make_client, workers, concurrency=2)
    first = client.insert(Task(n=1))
    second = client.insert(Task(n=2))
    await_job_state(poll, conn, first.id, "completed")
    await_job_state(poll, conn, second.id, "completed")
    (one,) = myapp.named("job n=1")
    (two,) = myapp.named("job n=2")
    assert one.job_id == first.id  # type: ignore[attr-defined]
    assert two.job_id == second.id  # type: ignore[attr-defined]
    assert one.thread != two.thread


# --- 5. Timeout -----------------------------------------------------------------------------------


class _Observe:
    """What a handler saw of its context: filled in by the worker, read by the test."""

    def __init__(self) -> None:
        self.seen: dict[str, Any] = {}
        self.done = threading.Event()

    def wait_out(self, job: drover.Job[Any], limit: float = 10) -> None:
        started = time.monotonic()
        self.seen["deadline"] = job.context.deadline
        woke = job.context.wait(limit)
        self.seen.update(
            woke=woke,
            waited=time.monotonic() - started,
            cancelled=job.context.cancelled,
            reason=job.context.reason,
        )
        self.done.set()

    def assert_deadline_hit(self) -> None:
        assert self.seen["deadline"] is not None
        assert self.seen["woke"] is True
        assert self.seen["cancelled"] is True
        assert self.seen["reason"] == "deadline exceeded"
        assert 0.1 <= self.seen["waited"] < 5.0, self.seen["waited"]


@pytest.mark.parametrize(
    ("timeout", "fail", "state"),
    [
        pytest.param(0.2, False, "completed", id="seconds-returning-handler-completes"),
        pytest.param(timedelta(seconds=0.2), False, "completed", id="timedelta"),
        pytest.param(0.2, True, "retryable", id="the-handlers-own-error-is-kept"),
    ],
)
def test_timeout_cancels_the_context_and_the_handler_decides_the_outcome(
    make_client: MakeClient,
    conn: Conn,
    poll: Poll,
    timeout: float | timedelta,
    fail: bool,
    state: str,
) -> None:
    workers = drover.Workers()
    observe = _Observe()

    @workers.register(args=Timed)
    def overrun(job: drover.Job[Timed]) -> None:
        observe.wait_out(job)
        if job.args.fail:
            raise ValueError("my own error after the deadline")

    client = _start(make_client, workers, middleware=[drover.Timeout(timeout)])
    job = client.insert(Timed(fail=fail))
    row = await_job_state(poll, conn, job.id, state)
    observe.assert_deadline_hit()
    assert row["attempt"] == 1
    if not fail:
        assert row["errors"] == []
        return
    (entry,) = row["errors"]
    assert (entry["attempt"], entry["error"]) == (1, "ValueError: my own error after the deadline")
    assert "overrun" in entry["trace"]
    assert "Timeout" not in entry["trace"].splitlines()[-1]


@pytest.mark.parametrize("timeout", [0, -1, 0.0, timedelta(0), timedelta(seconds=-5)], ids=repr)
def test_a_timeout_of_zero_or_less_passes_through(
    make_client: MakeClient, conn: Conn, poll: Poll, timeout: float | timedelta
) -> None:
    workers = drover.Workers()
    outer: list[drover.JobContext] = []
    seen: list[tuple[drover.JobContext, float | None, bool]] = []

    def remember(next_handler: drover.Handler) -> drover.Handler:
        def handle(ctx: drover.JobContext, row: drover.JobRow) -> None:
            outer.append(ctx)
            next_handler(ctx, row)

        return handle

    @workers.register(args=Timed)
    def work(job: drover.Job[Timed]) -> None:
        seen.append((job.context, job.context.deadline, job.context.wait(0.05)))

    client = _start(make_client, workers, middleware=[remember, drover.Timeout(timeout)])
    job = client.insert(Timed())
    await_job_state(poll, conn, job.id, "completed")
    ((context, deadline, woke),) = seen
    assert deadline is None
    assert woke is False
    assert context is outer[0], "the worker got the very context the outer middleware had"


@pytest.mark.parametrize("bad", ["5", None, True, float("nan"), float("inf")], ids=repr)
def test_timeout_refuses_what_is_not_a_duration(bad: Any) -> None:
    with pytest.raises(drover.ConfigError, match=r"^Timeout must be a"):
        drover.Timeout(bad)


# --- 6. shutdown still reaches a handler under a timeout ------------------------------------------


class Held(drover.Worker[Timed]):
    """Waits for cancellation, then holds on until released.

    Holding on keeps the job unfinished until shutdown has handed it back;
    otherwise the handler, woken by the cancellation, could record its own
    completion first and ``stop`` would rightly have nothing to report.
    """

    def __init__(self) -> None:
        self.observe = _Observe()
        self.running = threading.Event()
        self.release = threading.Event()

    def work(self, job: drover.Job[Timed]) -> None:
        self.running.set()
        self.observe.wait_out(job, limit=30)
        self.release.wait(10)


class HeldWithTimeout(Held):
    timeout = 60


@pytest.mark.parametrize("bound", ["middleware", "worker-timeout", "both"])
def test_shutdown_cancels_a_handler_running_under_a_timeout(
    make_client: MakeClient, conn: Conn, poll: Poll, bound: str
) -> None:
    workers = drover.Workers()
    worker = Held() if bound == "middleware" else HeldWithTimeout()
    workers.add(worker)
    client = _start(
        make_client,
        workers,
        middleware=[] if bound == "worker-timeout" else [drover.Timeout(60)],
    )
    job = client.insert(Timed())
    try:
        assert worker.running.wait(10), "the handler never started"
        asked = time.monotonic()
        with pytest.raises(drover.DrainIncomplete, match=r"1 job\(s\) still running") as raised:
            client.stop(timeout=0.3)
        assert raised.value.job_ids == (job.id,)
        poll(worker.observe.done.is_set, 20.0, message="the handler noticed the shutdown")
        seen = worker.observe.seen
        assert seen["deadline"] is not None, "the handler ran under a deadline"
        assert (seen["woke"], seen["cancelled"], seen["reason"]) == (True, True, "shutdown")
        # Far below the 60 s deadline the handler would otherwise wait out.
        assert seen["waited"] < 30.0
        assert time.monotonic() - asked < 30.0
        row = job_row(conn, job.id)
        assert (row["state"], row["attempt"]) == ("retryable", 1)
        assert [e["error"] for e in row["errors"]] == [HANDBACK]
    finally:
        worker.release.set()


# --- 7. failures inside middleware ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "error"),
    [
        (RuntimeError("middleware exploded"), "RuntimeError: middleware exploded"),
        (KeyboardInterrupt(), "KeyboardInterrupt"),
        (SystemExit("bye"), "SystemExit: bye"),
        (Abort("abort"), "Abort: abort"),
    ],
    ids=["exception", "keyboard-interrupt", "system-exit", "base-exception"],
)
@pytest.mark.parametrize("where", ["before-next", "after-next"])
def test_an_exception_inside_middleware_fails_the_attempt_and_the_pool_survives(
    make_client: MakeClient,
    conn: Conn,
    poll: Poll,
    exc: BaseException,
    error: str,
    where: str,
) -> None:
    workers = drover.Workers()
    ran: list[int] = []
    threads: list[int] = []

    @workers.register(args=Task)
    def work(job: drover.Job[Task]) -> None:
        ran.append(job.args.n)

    def explode(next_handler: drover.Handler) -> drover.Handler:
        def handle(ctx: drover.JobContext, row: drover.JobRow) -> None:
            threads.append(threading.get_ident())
            boom = row.args["n"] == 1
            if boom and where == "before-next":
                raise exc
            next_handler(ctx, row)
            if boom:
                raise exc

        return handle

    client = _start(make_client, workers, concurrency=1, middleware=[explode])
    failing = client.insert(Task(n=1))
    row = await_job_state(poll, conn, failing.id, "retryable")
    assert [(e["attempt"], e["error"]) for e in row["errors"]] == [(1, error)]
    assert error.split(":")[0] in row["errors"][0]["trace"]
    assert ran == ([] if where == "before-next" else [1])

    fine = client.insert(Task(n=2))
    await_job_state(poll, conn, fine.id, "completed")
    assert ran[-1] == 2
    assert len(threads) == 2
    assert len(set(threads)) == 1, "the single pool thread ran both jobs"


# --- 8. a worker's own timeout --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("middleware", "worker_timeout"),
    [
        ([], 0.2),
        ([], timedelta(seconds=0.2)),
        ([drover.Timeout(60)], 0.2),
        ([drover.Timeout(0.2)], 60),
    ],
    ids=["seconds", "timedelta", "shorter-than-middleware", "longer-than-middleware"],
)
def test_a_worker_timeout_is_honoured_and_the_earlier_deadline_wins(
    make_client: MakeClient,
    conn: Conn,
    poll: Poll,
    middleware: list[drover.Middleware],
    worker_timeout: float | timedelta,
) -> None:
    workers = drover.Workers()

    class Bounded(drover.Worker[Timed]):
        timeout = worker_timeout

        def __init__(self) -> None:
            self.observe = _Observe()

        def work(self, job: drover.Job[Timed]) -> None:
            self.observe.wait_out(job)

    worker = workers.add(Bounded())
    client = _start(make_client, workers, middleware=middleware)
    job = client.insert(Timed())
    row = await_job_state(poll, conn, job.id, "completed")
    assert (row["attempt"], row["errors"]) == (1, [])
    worker.observe.assert_deadline_hit()
