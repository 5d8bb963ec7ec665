"""Operators' requests to cancel a running job, delivered to the claim they name (ADR 0030).

A feature outside the kernel (ADR 0045). A request reaches this client
three ways: the listener's notification on channel ``drover_cancel``
(within a round trip of the operator's commit); a read of the requests of
every held claim each time the listener (re)starts listening, so none sent
while it was away is missed; and, for a client that does not listen
(notifications off, or behind a transaction pooler without a session URL),
the same read every heartbeat interval (``CancelPoller``). Either way
``Cancels.deliver`` sets the claim's cancellation signal, the same
``JobContext`` that ``Timeout`` and shutdown cancel. The database, not
this module, makes the attempt end ``cancelled``: a job with a request is
watched, and the completion of a watched job ends it so.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from drover._kernel.claims import Claim, InFlight
from drover._kernel.service import IntervalService
from drover._records import Recorded, WriteResult
from drover.log import JOB, log_job

__all__ = [
    "CancelPoller",
    "CancelRequest",
    "Cancels",
    "HardCancel",
    "cancel_reason",
    "log_cancelled",
]

_ENDED_CANCELLED = attrgetter("cancelled")
_EXTRA = "cancel"
"""The key of a claim's delivered request in ``Claim.extras``."""


@dataclass(frozen=True, slots=True)
class CancelRequest:
    """One operator's request: which claim, why, and whether to replace the process."""

    job_id: int
    attempt: int | None
    """The attempt the operator saw running (``None``: whichever runs now)."""
    reason: str | None
    hard: bool
    grace: float
    """Seconds a hard cancel leaves the handler before its process is replaced."""

    @classmethod
    def from_payload(cls, payload: str) -> CancelRequest | None:
        """A request from a ``drover_cancel`` notification's JSON, or ``None`` if malformed."""
        try:
            data = json.loads(payload)
            return cls(
                int(data["id"]),
                None if data.get("attempt") is None else int(data["attempt"]),
                None if data.get("reason") is None else str(data["reason"]),
                bool(data.get("hard")),
                float(data.get("grace") or 0.0),
            )
        except (ValueError, TypeError, KeyError):
            return None

    @classmethod
    def from_column(cls, job_id: int, attempt: int, value: Mapping[str, Any]) -> CancelRequest:
        """A request from a job's ``cancel_request`` column (the heartbeat's answer)."""
        reason = value.get("reason")
        return cls(
            job_id,
            attempt,
            None if reason is None else str(reason),
            bool(value.get("hard")),
            float(value.get("grace") or 0.0),
        )


def cancel_reason(reason: str | None) -> str:
    """The cancellation reason a handler's context reports for an operator's cancel."""
    return "cancelled by operator" + (f": {reason}" if reason else "")


def log_cancelled(log: logging.Logger, job_id: int, attempt: int) -> None:
    """Say that the write ending an attempt ended the job ``cancelled`` on request."""
    log.warning(
        "job %d attempt %d ended cancelled: an operator asked to cancel it while it ran",
        job_id,
        attempt,
        extra={"event": "job_cancelled_on_request", "job_id": job_id, "attempt": attempt},
    )


@dataclass(frozen=True, slots=True)
class HardCancel:
    """A hard cancel handed to the process's supervisor: replace the process after ``grace``
    seconds unless ``done()`` (the handler returned) by then."""

    job_id: int
    grace: float
    done: Callable[[], bool]


