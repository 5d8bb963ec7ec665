"""The single decision point for a finished (or abandoned) attempt: what state comes next.

Used by the pool threads for handler outcomes, by the rescuer for expired
leases, by shutdown for hand-backs and by ``drover.testing``, so every path
writes the same shapes. Deciding and logging are apart: the functions here
return a ``Decision`` (the outcome to write, and what to log about it)
and ``report`` logs it.
"""

from __future__ import annotations

import logging
import traceback
from datetime import UTC, datetime
from typing import Any, NamedTuple

from drover._kernel.claims import Claim
from drover._records import Outcome
from drover.errors import ArgsDecodeError, Cancel, LeaseLost, Snooze
from drover.errors import describe_failure as describe
from drover.job import JobRow, JobState
from drover.log import JOB, human_duration, log_job
from drover.retry import ExponentialRetryPolicy, RetryPolicy

__all__ = [
    "HANDBACK_MESSAGE",
    "RESCUE_MESSAGE",
    "TX_NOT_COMMITTED",
    "Decision",
    "Note",
    "completed",
    "decide",
    "failed",
    "find_signal",
    "handed_back",
    "lease_lost_in",
    "report",
]

RESCUE_MESSAGE = "drover: lease expired, worker presumed dead"
HANDBACK_MESSAGE = "drover: worker shut down before this attempt finished"
TX_NOT_COMMITTED = "drover: complete_tx was called but its transaction did not commit"

_fallback_policy = ExponentialRetryPolicy()


class Note(NamedTuple):
    """A log record about a job: level, event, message (naming it with ``JOB``), fields."""

    level: int
    event: str
    message: str
    args: tuple[object, ...] = ()
    fields: dict[str, Any] = {}  # noqa: RUF012 - never mutated, shared empty default
    exc_info: BaseException | None = None


class Decision(NamedTuple):
    """What to write for an attempt (``None``: nothing), and what to log about it."""

    outcome: Outcome | None
    notes: tuple[Note, ...] = ()


def report(log: logging.Logger, row: JobRow, decision: Decision, tracebacks: bool = True) -> None:
    """Log a decision's notes about ``row`` (the one place a decision is logged), each with its
    exception's traceback unless ``tracebacks`` is off (``Config.log_tracebacks``)."""
    for n in decision.notes:
        trace = n.exc_info if tracebacks and n.exc_info is not None else False
        log_job(log, n.level, row, n.event, n.message, *n.args, exc_info=trace, **n.fields)


def _took(seconds: float) -> dict[str, Any]:
    return {"duration_ms": round(seconds * 1000, 3)}


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


def completed(row: JobRow, result: str | None = None) -> Outcome:
    """The handler returned (``result``: its value as JSON text): the job is done."""
    return Outcome(row.id, row.attempt, JobState.COMPLETED, result=result)


def _retry_at(row: JobRow, policy: RetryPolicy) -> tuple[datetime, Note | None]:
    """The policy's retry time (never in the past), and a note if the policy failed."""
    now = datetime.now(UTC)
    note = None
    try:
        at = policy.next_retry(row)
        if not isinstance(at, datetime) or at.utcoffset() is None:
            raise TypeError(f"next_retry returned {at!r}, not a timezone-aware datetime")
    except Exception as exc:
        note = Note(
            logging.ERROR,
            "retry_policy_failed",
            "retry policy failed for " + JOB + "; falling back to the default schedule: %s",
            (describe(exc),),
            {"error": describe(exc)},
            exc,
        )
        at = _fallback_policy.next_retry(row)
    return max(at, now), note


