"""The watch on the event loop's lag: names the async job that blocks it (ADR 0033)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

from drover._kernel.aioloop import EventLoop
from drover._kernel.service import ThreadService
from drover.log import JOB, log_job

__all__ = ["LAG_THRESHOLD", "LoopWatch"]

LAG_THRESHOLD = 0.1
"""Seconds a probe may wait for the loop before a WARNING names the blocking job."""
_PROBE_INTERVAL = 0.1


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
