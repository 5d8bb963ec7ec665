"""Where a claimer's claims start in each priority level: floors and walks (ADR 0059).

Every claim and completion leaves the index entry of the row version it
replaced behind, at a priority level's oldest end, until vacuum removes it;
while anything pins the MVCC horizon, vacuum cannot. ``ClaimCursors`` keeps,
per claimer, how far its claims have got in each level, so its claims read
each level from there (``job_claim`` with ``walk`` false) and now and then
walk every level from its oldest job instead. Floors only ever skip index
entries: the fence and everything a claim writes are the kernel's
(``drover._db.kernel``); this decides only where its reads begin.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from drover._db.doors import int_array
from drover._records import Outcome
from drover.job import WAITING_STATES, JobRow

__all__ = ["Backdated", "ClaimCursors", "Mailbox", "level_params"]


def level_params(levels: Sequence[tuple[int, datetime]] | None) -> dict[str, Any]:
    """``job_claim``'s ``walk``, ``levels`` and ``floors`` for ``levels`` (see ``claim``)."""
    if levels is None:
        return {"walk": True, "levels": "{}", "floors": []}
    return {
        "walk": False,
        "levels": int_array([p for p, _ in levels]),
        "floors": [f for _, f in levels],
    }


_LATE_COMMIT = timedelta(seconds=1)
"""How far below the newest due time it claimed a level's next claim starts: a job
inserted by a transaction that began up to this long before it committed is due
from the transaction's start, and is still read."""
_WALK_EVERY = 1.0
"""Seconds between walks."""
_WALK_WHEN_EMPTY = 0.25
"""Seconds after the last walk from which a claim that found nothing walks at once."""
_WALK_SHARE = 50
"""The next walk waits at least this many times as long as the last one took."""
_DEFAULT_LEVEL = 0
"""The level every queue is read at from the start: jobs' default priority."""
_OLDEST = datetime(1, 1, 1, tzinfo=UTC)
"""The floor of a level nothing was claimed from yet: its oldest job."""


class Backdated:
    """Told when this store wrote a waiting job due well before now (ADR 0059).

    An outcome may give a retry a due time in the past; such a job may lie
    below the floors of this store's claim sessions, which then lower their
    floors to it and walk on their next claim. A due time less than
    ``_LATE_COMMIT`` ago (a retry without a delay) is above the floors
    already. Each claim session has a mailbox (``subscribe``) holding the
    earliest such time it has not taken yet. Thread-safe: the completer
    tells, the fetchers take.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._boxes: weakref.WeakSet[Mailbox] = weakref.WeakSet()

    def subscribe(self) -> Mailbox:
        """A new mailbox, told of every backdated write from now on."""
        box = Mailbox()
        with self._lock:
            self._boxes.add(box)
        return box

    def take(self, box: Mailbox) -> datetime | None:
        """The earliest due time ``box`` was told of since the last take, and empty it."""
        with self._lock:
            earliest, box.earliest = box.earliest, None
        return earliest

    def check(self, outcomes: Sequence[Outcome]) -> None:
        """Tell every mailbox of ``outcomes`` that put a job back to wait from a time past."""
        before: datetime | None = None
        earliest: datetime | None = None
        for o in outcomes:
            if o.scheduled_at is not None and o.state in WAITING_STATES:
                before = before or datetime.now(UTC) - _LATE_COMMIT
                if o.scheduled_at < before and (earliest is None or o.scheduled_at < earliest):
                    earliest = o.scheduled_at
        if earliest is not None:
            with self._lock:
                for box in self._boxes:
                    if box.earliest is None or earliest < box.earliest:
                        box.earliest = earliest


class Mailbox:
    """One claim session's news from ``Backdated``: the earliest backdated due time."""

    __slots__ = ("__weakref__", "earliest")

    def __init__(self) -> None:
        self.earliest: datetime | None = None


