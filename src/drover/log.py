"""Job-aware logging: the built-in Logging middleware and a filter for your own records.

drover logs on the ``drover`` logger (which has a ``NullHandler``; drover never
configures logging for you). Job records carry flat ``extra`` keys:
``job_id``, ``job_kind``, ``queue``, ``attempt`` and, where relevant,
``duration_ms`` and ``error``, so structured handlers can index them.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import Iterator
from typing import Any

from drover.context import JobContext
from drover.errors import describe_failure
from drover.job import JobRow
from drover.middleware import Handler, Middleware

__all__ = ["JobLogFilter", "Logging", "job_scope"]

_current: contextvars.ContextVar[JobRow | None] = contextvars.ContextVar(
    "drover_current_job", default=None
)


@contextlib.contextmanager
def job_scope(row: JobRow) -> Iterator[None]:
    """Make ``row`` the current job for the duration of the block (used by the runner)."""
    token = _current.set(row)
    try:
        yield
    finally:
        _current.reset(token)


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

    __module__ = "drover"

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


def Logging(logger: logging.Logger | None = None) -> Middleware:
    """Middleware writing one start and one end record per execution.

    INFO ``drover: job started``; then INFO ``drover: job finished`` or, when
    the handler raised (snooze and cancel included), WARNING ``drover: job
    failed`` with ``error``. Both carry ``duration_ms``. What happens next
    (retry, dead, cancelled, snoozed) is logged separately, once, by the
    disposition. The client installs this outermost with its own logger; adding
    it to ``Config.middleware`` as well would log twice. When INFO is disabled
    the success path costs one level check.
    """
    log = logger or logging.getLogger("drover")

    def middleware(next_handler: Handler) -> Handler:
        def handle(ctx: JobContext, row: JobRow) -> None:
            verbose = log.isEnabledFor(logging.INFO)
            if verbose:
                log.info("drover: job started", extra=_fields(row))
            started = time.perf_counter()
            try:
                next_handler(ctx, row)
            except BaseException as exc:
                if log.isEnabledFor(logging.WARNING):
                    log.warning(
                        "drover: job failed",
                        extra={
                            **_fields(row),
                            "duration_ms": round((time.perf_counter() - started) * 1000, 3),
                            "error": describe_failure(exc),
                        },
                    )
                raise
            if verbose:
                log.info(
                    "drover: job finished",
                    extra={
                        **_fields(row),
                        "duration_ms": round((time.perf_counter() - started) * 1000, 3),
                    },
                )

        return handle

    return middleware
