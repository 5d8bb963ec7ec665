"""The event loop a client runs ``async def`` handlers on, and the watch on its lag (ADR 0033).

One loop, on one thread, per client. The fetcher hands it a claim round's
async jobs in one ``call_soon_threadsafe``; each becomes a task that runs
the async chain and then goes through the same disposition and the same
completer as a pool thread's job. A task holds a slot of the client's
``concurrency`` but no thread while it awaits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from drover._runtime import disposition
from drover._runtime.disposition import Decision
from drover._runtime.inflight import Claim, InFlight, Slots
from drover._runtime.service import ThreadService
from drover.log import JOB, enter_job, leave_job, log_job
from drover.middleware import AsyncHandler
from drover.retry import RetryPolicy

__all__ = ["LAG_THRESHOLD", "EventLoop", "LoopWatch"]

LAG_THRESHOLD = 0.1
"""Seconds a probe may wait for the loop before a WARNING names the blocking job."""
_PROBE_INTERVAL = 0.1
# After stop, how long cancelled tasks get to unwind before the loop closes.
_UNWIND = 2.0


class EventLoop(ThreadService):
    """The loop thread: runs each dispatched async claim as a task, then settles it.

    ``dispatch`` (the fetcher's thread) schedules a whole claim round with
    one ``call_soon_threadsafe``. A task never lets an exception out: what
    the chain raises, ``CancelledError`` included, is the attempt's error,
    decided and logged as a pool thread does, and passed to ``settle``
    (the completer's batched, fenced write). The claim's context is watched:
    when it is cancelled (shutdown hand-back, an operator's cancel, a lost
    lease) the task is cancelled with the reason. ``stop`` (after the
    engine's drain) stops the loop, cancels what still runs, gives it
    ``_UNWIND`` seconds and closes the loop.
    """

    name = "eventloop"

    def __init__(
        self,
        *,
        chain: AsyncHandler,
        retry_policy: RetryPolicy,
        slots: Slots,
        inflight: InFlight,
        settle: Callable[[Claim, Decision], None],
        client_id: str,
        logger: logging.Logger,
    ) -> None:
        super().__init__(client_id=client_id, logger=logger)
        self._chain = chain
        self._policy = retry_policy
        self._slots = slots
        self._inflight = inflight
        self._settle = settle
        self.loop = asyncio.new_event_loop()
        self.loop.set_exception_handler(self._loop_error)
        self.tasks: dict[asyncio.Task[None], Claim] = {}
        """The running tasks and their claims (read by the lag watch)."""

    def join_timeout(self, budget: float | None) -> float | None:
        return _UNWIND + 5.0

    def dispatch(self, claims: list[Claim]) -> None:
        """Start ``claims`` as tasks on the loop (one wake-up of the loop thread per round)."""
        try:
            self.loop.call_soon_threadsafe(self._start, claims)
        except RuntimeError:  # the loop is closed: the rescuer recovers them after their lease
            self._log.error(
                "event loop closed: %d async job(s) not started", len(claims), exc_info=True
            )

    def _start(self, claims: list[Claim]) -> None:
        # No task name and no done callback: each would cost every job (the
        # task removes itself from ``tasks`` as it ends).
        create, tasks, run = self.loop.create_task, self.tasks, self._run
        for claim in claims:
            tasks[create(run(claim))] = claim

    def _cancel(self, task: asyncio.Task[None], reason: str) -> None:
        """Cancel ``task`` with ``reason`` (any thread: the loop's or another)."""
        loop = self.loop
        if loop.is_closed():
            return
        # Closed in between: nothing runs the task any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(task.cancel, reason)

    async def _run(self, claim: Claim) -> None:
        row = claim.row
        decision = _UNDECIDED
        task = asyncio.current_task()
        try:
            error: BaseException | None = None
            token = enter_job(row)
            if task is not None:
                claim.context._watch(partial(self._cancel, task))
            try:
                await self._chain(claim.context, row)
            except BaseException as exc:  # CancelledError too: this task ends here
                error = exc
            finally:
                leave_job(token)
            decision = disposition.decide(row, claim, error, policy=self._policy)
            disposition.report(self._log, row, decision)
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
            # The task is done: a later cancel (a hand-back racing this) has nothing to cancel.
            claim.context._on_cancel = None
            if task is not None:
                del self.tasks[task]
            self._inflight.finished(claim)
            self._slots.free()
        self._settle(claim, decision)

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        self._log.error(
            "event loop error: %s",
            context.get("message", "unknown"),
            exc_info=context.get("exception"),
        )

    def _wake(self) -> None:
        if not self.loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self.loop.stop)

    def _loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            while not self._stopping.is_set():
                self.loop.run_forever()
            pending = [t for t in self.tasks if not t.done()]
            for task in pending:
                task.cancel("client stopped")
            if pending:
                self.loop.run_until_complete(asyncio.wait(pending, timeout=_UNWIND))
        finally:
            self.loop.close()


class LoopWatch(ThreadService):
    """Measures the event loop's lag and names the job that blocks it.

    Every ``_PROBE_INTERVAL`` it schedules a probe on the loop and times how
    late it runs (``drover_event_loop_lag_seconds``). A probe still waiting
    after ``threshold`` seconds means a handler is blocking the loop (a
    sync call in an ``async def``): one WARNING per blocked stretch, while it
    blocks, naming the job whose task holds the loop and the tasks waiting.
    """

    name = "loopwatch"

    def __init__(
        self,
        events: EventLoop,
        *,
        observe: Callable[[float], None],
        client_id: str,
        logger: logging.Logger,
        threshold: float = LAG_THRESHOLD,
    ) -> None:
        super().__init__(client_id=client_id, logger=logger)
        self._events = events
        self._observe = observe
        self._threshold = threshold
        self.blocked = 0
        """Blocked stretches reported (for tests)."""

    def _loop(self) -> None:
        while not self._stopping.wait(_PROBE_INTERVAL):
            try:
                self.run_once()
            except Exception:
                self._log.error("event loop lag probe failed", exc_info=True)

    def run_once(self) -> float | None:
        """One probe: its lag in seconds (``None`` when the loop is closed or we stop)."""
        loop = self._events.loop
        if loop.is_closed():
            return None
        probe = threading.Event()
        sent = time.monotonic()
        try:
            loop.call_soon_threadsafe(probe.set)
        except RuntimeError:
            return None
        if not probe.wait(self._threshold):
            self._report(time.monotonic() - sent)
            while not probe.wait(_PROBE_INTERVAL):
                if self._stopping.is_set() or loop.is_closed():
                    return None
        lag = time.monotonic() - sent
        self._observe(lag)
        return lag

    def _report(self, lag: float) -> None:
        self.blocked += 1
        loop = self._events.loop
        current = asyncio.current_task(loop)
        claim = self._events.tasks.get(current) if current is not None else None
        waiting = len(self._events.tasks) - (1 if claim is not None else 0)
        if claim is not None:
            log_job(
                self._log,
                logging.WARNING,
                claim.row,
                "event_loop_blocked",
                JOB + " is blocking the event loop (over %.3f s so far: a blocking call in an "
                "async handler); %d other async job(s) are waiting",
                lag,
                waiting,
                lag_seconds=round(lag, 3),
            )
        else:
            self._log.warning(
                "event loop blocked for over %.3f s (not inside an async job); "
                "%d async job(s) are waiting",
                lag,
                waiting,
                extra={"event": "event_loop_blocked", "lag_seconds": round(lag, 3)},
            )


# Nothing to write: the rescuer recovers the row after its lease.
_UNDECIDED = Decision(None)
