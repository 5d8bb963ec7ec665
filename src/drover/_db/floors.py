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

import math
import threading
import weakref
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from drover._db.doors import int_array
from drover._records import Outcome
from drover.job import WAITING_STATES, JobRow

__all__ = ["Backdated", "ClaimCursors", "ClaimTimes", "Mailbox", "level_params"]


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


_SMALLEST = 1e-4
"""Seconds: ``ClaimTimes``' first bucket holds every claim up to this long."""
_PER_OCTAVE = 4
"""``ClaimTimes``' buckets per doubling: each bucket's top is 19% above its bottom."""
_BUCKETS = 96
"""``ClaimTimes``' buckets: the last one holds every claim above 100 µs * 2^(95/4), 28 minutes."""


class ClaimTimes:
    """How long claims took, over a window: a log-bucket histogram (ADR 0060).

    ``add`` is the claim's hot path: a logarithm, a few arithmetic
    operations and an uncontended lock, no allocation. Bucket ``i`` holds
    durations up to ``100 µs * 2^(i/4)``, so a quantile read from it
    (``quantile``) is at most 19% above the true one, and never above the
    window's ``max_seconds``. ``walks`` and ``walk_max_seconds`` count the
    walks among the claims (ADR 0059): under a pinned horizon they slow
    first. Thread-safe: a claimer adds, another thread takes the window.
    """

    __slots__ = ("_lock", "buckets", "claims", "max_seconds", "walk_max_seconds", "walks")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.buckets = [0] * _BUCKETS
        """Claims per bucket."""
        self.claims = 0
        """Claims in the window."""
        self.max_seconds = 0.0
        """The slowest claim's seconds (0 with none)."""
        self.walks = 0
        """Walks among the claims."""
        self.walk_max_seconds = 0.0
        """The slowest walk's seconds (0 with none)."""

    def add(self, seconds: float, *, walk: bool) -> None:
        """Count one claim that took ``seconds`` (a walk when ``walk``)."""
        i = int(math.log2(seconds / _SMALLEST) * _PER_OCTAVE) + 1 if seconds > _SMALLEST else 0
        with self._lock:
            self.buckets[i if i < _BUCKETS else _BUCKETS - 1] += 1
            self.claims += 1
            if seconds > self.max_seconds:
                self.max_seconds = seconds
            if walk:
                self.walks += 1
                if seconds > self.walk_max_seconds:
                    self.walk_max_seconds = seconds

    def take(self) -> ClaimTimes:
        """The window so far, as a new ``ClaimTimes``; this one starts a new window."""
        taken = ClaimTimes()
        with self._lock:
            taken.merge(self)
            self.buckets = [0] * _BUCKETS
            self.claims = self.walks = 0
            self.max_seconds = self.walk_max_seconds = 0.0
        return taken

    def merge(self, other: ClaimTimes) -> None:
        """Add ``other``'s claims to this window (``other`` must not be changing)."""
        self.buckets = [a + b for a, b in zip(self.buckets, other.buckets, strict=True)]
        self.claims += other.claims
        self.walks += other.walks
        self.max_seconds = max(self.max_seconds, other.max_seconds)
        self.walk_max_seconds = max(self.walk_max_seconds, other.walk_max_seconds)

    def quantile(self, q: float) -> float | None:
        """The duration ``q`` (0 to 1) of the claims took at most, to a bucket's top
        (never above ``max_seconds``); ``None`` with no claim."""
        if not self.claims:
            return None
        rank = max(1, math.ceil(q * self.claims))
        seen = 0
        for i, n in enumerate(self.buckets):
            seen += n
            if seen >= rank:  # the last bucket has no top: its claims' is the max
                top = _SMALLEST * 2 ** (i / _PER_OCTAVE) if i < _BUCKETS - 1 else math.inf
                return min(top, self.max_seconds)
        return self.max_seconds


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

    def times(self) -> ClaimTimes:
        """Every live claim session's claim times since the last call, summed; each
        session's window starts over. Thread-safe."""
        with self._lock:
            boxes = list(self._boxes)
        total = ClaimTimes()
        for box in boxes:
            total.merge(box.times.take())
        return total

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
    """One claim session's news from ``Backdated``: the earliest backdated due time;
    and its claims' times, which ``Backdated.times`` collects."""

    __slots__ = ("__weakref__", "earliest", "times")

    def __init__(self) -> None:
        self.earliest: datetime | None = None
        self.times = ClaimTimes()


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

    ``times`` counts how long each claim took (ADR 0060); its store reads
    them through ``Backdated.times`` (thread-safe: ``ClaimTimes``).
    """

    def __init__(self, backdated: Backdated | None = None) -> None:
        self._backdated = backdated
        self._box = None if backdated is None else backdated.subscribe()
        self.times = ClaimTimes() if self._box is None else self._box.times
        """This claimer's claim times since its store last took them."""
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
        (a first high-priority job) is then found without waiting for a poll. Counts the
        claim's time in ``times``."""
        self.times.add(ended - started, walk=levels is None)
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
