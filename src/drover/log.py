"""Job-aware logging: the built-in Logging middleware and a filter for your own records.

drover logs on the ``drover`` logger (which has a ``NullHandler``; the library never
configures logging, though ``drover worker`` does when the application has not).
Every record about a job names it in its text,
so ``logging.basicConfig()`` alone shows which job it was:

    WARNING:drover:job 42 (send_email, queue default, attempt 1/5) failed after 3.1 ms,
    retry scheduled at ...: ValueError: boom
    Traceback (most recent call last): ...

and carries the same facts as flat ``extra`` keys for structured handlers:
``event`` (``job_started``, ``job_retry_scheduled``, ...), ``job_id``, ``job_kind``,
``queue``, ``attempt`` and, where relevant, ``max_attempts``,
``duration_ms`` and ``error``.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from drover.context import JobContext
from drover.job import JobRow
from drover.middleware import Handler, Middleware

__all__ = [
    "JOB",
    "JobLogFilter",
    "JsonFormatter",
    "Logging",
    "human_duration",
    "job_args",
    "job_fields",
    "job_scope",
    "log_execution_end",
    "log_job",
]

JOB = "job %d (%s, queue %s, attempt %d/%d)"
"""How log text names a job; its arguments are ``job_args``. Formatted
lazily by ``logging``, so a disabled level costs no string building."""

_current: contextvars.ContextVar[JobRow | None] = contextvars.ContextVar(
    "drover_current_job", default=None
)


# The runner sets and resets the current job directly (a generator-based
# context manager per job costs several times more).
enter_job = _current.set
leave_job = _current.reset


@contextlib.contextmanager
def job_scope(row: JobRow) -> Iterator[None]:
    """Make ``row`` the current job for the duration of the block (``drover.testing`` uses it;
    the runner sets and resets the variable directly)."""
    token = _current.set(row)
    try:
        yield
    finally:
        _current.reset(token)


def job_args(row: JobRow) -> tuple[int, str, str, int, int]:
    """The arguments of ``JOB`` for ``row``."""
    return row.id, row.kind, row.queue, row.attempt, row.max_attempts


def job_fields(row: JobRow, event: str) -> dict[str, Any]:
    """The flat ``extra`` keys every job record carries, with its ``event`` name."""
    return {
        "event": event,
        "job_id": row.id,
        "job_kind": row.kind,
        "queue": row.queue,
        "attempt": row.attempt,
        "max_attempts": row.max_attempts,
    }


def log_job(
    log: logging.Logger,
    level: int,
    row: JobRow,
    event: str,
    message: str,
    *args: object,
    exc_info: bool | BaseException = False,
    **fields: Any,
) -> None:
    """Log a record about ``row``: ``message`` names it with ``JOB``, whose arguments
    come first, then ``args``; the extra keys are ``job_fields`` plus ``fields``.
    ``exc_info``: an exception whose traceback the record carries (or ``True``:
    the one being handled)."""
    if log.isEnabledFor(level):
        log.log(
            level,
            message,
            *job_args(row),
            *args,
            exc_info=exc_info,
            extra={**job_fields(row, event), **fields},
        )


def _fields(row: JobRow) -> dict[str, Any]:
    return {"job_id": row.id, "job_kind": row.kind, "queue": row.queue, "attempt": row.attempt}


class JobLogFilter(logging.Filter):
    """Adds the running job's fields to every record logged inside ``work()``.

    Attach it to a handler (``handler.addFilter(drover.JobLogFilter())``) and
    records from your own loggers gain ``job_id``, ``job_kind``, ``queue`` and
    ``attempt`` while a job runs on that thread; outside a job they get
    ``None`` so format strings never fail. Fields a record already has are kept.
    Thread-safe: the current job is a context variable, one per pool thread.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Annotate ``record``; never drops it."""
        row = _current.get()
        values = (
            _fields(row)
            if row is not None
            else dict.fromkeys(("job_id", "job_kind", "queue", "attempt"))
        )
        for key, value in values.items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


# The attributes every LogRecord has; anything else on a record came from `extra`
# (or a filter such as JobLogFilter).
_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", logging.INFO, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
}


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object on one line.

    The keys are `time` (ISO-8601 in UTC, to the millisecond, with a `Z`),
    `level`, `logger`, `message` and `pid`, then every `extra` key the record
    carries (drover's own: `event`, `job_id`, `job_kind`, `queue`, `attempt`,
    `max_attempts`, `duration_ms`, `error`, ...), and `exc_info` with the
    formatted traceback when there is one. An extra key whose value is `None`
    is left out (a `JobLogFilter` sets the job fields to `None` outside a
    job), and a value JSON cannot represent is written as its `str()`. The
    five base keys win over an extra of the same name. `drover worker
    --log-format json` uses it; put it on your own handler for the same lines.
    """

    def format(self, record: logging.LogRecord) -> str:
        """The record as a JSON object, without a trailing newline."""
        moment = datetime.fromtimestamp(record.created, UTC)
        document: dict[str, Any] = {
            "time": moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        for key, value in vars(record).items():
            if key in _RECORD_ATTRIBUTES or key in document or key.startswith("_"):
                continue
            if value is not None:
                document[key] = value
        if record.exc_info:
            document["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            document["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(document, default=str, ensure_ascii=False)


def Logging(logger: logging.Logger | None = None) -> Middleware:
    """Middleware writing the start record of every execution and the end record of a success.

    INFO ``job 42 (kind, queue q, attempt 1/25) started`` (event
    ``job_started``); then, when the handler returns, INFO ``... finished in
    3.1 ms`` (``job_finished``, with ``duration_ms``). When it raises, this
    middleware writes nothing more: the outcome's one record says what
    failed, after how long and what happens next (``job_retry_scheduled``,
    ``job_dead``, ``job_cancelled``, ``job_snoozed``), with the traceback
    (see docs/logging.md). The client installs this outermost with its own
    logger; adding it to ``Config.middleware`` as well would log twice.
    When INFO is disabled it costs one level check.
    """
    log = logger or logging.getLogger("drover")

    def middleware(next_handler: Handler) -> Handler:
        def handle(ctx: JobContext, row: JobRow) -> None:
            if not log.isEnabledFor(logging.INFO):
                next_handler(ctx, row)
                return
            log.info(JOB + " started", *job_args(row), extra=job_fields(row, "job_started"))
            started = time.perf_counter()
            next_handler(ctx, row)
            log_execution_end(log, row, started, ctx)

        return handle

    return middleware


def log_execution_end(
    log: logging.Logger, row: JobRow, started: float, ctx: JobContext | None = None
) -> None:
    """Write the record that ends a successful execution, for both forms of ``Logging``.

    ``started`` is the ``time.perf_counter()`` reading at its start. A handler
    that returned although its context was cancelled (an operator's cancel,
    a deadline) is said to have returned after it was asked to stop, with
    the reason (``cancel_reason``): what its write then records is the
    outcome's to say. Nothing is formatted when INFO is off.
    """
    if not log.isEnabledFor(logging.INFO):
        return
    seconds = time.perf_counter() - started
    extra = {**job_fields(row, "job_finished"), "duration_ms": round(seconds * 1000, 3)}
    reason = None if ctx is None else ctx.reason
    if reason is None:
        log.info(JOB + " finished in %s", *job_args(row), human_duration(seconds), extra=extra)
        return
    extra["cancel_reason"] = reason
    log.info(
        JOB + " returned in %s after it was asked to stop (%s)",
        *job_args(row),
        human_duration(seconds),
        reason,
        extra=extra,
    )


def human_duration(seconds: float) -> str:
    """A duration as people read it: ``0.12 ms``, ``3.1 ms``, ``35.18 s``, ``9 min 46 s``."""
    ms = seconds * 1000
    if ms < 1:
        return f"{ms:.2f} ms"
    if ms < 1000:
        return f"{ms:.1f} ms"
    if seconds < 60:
        return f"{seconds:.2f} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"