class ClaimCursors:
    """How far one claimer's claims have got in each priority level of each queue (ADR 0059).

    A claim normally reads only the levels of a queue this claimer knows (the
    default level 0, and those it has claimed from), each from its floor: the
    newest due time it claimed there, less ``_LATE_COMMIT``. Below a floor lie
    the index entries that claimed jobs left behind, which vacuum removes
    only once nothing pins the MVCC horizon; reading from the floor keeps a
    claim's cost flat however many there are.

    Now and then a claim walks instead (every level, each from its oldest
    job), to find what the floors hide: a level this claimer has not claimed
    from, a job inserted due in the past or committed later than
    ``_LATE_COMMIT`` after its transaction began, a job another claimer had
    locked and gave back. It walks on the first claim of a queue, then every
    ``_WALK_EVERY`` seconds, and at once when a claim from the floors found
    nothing, ``_WALK_WHEN_EMPTY`` or more after the last walk; but never
    sooner than ``_WALK_SHARE`` times the last walk's duration after it, so
    walks slowed by a pinned horizon take at most a fiftieth of the
    claimer's time (and rarely set its claims' p99). Floors only ever skip
    entries: the fence is the claim's own, and a claim takes what it reads in
    priority, due-time and id order. One thread uses it.
    """

    def __init__(self, backdated: Backdated | None = None) -> None:
        self._backdated = backdated
        self._box = None if backdated is None else backdated.subscribe()
        # queue -> {priority: newest due time claimed there (None: none yet)}
        self._heads: dict[str, dict[int, datetime | None]] = {}
        # queue -> (monotonic time the last walk ended, how long it took)
        self._walks: dict[str, tuple[float, float]] = {}

    def _walk_allowed(self, queue: str, now: float, every: float) -> bool:
        walk = self._walks.get(queue)
        if walk is None:
            return True
        ended, took = walk
        return now - ended >= max(every, _WALK_SHARE * took)

    def levels(self, queue: str, now: float) -> list[tuple[int, datetime]] | None:
        """The levels the next claim of ``queue`` reads, highest first, each with its
        floor; ``None``: walk. ``now`` is ``time.monotonic()``."""
        box = self._box
        if box is not None and box.earliest is not None and self._backdated is not None:
            earliest = self._backdated.take(box)
            if earliest is not None:
                self.lower(earliest)
        if queue not in self._heads or self._walk_allowed(queue, now, _WALK_EVERY):
            return None
        return self.floors(queue)

    def floors(self, queue: str) -> list[tuple[int, datetime]]:
        """The levels of ``queue`` known, highest first, each with its floor."""
        heads = self._heads.get(queue, {_DEFAULT_LEVEL: None})
        return [
            (p, _OLDEST if at is None else at - _LATE_COMMIT)
            for p, at in sorted(heads.items(), reverse=True)
        ]

    def walk_now(self, queue: str, now: float) -> bool:
        """True when a claim of ``queue`` that found nothing should walk straight away."""
        return self._walk_allowed(queue, now, _WALK_WHEN_EMPTY)

    def claimed(
        self,
        queue: str,
        rows: Sequence[JobRow],
        levels: list[tuple[int, datetime]] | None,
        started: float,
        ended: float,
    ) -> bool:
        """Note a claim of ``queue`` that read ``levels`` (``None``: walked), sent at
        ``started`` and back at ``ended`` with ``rows``. True when it found
        nothing from its floors and a walk may run now: a job of a level not known here
        (a first high-priority job) is then found without waiting for a poll."""
        heads = self._heads.setdefault(queue, {_DEFAULT_LEVEL: None})
        if levels is None:
            # A walk read every level from its oldest job: what it claimed is
            # where each of those levels stands now, even below the old floor.
            for p in {row.priority for row in rows}:
                heads[p] = None
            self._walks[queue] = (ended, ended - started)
        for row in rows:
            at = heads.get(row.priority)
            if at is None or row.scheduled_at > at:
                heads[row.priority] = row.scheduled_at
        return not rows and levels is not None and self.walk_now(queue, ended)

    def lower(self, due: datetime) -> None:
        """A job due at ``due`` went back to wait: read every level from there, and walk
        on the next claim of every queue (its level may be one not known here)."""
        for heads in self._heads.values():
            for p, at in heads.items():
                if at is not None and at > due + _LATE_COMMIT:
                    heads[p] = due + _LATE_COMMIT
        self._walks.clear()

    def forget(self, queue: str | None = None) -> None:
        """Start over for ``queue`` (every queue with ``None``): walk on its next claim,
        and read each level from its oldest job until a claim there sets its floor."""
        if queue is None:
            self._walks.clear()
            self._heads.clear()
        else:
            self._walks.pop(queue, None)
            self._heads.pop(queue, None)
