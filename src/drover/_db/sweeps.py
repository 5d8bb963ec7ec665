"""Where the rescuer's sweeps and the depth counts begin in their indexes (ADR 0059).

Every claim, lease extension and completion leaves the index entries of the
row version it replaced behind until vacuum removes them; while anything pins
the MVCC horizon, vacuum cannot. The lease index's dead entries gather at its
oldest end, where the rescuer's sweep (``job_claim_expired``) begins, and
the depth counts (``stats_depth``) read every entry of the waiting and
running indexes. ``SweepFloors`` and ``DepthFloors`` remember, per store,
where the last read left off, so the next one reads from there, and read
everything now and then to find what a floor hides. Floors only ever skip
index entries: what the sweep writes, and its fence, are the kernel's
(``drover._db.kernel``); this decides only where its read begins.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

__all__ = ["DepthFloors", "Sweep", "SweepFloors", "full_depth"]

_MARGIN = timedelta(seconds=1)
"""How far below a read's database time the next one starts: a row written by a
transaction that began up to this long before the read (and committed after it)
carries that transaction's start (``now()``), and is still read."""
_FULL_EVERY = 10
"""A floored read is followed by a full one after this many floored reads..."""
_FULL_AFTER = 60.0
"""... or this many seconds after the last full one, whichever comes first."""


def _full_due(full_at: float | None, floored: int, now: float) -> bool:
    """True when the read at ``now`` (``time.monotonic()``) must read everything: none
    completed yet (``full_at`` None), ``_FULL_EVERY`` floored reads since the last one
    or ``_FULL_AFTER`` seconds since it ended."""
    return full_at is None or floored >= _FULL_EVERY or now - full_at >= _FULL_AFTER


class Sweep:
    """One sweep of expired leases: the floor it reads above (``None``: every lease), and
    what it found (told by the kernel's ``claim_expired``)."""

    __slots__ = ("at", "floor", "found", "limit")

    def __init__(self, floor: datetime | None) -> None:
        self.floor = floor
        """Only leases that expired after this are read; ``None``: every expired lease."""
        self.at: datetime | None = None
        """The database time of the sweep (``now()``), once it ran."""
        self.found = 0
        """How many expired leases it took."""
        self.limit = 0
        """How many it could take."""

    def ran(self, at: datetime, found: int, limit: int) -> None:
        """Note that the sweep ran at ``at`` (database time) and took ``found`` of ``limit``."""
        self.at, self.found, self.limit = at, found, limit


class SweepFloors:
    """Where one store's next sweep of expired leases begins in the lease index (ADR 0059).

    A lease is always set to the writer's ``now()`` plus a positive lease, so
    a lease expired below the last sweep's database time less ``_MARGIN`` was
    already expired when that sweep read, and it took it: unless it was
    locked at that instant (a completion or extension that rolled back, a
    rescue that failed), or the sweep stopped at its limit. So after a sweep
    that took fewer than its limit, the next reads only leases past that
    floor, and steps over none of the dead entries that claims, extensions
    and completions leave below it. A sweep that reached its limit leaves
    the floor where it was (the next reads the rest from there); a failed
    sweep (an error, a rolled-back transaction) makes the next one full. A
    full sweep (every lease) also runs after ``_FULL_EVERY`` floored ones or
    ``_FULL_AFTER`` seconds, and finds what was locked. Thread-safe; a
    store's sweeps are normally its rescuer's, one at a time.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._floor: datetime | None = None
        self._full_at: float | None = None
        self._floored = 0

    @property
    def floor(self) -> datetime | None:
        """The floor the last sweeps left, whether or not the next is full (for tests)."""
        with self._lock:
            return self._floor

    def next_floor(self, now: float) -> datetime | None:
        """The floor the sweep at ``now`` (``time.monotonic()``) reads above; ``None``: full."""
        with self._lock:
            if self._floor is None or _full_due(self._full_at, self._floored, now):
                return None
            return self._floor

    @contextmanager
    def sweep(self) -> Iterator[Sweep]:
        """One sweep: its floor, and on leaving, what it found sets the next one's (an
        exception, from the sweep or its transaction's commit, makes the next full)."""
        sweep = Sweep(self.next_floor(time.monotonic()))
        try:
            yield sweep
        except BaseException:
            with self._lock:
                self._floor = None
            raise
        self.swept(sweep, time.monotonic())

    def swept(self, sweep: Sweep, now: float) -> None:
        """Note ``sweep``, ended (and committed) at ``now`` (``time.monotonic()``)."""
        with self._lock:
            if sweep.at is None:
                self._floor = None
            elif sweep.found < sweep.limit:
                self._floor = sweep.at - _MARGIN
                if sweep.floor is None:
                    self._full_at, self._floored = now, 0
                else:
                    self._floored += 1
            elif sweep.floor is not None:
                self._floored += 1


