"""Runs claims: the one tail every execution ends with, on a pool thread or the event loop.

``Executor.run`` (a pool thread) and ``Executor.run_async`` (a task on the
client's event loop) differ only in how they call the handler chain. What
happens after is one function, ``_end``: decide the outcome
(``disposition.decide``), log it, count the claim off its queue, free its
slot and hand it to the completer. Neither path can raise: whatever the
chain raises, ``BaseException`` included, is the attempt's error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from time import perf_counter

from drover._kernel import disposition
from drover._kernel.claims import Claim, InFlight, Slots
from drover._kernel.disposition import Decision
from drover.log import JOB, enter_job, leave_job, log_job
from drover.middleware import AsyncHandler, Handler
from drover.retry import RetryPolicy

__all__ = ["Executor"]

# Nothing to write: the rescuer recovers the row after its lease.
_UNDECIDED = Decision(None)


class Executor:
    """Executes claims through a handler chain and ends each one the same way.

    ``chain`` runs sync kinds on pool threads; ``async_chain`` (``None``
    without async workers) runs ``async def`` kinds as tasks. Every claim
    run is passed to ``settle`` with its decision, written or not (the
    completer untracks it there). Thread-safe: each claim is run once, by
    one thread or task.
    """

    def __init__(
        self,
        *,
        chain: Handler,
        async_chain: AsyncHandler | None = None,
        retry_policy: RetryPolicy,
        slots: Slots,
        inflight: InFlight,
        settle: Callable[[Claim, Decision], None],
        logger: logging.Logger,
        tracebacks: bool = True,
    ) -> None:
        self._chain = chain
        self._async_chain = async_chain
        self._policy = retry_policy
        self._slots = slots
        self._inflight = inflight
        self._settle = settle
        self._log = logger
        self._tracebacks = tracebacks

    def run(self, claim: Claim) -> None:
        """Run ``claim`` on this thread through the sync chain (what a pool thread calls).

        A claim lost while it waited for a thread (a prefetched one handed back
        at shutdown, or taken over) is not started: it is settled with nothing
        to write.
        """
        if claim.lease.lost_reason is not None:
            self._skip(claim)
            return
        error: BaseException | None = None
        token = enter_job(claim.row)
        started = perf_counter()
        try:
            self._chain(claim.context, claim.row)
        except BaseException as exc:
            error = exc
        finally:
            leave_job(token)
        self._end(claim, error, perf_counter() - started)

    async def run_async(self, claim: Claim) -> None:
        """Run ``claim`` in this task through the async chain (``CancelledError`` included
        in what becomes the attempt's error: the task ends here)."""
        chain = self._async_chain
        assert chain is not None  # only async kinds are routed here
        if claim.lease.lost_reason is not None:
            self._skip(claim)  # lost while it waited (see run)
            return
        error: BaseException | None = None
        token = enter_job(claim.row)
        started = perf_counter()
        try:
            await chain(claim.context, claim.row)
        except BaseException as exc:
            error = exc
        finally:
            leave_job(token)
        # The task is done: a later cancel (a hand-back racing this) has nothing to cancel.
        claim.context._on_cancel = None
        self._end(claim, error, perf_counter() - started)

    def _skip(self, claim: Claim) -> None:
        """A claim lost before it started: settled with nothing to write, its slot freed."""
        self._inflight.finished(claim)
        try:
            self._settle(claim, _UNDECIDED)
        finally:
            self._slots.free()

    def _end(self, claim: Claim, error: BaseException | None, ran: float | None = None) -> None:
        """The one tail: decide, log, count off, settle, free the slot."""
        row = claim.row
        decision = _UNDECIDED
        try:
            decision = disposition.decide(row, claim, error, policy=self._policy, ran=ran)
            disposition.report(self._log, row, decision, self._tracebacks)
        except BaseException:
            log_job(
                self._log,
                logging.CRITICAL,
                row,
                "outcome_undecided",
                "could not decide the outcome of " + JOB + "; the rescuer will retry it",
                exc_info=True,
            )
        finally:
            # Its queue's count first: a fetcher woken by the free slot must
            # already see the queue's room under its max_workers.
            self._inflight.finished(claim)
        try:
            # Settled before the slot is freed: the fetcher woken by it finds
            # this outcome ready to ride with its claim (ADR 0058).
            self._settle(claim, decision)
        finally:
            self._slots.free(ran=ran)
