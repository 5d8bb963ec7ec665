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

from drover._db.fence import transaction_open
from drover._db.runtime import Outcome
from drover.context import Lease
from drover.errors import ArgsDecodeError, Cancel, LeaseLost, Snooze
from drover.errors import describe_failure as describe
from drover.job import JobRow, JobState
from drover.log import JOB, job_args, job_fields
from drover.retry import ExponentialRetryPolicy, RetryPolicy

__all__ = [
    "HANDBACK_MESSAGE",
    "RESCUE_MESSAGE",
    "TX_NOT_COMMITTED",
    "completed",
    "decide",
    "failed",
    "find_signal",
    "handed_back",
    "lease_lost_in",
]

RESCUE_MESSAGE = "drover: lease expired, worker presumed dead"
HANDBACK_MESSAGE = "drover: worker shut down before this attempt finished"
TX_NOT_COMMITTED = "drover: complete_tx was called but its transaction did not commit"

_fallback_policy = ExponentialRetryPolicy()


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
            "retry policy failed for " + JOB + "; falling back to the default schedule: %s",
            *job_args(row),
            describe(exc),
            extra={**job_fields(row, "retry_policy_failed"), "error": describe(exc)},
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
    used up, or at once when no retry can help (stored args that do not
    validate: :class:`drover.ArgsDecodeError`), else retryable at the policy's
    time.
    """
    signal = find_signal(exc) if exc is not None else None
    if isinstance(signal, Snooze):
        run_at = datetime.now(UTC) + signal.delay
        log.info(
            JOB + " snoozed until %s",
            *job_args(row),
            run_at.isoformat(),
            extra={**job_fields(row, "job_snoozed"), "run_at": run_at.isoformat()},
        )
        return Outcome(row.id, row.attempt, JobState.SCHEDULED, run_at, give_back=True)
    text = message if message is not None else describe(exc) if exc is not None else "failed"
    trace = None
    if exc is not None and with_trace:
        trace = "".join(traceback.format_exception(exc)).rstrip()
    if isinstance(signal, Cancel) and signal is not exc and message is None:
        # The reason lives on the chained Cancel; keep it next to the outer message.
        text = f"{text} ({describe(signal)})"
    entry = error_entry(row, text, trace)
    permanent = isinstance(exc, ArgsDecodeError)
    if isinstance(signal, Cancel):
        log.warning(
            JOB + " cancelled: %s",
            *job_args(row),
            text,
            extra={**job_fields(row, "job_cancelled"), "error": text},
        )
        return Outcome(row.id, row.attempt, JobState.CANCELLED, error=entry)
    if permanent or row.attempt >= row.max_attempts:
        log.error(
            JOB + " dead: %s",
            *job_args(row),
            text,
            extra={**job_fields(row, "job_dead"), "error": text},
        )
        return Outcome(row.id, row.attempt, JobState.DEAD, error=entry)
    retry_at = _retry_at(row, policy, log)
    log.warning(
        JOB + " failed, retry scheduled at %s: %s",
        *job_args(row),
        retry_at.isoformat(),
        text,
        extra={
            **job_fields(row, "job_retry_scheduled"),
            "error": text,
            "retry_at": retry_at.isoformat(),
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


def lease_lost_in(exc: BaseException) -> LeaseLost | None:
    """The LeaseLost ``exc`` is, or was raised from or while handling, if any.

    Frameworks may wrap what escapes a transaction block; the refusal is
    still a refusal however it arrives.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, LeaseLost):
            return current
        current = current.__cause__ or current.__context__
    return None


def decide(
    row: JobRow,
    lease: Lease,
    exc: BaseException | None,
    *,
    policy: RetryPolicy,
    log: logging.Logger,
) -> Outcome | None:
    """The outcome of an execution whose handler returned (``exc`` None) or raised.

    ``None`` means write nothing: the handler's ``complete_tx`` was refused
    (the job is another execution's now), or it returned with that
    transaction still open (the row lock is the caller's; the rescuer
    settles the job if the transaction never commits). After a
    ``complete_tx``, the outcome is a retry marked ``settles_tx``: refused,
    as expected, when the transaction committed; applied when it rolled back.
    """
    if exc is not None:
        lost = lease_lost_in(exc)
        if lost is not None:
            log.warning(
                JOB + " was no longer this worker's to complete (%s); its transaction "
                "rolled back and nothing was recorded",
                *job_args(row),
                lost,
                extra={**job_fields(row, "complete_tx_refused"), "error": str(lost)},
            )
            return None
        if lease.completed_in_tx and transaction_open(lease.tx_connection):
            _left_open(row, log)
            return None
        outcome = failed(row, exc, policy=policy, log=log)
        return outcome._replace(settles_tx=True) if lease.completed_in_tx else outcome
    if not lease.completed_in_tx:
        return completed(row)
    if transaction_open(lease.tx_connection):
        _left_open(row, log)
        return None
    entry = error_entry(row, TX_NOT_COMMITTED, None)
    if row.attempt >= row.max_attempts:
        return Outcome(row.id, row.attempt, JobState.DEAD, error=entry, settles_tx=True)
    retry_at = _retry_at(row, policy, log)
    return Outcome(row.id, row.attempt, JobState.RETRYABLE, retry_at, error=entry, settles_tx=True)


def _left_open(row: JobRow, log: logging.Logger) -> None:
    log.error(
        JOB + " ended with its complete_tx transaction still open; commit or roll back "
        "before returning. Nothing was recorded: the job completes if that transaction "
        "commits, else the rescuer retries it after its lease",
        *job_args(row),
        extra=job_fields(row, "complete_tx_left_open"),
    )
