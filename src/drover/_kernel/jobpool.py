"""The job pool: the executor's threads serving claims from one queue.

A ``submit`` per job would build a Future (a Condition and its locks) and take
the executor's locks for every job, so each thread runs one long task that
takes claims from a queue, and dispatch is a ``put`` (ADR 0016). A task that
finds nothing to do for a second returns its thread to the executor (and
dispatch submits a new one when work comes back): at interpreter exit the
executor joins its threads, and only a thread waiting on the executor's own
queue can be told to end. (The executor's own exit hook, which could end ours
sooner, is private to the standard library.)
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
from collections.abc import Callable

from drover._kernel.claims import Claim

__all__ = ["JobPool"]

# How long a serving task waits for a claim before it returns its thread.
_IDLE = 1.0


class JobPool:
    """``concurrency`` threads of a ``ThreadPoolExecutor`` that run claims as they arrive.

    The fetcher claims for idle slots, so a thread is free for every claim
    dispatched here, except those of the prefetch slots (``Slots``, ADR
    0058), open only while recent jobs were short: those wait here for a
    thread, briefly. ``end`` stops the threads: each idle one ends at once,
    one inside an abandoned handler ends when the handler returns.
    """

    def __init__(
        self, *, concurrency: int, client_id: str, run: Callable[[Claim], None],
        logger: logging.Logger,
    ) -> None:  # fmt: skip
        self._concurrency = concurrency
        self._run = run
        self._log = logger
        self._ready: queue.SimpleQueue[Claim | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._serving = 0
        self._ended = False
        self.executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=concurrency, thread_name_prefix=f"drover-job-{client_id}"
        )

    def start(self) -> None:
        """Start every thread (ready before the first claim)."""
        self._top_up()

    def dispatch(self, claims: list[Claim]) -> None:
        """Hand claims to the pool threads."""
        for claim in claims:
            self._ready.put(claim)
        # Once per claim round (a lock acquisition): a task that retired just now is replaced.
        self._top_up()

    def _top_up(self) -> None:
        # Under the lock a retiring task checks the queue in: either it sees
        # a claim put before this and keeps serving, or this sees it gone.
        with self._lock:
            if self._ended:
                return
            missing = self._concurrency - self._serving
            if not missing:
                return
            self._serving += missing
        for _ in range(missing):
            self.executor.submit(self._serve)

    def _serve(self) -> None:
        while True:
            try:
                claim = self._ready.get(timeout=_IDLE)
            except queue.Empty:
                with self._lock:
                    if self._ready.empty():
                        self._serving -= 1
                        return
                continue
            if claim is None:
                with self._lock:
                    self._serving -= 1
                return
            try:
                self._run(claim)
            except BaseException:  # run() handles everything; this keeps the thread
                self._log.critical("a pool thread's job runner failed", exc_info=True)

    def end(self, *, wait: bool) -> None:
        """End the threads; ``wait`` joins them (never after abandoned handlers)."""
        with self._lock:
            self._ended = True
            serving = self._serving
        # One end marker per serving task; a task inside an abandoned handler
        # takes its marker when (if) the handler returns.
        for _ in range(serving):
            self._ready.put(None)
        self.executor.shutdown(wait=wait, cancel_futures=True)
