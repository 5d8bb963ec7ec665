"""What this client is running: the claims it holds and the pool slots they occupy."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from drover.context import JobContext
from drover.job import JobRow

__all__ = ["InFlight", "Running", "Slots"]


@dataclass(slots=True)
class Running:
    """A claim held by this client, from claim until its outcome is recorded."""

    row: JobRow
    context: JobContext
    finished: bool = False
    """Set once the handler returned, so shutdown does not hand back a finished job."""


class InFlight:
    """Claims held by this client, keyed by job id and fenced by attempt.

    A claim is tracked from the moment it is made (so the heartbeat covers it
    and shutdown sees it) until its outcome is written or discarded. Removal
    checks the attempt, so a stale run that finishes late cannot untrack a
    newer claim of the same job. Thread-safe.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._entries: dict[int, Running] = {}

    def add(self, running: Running) -> None:
        """Track a claim. One that replaces an older claim of the same job (rescued, then
        re-claimed here while the old execution still runs) marks the old lease lost."""
        with self._cond:
            previous = self._entries.get(running.row.id)
            self._entries[running.row.id] = running
        if previous is None or previous is running:
            return
        if previous.context.lease.lose("the job was re-claimed"):
            previous.context.cancel("lease lost")

    def add_many(self, runnings: list[Running]) -> None:
        """``add`` for a claim round's jobs, under one acquisition of the lock."""
        replaced: list[Running] = []
        with self._cond:
            entries = self._entries
            for running in runnings:
                previous = entries.get(running.row.id)
                entries[running.row.id] = running
                if previous is not None and previous is not running:
                    replaced.append(previous)
        for previous in replaced:
            if previous.context.lease.lose("the job was re-claimed"):
                previous.context.cancel("lease lost")

    def remove(self, job_id: int, attempt: int) -> bool:
        with self._cond:
            return self._remove(job_id, attempt)

    def remove_many(
        self, claims: Iterable[tuple[int, int]], *, finished_only: bool = False
    ) -> None:
        """``remove`` for each ``(id, attempt)``, under one acquisition of the lock.

        With ``finished_only`` an entry whose handler has not returned stays:
        after a snooze gives its attempt back, a new claim of the same job can
        carry the same ``(id, attempt)`` while the old outcome is being
        recorded, and it must not be untracked by that outcome.
        """
        with self._cond:
            for job_id, attempt in claims:
                self._remove(job_id, attempt, finished_only=finished_only)

    def _remove(self, job_id: int, attempt: int, *, finished_only: bool = False) -> bool:
        entry = self._entries.get(job_id)
        if entry is None or entry.row.attempt != attempt:
            return False
        if finished_only and not entry.finished:
            return False
        del self._entries[job_id]
        if not self._entries:
            self._cond.notify_all()
        return True

    def held(self) -> list[tuple[int, int]]:
        """``(id, attempt)`` of every claim, sorted by id."""
        with self._cond:
            return sorted((i, e.row.attempt) for i, e in self._entries.items())

    def snapshot(self) -> list[Running]:
        with self._cond:
            return [self._entries[i] for i in sorted(self._entries)]

    def wait_empty(self, timeout: float | None) -> bool:
        """Block until nothing is held, or ``timeout`` passes; True when empty."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._entries:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True


class Slots:
    """Idle capacity of the job pool: claims never exceed it.

    The fetcher takes every idle slot at once (so one claim round trip can fill
    them all) and gives back what it did not use; a pool thread gives its slot
    back when its handler returns.

    An optional ``budget`` caps the slots ever taken, over the client's whole
    life: a supervised worker process recycled after N jobs claims exactly N,
    not N plus whatever one more claim round brought in. Slots given back
    unused (``unused=True``) return to the budget; a finished job's do not.
    Once the budget is spent, :meth:`take_all` waits as if every slot were busy.
    """

    def __init__(self, size: int, budget: int | None = None) -> None:
        self._size = size
        self._idle = size
        self._budget = budget
        self._cond = threading.Condition(threading.Lock())
        # Threads inside take_all's wait: give_back skips the notify without one
        # (a pool thread gives its slot back after every job).
        self._waiting = 0

    def _available(self) -> int:
        if self._budget is None:
            return self._idle
        return min(self._idle, self._budget)

    def take_all(self, stopping: threading.Event, timeout: float | None = None) -> int:
        """Wait for at least one idle slot (or stop/timeout), then take every idle one."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._available() == 0 and not stopping.is_set():
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return 0
                # Bounded so a stop that cannot notify us is still noticed.
                self._waiting += 1
                try:
                    self._cond.wait(0.5 if remaining is None else min(remaining, 0.5))
                finally:
                    self._waiting -= 1
            if stopping.is_set():
                return 0
            taken = self._available()
            self._idle -= taken
            if self._budget is not None:
                self._budget -= taken
            return taken

    def give_back(self, count: int = 1, *, unused: bool = False) -> None:
        """Return ``count`` slots; ``unused`` ones (never ran a job) also refund the budget."""
        if count <= 0:
            return
        with self._cond:
            self._idle = min(self._size, self._idle + count)
            if unused and self._budget is not None:
                self._budget += count
            if self._waiting:
                self._cond.notify_all()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()
