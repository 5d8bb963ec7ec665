"""The single decision point for a finished (or abandoned) attempt: what state comes next.

Used by the pool threads for handler outcomes, by the rescuer for expired
leases and by shutdown for hand-backs, so every path writes the same shapes
and logs the same records.
"""

from __future__ import annotations

import logging
import traceback
from datetime import UTC, datetime
from typing import Any

from drover._db.runtime import Outcome
from drover.errors import Cancel, Snooze
from drover.errors import describe_failure as describe
from drover.job import JobRow, JobState
from drover.retry import ExponentialRetryPolicy, RetryPolicy

__all__ = [
    "HANDBACK_MESSAGE",
    "RESCUE_MESSAGE",
    "completed",
    "failed",
    "find_signal",
    "handed_back",
    "job_fields",
]

RESCUE_MESSAGE = "drover: lease expired, worker presumed dead"
HANDBACK_MESSAGE = "drover: worker shut down before this attempt finished"

_fallback_policy = ExponentialRetryPolicy()


def job_fields(row: JobRow) -> dict[str, Any]:
    """The flat ``extra`` keys every job log record carries."""
    return {"job_id": row.id, "job_kind": row.kind, "queue": row.queue, "attempt": row.attempt}


def _timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def error_entry(row: JobRow, message: str, trace: str | None) -> dict[str, Any]:
    """One element of the ``errors`` array: ``{"attempt", "at", "error", "trace"}``."""
    entry: dict[str, Any] = {
        "attempt": row.attempt,
        "at": _timestamp(datetime.now(UTC)),
        "error": message,
    }
    if trace:
        entry["trace"] = trace
    return entry


def find_signal(exc: BaseException) -> Cancel | Snooze | None:
    """The Cancel or Snooze an exception is or was raised from; Cancel wins over Snooze.

    Follows explicit chaining (``raise X from Cancel(...)``) only: an exception
    merely raised while handling a signal is not a request to cancel.
    """
    snooze: Snooze | None = None
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, Cancel):
            return current
        if isinstance(current, Snooze) and snooze is None:
            snooze = current
        current = current.__cause__
    return snooze


def completed(row: JobRow) -> Outcome:
    """The handler returned: the job is done."""
    return Outcome(row.id, row.attempt, JobState.COMPLETED)


def _retry_at(row: JobRow, policy: RetryPolicy, log: logging.Logger) -> datetime:
    now = datetime.now(UTC)
    try:
        at = policy.next_retry(row)
        if not isinstance(at, datetime) or at.utcoffset() is None:
            raise TypeError(f"next_retry returned {at!r}, not a timezone-aware datetime")
    except Exception as exc:
        log.error(
            "drover: retry policy failed, falling back to the default schedule",
            extra={**job_fields(row), "error": describe(exc)},
            exc_info=True,
        )
        at = _fallback_policy.next_retry(row)
    return max(at, now)


def failed(
    row: JobRow,
    exc: BaseException | None,
    *,
    policy: RetryPolicy,
    log: logging.Logger,
    message: str | None = None,
    with_trace: bool = True,
) -> Outcome:
    """Decide the outcome of an attempt that did not succeed, and log it once.

    Order (the same for handlers and the rescuer): a Cancel in the chain ends
    the job cancelled; a Snooze schedules it again with the attempt given back;
    otherwise the failure is recorded and the job is dead once its attempts are
    used up, else retryable at the policy's time.
    """
    fields = job_fields(row)
    signal = find_signal(exc) if exc is not None else None
    if isinstance(signal, Snooze):
        run_at = datetime.now(UTC) + signal.delay
        log.info("drover: job snoozed", extra={**fields, "run_at": run_at.isoformat()})
        return Outcome(row.id, row.attempt, JobState.SCHEDULED, run_at, give_back=True)
    text = message if message is not None else describe(exc) if exc is not None else "failed"
    trace = None
    if exc is not None and with_trace:
        trace = "".join(traceback.format_exception(exc)).rstrip()
    if isinstance(signal, Cancel) and signal is not exc and message is None:
        # The reason lives on the chained Cancel; keep it next to the outer message.
        text = f"{text} ({describe(signal)})"
    entry = error_entry(row, text, trace)
    if isinstance(signal, Cancel):
        log.warning("drover: job cancelled", extra={**fields, "error": text})
        return Outcome(row.id, row.attempt, JobState.CANCELLED, error=entry)
    if row.attempt >= row.max_attempts:
        log.error(
            "drover: job dead",
            extra={**fields, "error": text, "max_attempts": row.max_attempts},
        )
        return Outcome(row.id, row.attempt, JobState.DEAD, error=entry)
    retry_at = _retry_at(row, policy, log)
    log.warning(
        "drover: job failed, retry scheduled",
        extra={
            **fields,
            "error": text,
            "retry_at": retry_at.isoformat(),
            "max_attempts": row.max_attempts,
        },
    )
    return Outcome(row.id, row.attempt, JobState.RETRYABLE, retry_at, error=entry)


def handed_back(row: JobRow) -> Outcome:
    """Shutdown ran out of time: back to the queue now, the attempt still counted."""
    return Outcome(
        row.id,
        row.attempt,
        JobState.RETRYABLE,
        None,
        error=error_entry(row, HANDBACK_MESSAGE, None),
    )