class Cancels:
    """Delivers cancel requests to this client's claims; called from the listener's and the
    heartbeat's threads, so each claim is told once (and once more if a soft request is
    made hard).

    A hard request goes to ``on_hard`` (set for a supervised worker process,
    ``drover worker --processes N``), which replaces the process once the
    grace has passed with the handler still running. Without one a hard
    request acts as a soft one, with a WARNING saying so.
    """

    def __init__(
        self,
        inflight: InFlight,
        log: logging.Logger,
        *,
        counted: Callable[[str], None],
        on_hard: Callable[[HardCancel], None] | None = None,
    ) -> None:
        self._inflight = inflight
        self._log = log
        self._counted = counted
        self._on_hard = on_hard
        self._lock = threading.Lock()

    def deliver(self, request: CancelRequest, via: str) -> bool:
        """Tell the claim ``request`` names; False when this client does not hold it or
        already knew (``via``: notification or heartbeat, for the metric)."""
        claim = self._inflight.get(request.job_id)
        if claim is None or (request.attempt is not None and claim.row.attempt != request.attempt):
            return False
        with self._lock:
            known = claim.feature(_EXTRA)
            if known is not None and (known.hard or not request.hard):
                return False
            claim.set_feature(_EXTRA, request)
        claim.context.cancel(cancel_reason(request.reason))
        self._counted(via)
        log_job(
            self._log,
            logging.WARNING,
            claim.row,
            "job_cancel_requested",
            JOB + " %s: an operator asked to cancel it (%s); its handler is asked to stop",
            "hard cancel" if request.hard else "cancel",
            request.reason or "no reason given",
            reason=request.reason,
            hard=request.hard,
            via=via,
        )
        if request.hard:
            self._hard(claim, request)
        return True

    def notified(self, payload: str) -> bool:
        """Deliver the request a ``drover_cancel`` notification carries."""
        request = CancelRequest.from_payload(payload)
        if request is None:
            self._log.warning("ignored a malformed cancel notification: %.200r", payload)
            return False
        return self.deliver(request, "notification")

    def catch_up(
        self,
        read: Callable[[list[tuple[int, int]]], list[tuple[int, int, Any]]],
        via: str = "heartbeat",
    ) -> int:
        """Read the requests of every held claim with ``read`` and deliver them; how many
        were new. Run after each LISTEN starts (``via`` notification) and by
        ``CancelPoller`` (``via`` heartbeat: what ``drover_cancels_delivered_total``
        calls the fallback)."""
        held = self._inflight.held()
        if not held:
            return 0
        delivered = 0
        for job_id, attempt, value in read(held):
            request = CancelRequest.from_column(job_id, attempt, value)
            delivered += self.deliver(request, via)
        return delivered

    def written(self, results: Sequence[Recorded]) -> None:
        """The ``written`` hook: say which writes ended a job cancelled on request."""
        if not any(map(_ENDED_CANCELLED, results)):
            return  # the usual batch: one pass in C
        for recorded in results:
            if recorded.result is WriteResult.APPLIED and recorded.cancelled:
                log_cancelled(self._log, recorded.outcome.id, recorded.outcome.attempt)

    def _hard(self, claim: Claim, request: CancelRequest) -> None:
        if self._on_hard is None:
            log_job(
                self._log,
                logging.WARNING,
                claim.row,
                "hard_cancel_unsupervised",
                "hard cancel of " + JOB + " asked, but this worker is not supervised "
                "(drover worker --processes N): treated as a soft cancel, its handler is "
                "only asked to stop",
            )
            return
        self._on_hard(HardCancel(request.job_id, request.grace, lambda: claim.finished))


class CancelPoller(IntervalService):
    """For a client that does not listen: every heartbeat interval, reads the cancel requests
    of the claims it holds (one statement, only while it holds some) and delivers them."""

    name = "cancels"
    action = "read cancel requests"

    def __init__(
        self,
        cancels: Cancels,
        read: Callable[[list[tuple[int, int]]], list[tuple[int, int, Any]]],
        *,
        interval: float,
        client_id: str,
        logger: logging.Logger,
    ) -> None:
        super().__init__(interval=interval, client_id=client_id, logger=logger)
        self._cancels = cancels
        self._read = read

    def run_once(self) -> int:
        """Read and deliver once; how many requests were new."""
        return self._cancels.catch_up(self._read)