def failed(
    row: JobRow,
    exc: BaseException | None,
    *,
    policy: RetryPolicy,
    message: str | None = None,
    with_trace: bool = True,
    ran: float | None = None,
) -> Decision:
    """Decide the outcome of an attempt that did not succeed.

    Order (the same for handlers and the rescuer): a Cancel in the chain ends
    the job cancelled; a Snooze schedules it again with the attempt refunded;
    otherwise the failure is recorded and the job is dead once its attempts are
    used up, or at once when no retry can help (stored args that do not
    validate: ``drover.ArgsDecodeError``), else retryable at the policy's
    time. ``ran``: how long the handler ran (seconds), when one did; its one
    note says so and carries the exception (the execution's end record).
    """
    signal = find_signal(exc) if exc is not None else None
    after, took = ("", {}) if ran is None else (f" after {human_duration(ran)}", _took(ran))
    if isinstance(signal, Snooze):
        run_at = datetime.now(UTC) + signal.delay
        when = run_at.isoformat()
        outcome = Outcome(row.id, row.attempt, JobState.SCHEDULED, run_at, refund_attempt=True)
        fields = {"run_at": when, **took}
        note = Note(logging.INFO, "job_snoozed", JOB + " snoozed%s until %s", (after, when), fields)
        return Decision(outcome, (note,))
    text = message if message is not None else describe(exc) if exc is not None else "failed"
    trace = None
    if exc is not None and with_trace:
        trace = "".join(traceback.format_exception(exc)).rstrip()
    if isinstance(signal, Cancel) and signal is not exc and message is None:
        # The reason lives on the chained Cancel; keep it next to the outer message.
        text = f"{text} ({describe(signal)})"
    entry = error_entry(row, text, trace)
    fields = {"error": text, **took}
    if isinstance(signal, Cancel):
        note = Note(
            logging.WARNING, "job_cancelled", JOB + " cancelled%s: %s", (after, text), fields
        )
        return Decision(Outcome(row.id, row.attempt, JobState.CANCELLED, error=entry), (note,))
    if isinstance(exc, ArgsDecodeError) or row.attempt >= row.max_attempts:
        note = Note(logging.ERROR, "job_dead", JOB + " dead%s: %s", (after, text), fields, exc)
        return Decision(Outcome(row.id, row.attempt, JobState.DEAD, error=entry), (note,))
    retry_at, policy_failed = _retry_at(row, policy)
    when = retry_at.isoformat()
    note = Note(
        logging.WARNING,
        "job_retry_scheduled",
        JOB + " failed%s, retry scheduled at %s: %s",
        (after, when, text),
        {**fields, "retry_at": when},
        exc,
    )
    notes = (note,) if policy_failed is None else (policy_failed, note)
    return Decision(Outcome(row.id, row.attempt, JobState.RETRYABLE, retry_at, error=entry), notes)


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


_LEFT_OPEN = Note(
    logging.ERROR,
    "complete_tx_left_open",
    JOB + " ended with its complete_tx transaction still open; commit or roll back before "
    "returning. Nothing was recorded: the job completes if that transaction commits, "
    "else the rescuer retries it after its lease",
)


def decide(
    row: JobRow, claim: Claim, exc: BaseException | None, *, policy: RetryPolicy,
    ran: float | None = None,
) -> Decision:  # fmt: skip
    """The outcome of an execution whose handler returned (``exc`` None) or raised.

    No outcome means write nothing: the handler's ``complete_tx`` was refused
    (the job is another execution's now), or it returned with that
    transaction still open (the row lock is the caller's; the rescuer
    settles the job if the transaction never commits). After a
    ``complete_tx``, the outcome is a retry marked ``settles_tx``: refused,
    as expected, when the transaction committed; applied when it rolled back.
    """
    if exc is not None:
        lost = lease_lost_in(exc)
        if lost is not None:
            note = Note(
                logging.WARNING,
                "complete_tx_refused",
                JOB + " was no longer this worker's to complete (%s); its transaction rolled back "
                "and nothing was recorded",
                (lost,),
                {"error": str(lost)},
            )
            return Decision(None, (note,))
        if claim.completed_in_tx and claim.tx_open():
            return Decision(None, (_LEFT_OPEN,))
        decision = failed(row, exc, policy=policy, ran=ran)
        if claim.completed_in_tx and decision.outcome is not None:
            return decision._replace(outcome=decision.outcome._replace(settles_tx=True))
        return decision
    if not claim.completed_in_tx:
        return Decision(completed(row, claim.context._execution.text))
    if claim.tx_open():
        return Decision(None, (_LEFT_OPEN,))
    entry = error_entry(row, TX_NOT_COMMITTED, None)
    if row.attempt >= row.max_attempts:
        return Decision(Outcome(row.id, row.attempt, JobState.DEAD, error=entry, settles_tx=True))
    retry_at, policy_failed = _retry_at(row, policy)
    outcome = Outcome(
        row.id, row.attempt, JobState.RETRYABLE, retry_at, error=entry, settles_tx=True
    )
    return Decision(outcome, () if policy_failed is None else (policy_failed,))