class DepthFloors:
    """Where the depth counts of one long-lived reader begin (ADR 0059).

    A full count (``stats_depth`` with ``full``) reads every waiting and
    running index entry, the dead ones included. It notes, per waiting level
    (queue and priority), the earliest due time among its waiting jobs, and
    the earliest lease among the running ones; the next count reads each
    level it knows only from there (or from its database time less
    ``_MARGIN``, if earlier: a job written since is due from its writer's
    ``now()`` at the earliest, and a lease set since expires after it), and
    notes the same again. So a count steps over the dead entries of the
    jobs claimed and completed since the last count, not since vacuum last
    ran. What floors hide waits for the next full count (after
    ``_FULL_EVERY`` floored counts or ``_FULL_AFTER`` seconds): a job
    written due earlier than a floor (a backdated retry, an explicit past due
    time, a job moved by an operator), a level not seen by the last full
    count (a new queue or priority), a job whose writing transaction began
    more than ``_MARGIN`` before the count and committed after it. One-shot
    readers (``Inspector.stats()``, the CLI) count in full, always.
    Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (queue, priority) -> the earliest due time of a waiting job there
        self._levels: dict[tuple[str, int], datetime] = {}
        self._running: datetime | None = None
        self._full_at: float | None = None
        self._floored = 0

    def params(self, now: float) -> dict[str, Any]:
        """``stats_depth``'s parameters for the count at ``now`` (``time.monotonic()``)."""
        with self._lock:
            if self._running is None or _full_due(self._full_at, self._floored, now):
                return full_depth()
            levels = sorted(self._levels.items())
            return {
                "full": False,
                "queues": [q for (q, _), _ in levels],
                "priorities": [p for (_, p), _ in levels],
                "floors": [f for _, f in levels],
                "running_floor": self._running,
            }

    def counted(
        self,
        params: dict[str, Any],
        at: datetime,
        waiting: Iterable[tuple[str, int, datetime]],
        running: datetime | None,
        now: float,
    ) -> None:
        """Note a count made with ``params`` at ``at`` (database time), that found waiting
        jobs due from ``waiting`` (queue, priority, earliest due time) and running ones
        leased until ``running`` at the earliest; ``now``: ``time.monotonic()``."""
        below = at - _MARGIN
        with self._lock:
            levels = dict.fromkeys(self._levels, below)
            # A level has a row per waiting state: its floor is the earliest of them all.
            for queue, priority, earliest in waiting:
                levels[(queue, priority)] = min(levels.get((queue, priority), below), earliest)
            self._levels = levels
            self._running = below if running is None else min(running, below)
            if params["full"]:
                self._full_at, self._floored = now, 0
            else:
                self._floored += 1

    def forget(self) -> None:
        """Count in full next time (after a failed count)."""
        with self._lock:
            self._running = None


def full_depth() -> dict[str, Any]:
    """``stats_depth``'s parameters for a full count."""
    return {"full": True, "queues": [], "priorities": [], "floors": [], "running_floor": None}
