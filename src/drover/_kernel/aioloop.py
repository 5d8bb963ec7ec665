"""The event loop a client runs ``async def`` handlers on (ADR 0033).

One loop, on one thread, per client. The fetcher hands it a claim round's
async jobs in one ``call_soon_threadsafe``; each becomes a task that runs
``Executor.run_async``: the async chain, then the same tail as a pool
thread's job. A task holds a slot of the client's ``concurrency`` but no
thread while it awaits.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from functools import partial
from typing import Any

from drover._kernel.claims import Claim
from drover._kernel.executor import Executor
from drover._kernel.service import ThreadService

__all__ = ["EventLoop"]

# After stop, how long cancelled tasks get to unwind before the loop closes.
_UNWIND = 2.0


class EventLoop(ThreadService):
    """The loop thread: runs each dispatched async claim as a task, then settles it.

    ``dispatch`` (the fetcher's thread) schedules a whole claim round with
    one ``call_soon_threadsafe``. A task never lets an exception out: it runs
    ``Executor.run_async``, whose tail is a pool thread's. The claim's
    context is watched:
    when it is cancelled (shutdown hand-back, an operator's cancel, a lost
    lease) the task is cancelled with the reason. ``stop`` (after the
    engine's drain) stops the loop, cancels what still runs, gives it
    ``_UNWIND`` seconds and closes the loop. With ``limit`` (the
    concurrency), at most that many tasks run: the claims of prefetch slots
    wait for one to end.
    """

    name = "eventloop"

    def __init__(
        self,
        *,
        executor: Executor,
        client_id: str,
        logger: logging.Logger,
        limit: int | None = None,
    ) -> None:
        super().__init__(client_id=client_id, logger=logger)
        self._executor = executor
        self._limit = limit
        # Claims of prefetch slots (ADR 0058) waiting for a task to end: at
        # most ``limit`` run at once, the concurrency.
        self._waiting: collections.deque[Claim] = collections.deque()
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
        create, tasks, run, limit = self.loop.create_task, self.tasks, self._run, self._limit
        for claim in claims:
            if limit is not None and len(tasks) >= limit:
                self._waiting.append(claim)
            else:
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
        task = asyncio.current_task()
        if task is not None:
            claim.context._watch(partial(self._cancel, task))
        try:
            await self._executor.run_async(claim)
        finally:
            if task is not None:
                del self.tasks[task]
            if self._waiting:
                waiting = self._waiting.popleft()
                self.tasks[self.loop.create_task(self._run(waiting))] = waiting

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
