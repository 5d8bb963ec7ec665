"""What this client is running: the claims it holds and the pool slots they occupy."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from drover._kernel.store import KernelStore
from drover.context import Execution, JobContext, Lease
from drover.errors import InvalidArgument
from drover.job import JobRow

__all__ = ["Claim", "InFlight", "Slots"]


class _TxCompletion:
    """What ``Job.complete_tx`` runs for one claim, and the connection it completed it on.

    Its own small object, shared by the claim and the handler's context, so
    that neither refers back to the other: a reference cycle per claim would
    leave every claim to the garbage collector instead of freeing it at once.
    """

    __slots__ = ("attempt", "connection", "job_id", "store")

    def __init__(self, job_id: int, attempt: int, store: KernelStore | None) -> None:
        self.store = store
        self.job_id = job_id
        self.attempt = attempt
        self.connection: object = None
        """The connection whose transaction carries the completion, once made."""

    def __call__(self, target: object, result: str | None = None) -> None:
        if self.connection is not None:
            raise InvalidArgument(
                f"complete_tx was already called for job {self.job_id} attempt {self.attempt}"
            )
        if self.store is None:
            raise InvalidArgument(
                "complete_tx needs a job claimed by a drover worker; this claim has no store"
            )
        self.connection = self.store.complete_in_tx(target, self.job_id, self.attempt, result)


class Claim:
    """A claim held by this client, from the claim until its outcome is recorded.

    The engine's side of one execution: the row as claimed, the context the
    handler sees (whose ``Lease`` is the read-only view of this
    claim), whether the handler has returned, the local lease deadline and the
    bookkeeping of a ``complete_tx``. Only drover's threads change it.

    Features keep what they know of one execution in ``extras`` (made on
    first use, ADR 0045); the kernel never reads it.
    """

    __slots__ = (
        "_tx",
        "context",
        "counted",
        "extras",
        "finished",
        "local_deadline",
        "row",
        "wakes",
    )

    def __init__(
        self,
        row: JobRow,
        local_deadline: float | None = None,
        *,
        wakes: bool = False,
        store: KernelStore | None = None,
        context_args: Mapping[str, Any] | None = None,
    ) -> None:
        self.row = row
        self.wakes = wakes
        """Its outcome frees capacity other clients wait for (a cluster-wide concurrency
        limit): once written, the client wakes fetchers."""
        # complete_tx runs on the handler's connection, through the store.
        self._tx = _TxCompletion(row.id, row.attempt, store)
        execution = Execution(complete_tx=self._tx, meta=row.meta, **(context_args or {}))
        self.context = JobContext(
            lease=Lease(row.id, row.attempt, row.leased_until), _execution=execution
        )
        self.local_deadline = local_deadline
        """``time.monotonic()`` by which the lease must have been renewed: the last
        renewal's send time plus a lease, so it never outlives the database's expiry."""
        self.finished = False
        """Set once the handler returned, so shutdown does not hand back a finished job."""
        self.counted = False
        """Counted in its queue's running jobs (``InFlight.running``): from when it is
        tracked until its handler returns or it is handed back, whichever is first."""
        self.extras: dict[str, Any] | None = None
        """What features know of this execution, by feature (``None`` until one writes)."""

    def feature(self, key: str) -> Any:
        """A feature's value for this execution (``None`` when it set none)."""
        extras = self.extras
        return None if extras is None else extras.get(key)

    def set_feature(self, key: str, value: Any) -> None:
        """Keep ``value`` for a feature; called by drover's threads only."""
        if self.extras is None:
            self.extras = {}
        self.extras[key] = value

    @property
    def lease(self) -> Lease:
        return self.context.lease

    @property
    def completed_in_tx(self) -> bool:
        """True once ``Job.complete_tx`` completed the job in a caller's transaction."""
        return self._tx.connection is not None

    @property
    def tx_connection(self) -> object:
        """The connection whose transaction carries that completion (``None`` before)."""
        return self._tx.connection

    def tx_open(self) -> bool:
        """True while the transaction of this claim's ``complete_tx`` is still open."""
        store = self._tx.store
        return store is not None and store.transaction_open(self._tx.connection)

    @property
    def settled(self) -> bool:
        """The handler returned, or completed the job in its own transaction."""
        return self.finished or self._tx.connection is not None

    def lose(self, reason: str, cancel_reason: str = "lease lost") -> bool:
        """Mark the lease lost and cancel the handler's context; True the first time only."""
        if not self.lease._lose(reason):
            return False
        self.context.cancel(cancel_reason)
        return True

    def renewed(self, leased_until: datetime, local_deadline: float) -> None:
        """Record a heartbeat's renewal (ignored once the lease is lost)."""
        if self.lease._renew(leased_until):
            self.local_deadline = local_deadline

    def expired_locally(self, now: float) -> bool:
        """True when ``now`` (monotonic) is past the last renewal's local deadline."""
        deadline = self.local_deadline
        return deadline is not None and now >= deadline


class InFlight:
    """Claims held by this client, keyed by job id and fenced by attempt, and counted per queue.

    A claim is tracked from the moment it is made (so the heartbeat covers it
    and shutdown sees it) until its outcome is written or discarded. Removal
    checks the attempt, so a stale run that finishes late cannot untrack a
    newer claim of the same job.

    Each queue's running jobs are counted from the claim until the handler
    returns (``finished``) or the job is handed back at shutdown, once per
    claim whatever the order: what ``Queue.max_workers`` caps. ``caps`` maps
    capped queues to their ``max_workers``; when a job of a queue that was at
    its cap returns, the ``on_room`` callback runs (the fetcher's wake-up), on
    the thread that freed it, outside the lock. Thread-safe.
    """

    def __init__(self, caps: Mapping[str, int] | None = None) -> None:
        self._cond = threading.Condition()
        self._entries: dict[int, Claim] = {}
        self._caps = dict(caps or {})
        self._running: dict[str, int] = {}
        self._on_room: Callable[[], None] | None = None
        # Tracked claims whose handler returned and whose outcome is not yet
        # written: what a crash now would run again besides the running ones.
        self._unwritten = 0

    def on_room(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` whenever a capped queue goes from its cap to below it."""
        self._on_room = callback

    def _count(self, claim: Claim) -> None:
        # Under the lock. A claim is counted once, when first tracked.
        if not claim.counted:
            claim.counted = True
            queue = claim.row.queue
            self._running[queue] = self._running.get(queue, 0) + 1

    def _uncount(self, claim: Claim) -> bool:
        """Under the lock: stop counting ``claim``; True when its queue left its cap."""
        if not claim.counted:
            return False
        claim.counted = False
        queue = claim.row.queue
        left = self._running[queue] - 1
        if left:
            self._running[queue] = left
        else:
            del self._running[queue]
        cap = self._caps.get(queue)
        return cap is not None and left == cap - 1

    def running(self, queue: str) -> int:
        """How many of ``queue``'s jobs this client runs now (claimed, handler not returned)."""
        with self._cond:
            return self._running.get(queue, 0)

    def room(self, queue: str) -> int | None:
        """How many more of ``queue``'s jobs its cap admits now; ``None`` when it has no cap.

        Only the claiming thread adds claims, so for it the room can only
        grow between this call and its claim.
        """
        cap = self._caps.get(queue)
        if cap is None:
            return None
        with self._cond:
            return max(0, cap - self._running.get(queue, 0))

    def add(self, claim: Claim) -> None:
        """Track a claim. One that replaces an older claim of the same job (rescued, then
        re-claimed here while the old execution still runs) marks the old lease lost."""
        self.add_many([claim])

    def add_many(self, claims: list[Claim]) -> None:
        """Track a claim round's jobs, under one acquisition of the lock (see ``add``).

        A replaced claim stays counted in its queue until its handler returns:
        its thread is still busy with it.
        """
        replaced: list[Claim] = []
        with self._cond:
            entries = self._entries
            for claim in claims:
                previous = entries.get(claim.row.id)
                entries[claim.row.id] = claim
                self._count(claim)
                if previous is not None and previous is not claim:
                    replaced.append(previous)
                    if previous.finished:
                        self._unwritten -= 1
        for previous in replaced:
            previous.lose("the job was re-claimed")

    def finished(self, claim: Claim) -> None:
        """The handler of ``claim`` returned: it no longer counts in its queue's running jobs.

        Called by the pool thread before it frees its slot, so a fetcher woken
        by either sees the room. Wakes the fetcher (``on_room``) when this
        brings a capped queue below its cap.
        """
        with self._cond:
            if not claim.finished and self._entries.get(claim.row.id) is claim:
                self._unwritten += 1
            claim.finished = True
            room = self._uncount(claim)
        if room and self._on_room is not None:
            self._on_room()

    def untrack(self, claims: Iterable[tuple[int, int]], *, handed_back: bool = False) -> None:
        """Stop tracking each ``(id, attempt)`` whose handler has returned.

        The attempt must match, so a stale execution that ends late cannot
        untrack a newer claim of the same job; and an entry whose handler has
        not returned stays: after a snooze refunds its attempt, a new claim of
        the same job can carry the same ``(id, attempt)`` while the old
        outcome is being recorded. ``handed_back`` untracks running ones too
        (shutdown returned their jobs to the queue).
        """
        room = written = False
        with self._cond:
            entries = self._entries
            for job_id, attempt in claims:
                entry = entries.get(job_id)
                if (
                    entry is not None
                    and entry.row.attempt == attempt
                    and (entry.finished or handed_back)
                ):
                    del entries[job_id]
                    if entry.finished:
                        self._unwritten -= 1
                        written = True
                    # A handed-back claim whose handler still runs stops counting
                    # here; if that handler ever returns, it is not counted twice.
                    room = self._uncount(entry) or room
            if not entries or written:
                self._cond.notify_all()
        if room and self._on_room is not None:
            self._on_room()

    def unwritten(self) -> int:
        """How many tracked claims have finished handlers and outcomes not yet written."""
        with self._cond:
            return self._unwritten

    def wait_unwritten(self, limit: int, stopping: threading.Event) -> int:
        """Block until at most ``limit`` outcomes are unwritten (or stop); return how many are.

        The completer's writes wake it; the wait is sliced so a stop is
        noticed within 0.5 s even without one.
        """
        with self._cond:
            while self._unwritten > limit and not stopping.is_set():
                self._cond.wait(0.5)
            return self._unwritten

    def waking(self, claims: Iterable[tuple[int, int]]) -> tuple[set[str], set[str]]:
        """The queues and the kinds of those ``(id, attempt)`` still tracked whose outcome
        ``wakes``."""
        with self._cond:
            entries = self._entries
            queues, kinds = set(), set()
            for job_id, attempt in claims:
                entry = entries.get(job_id)
                if entry is not None and entry.wakes and entry.row.attempt == attempt:
                    queues.add(entry.row.queue)
                    kinds.add(entry.row.kind)
            return queues, kinds

    def get(self, job_id: int) -> Claim | None:
        """The claim of ``job_id`` this client holds, if any."""
        with self._cond:
            return self._entries.get(job_id)

    def held(self) -> list[tuple[int, int]]:
        """``(id, attempt)`` of every claim, sorted by id."""
        with self._cond:
            return sorted((i, e.row.attempt) for i, e in self._entries.items())

    def snapshot(self) -> list[Claim]:
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


# Prefetch while the slowest recent job ran under this long (decayed by
# _DECAY per job: a 10 s job keeps it shut for about 200 short ones).
_SHORT = 0.005
_DECAY = 0.95
# How long the fetcher waits for half the prefetch slots before taking fewer.
_PATIENCE = 0.002
_GLANCE = 0.01


class Slots:
    """Idle capacity of the job pool: claims never exceed it.

    The fetcher takes every idle slot at once (so one claim round trip can fill
    them all) and frees what it did not use; a pool thread frees its slot
    when its handler returns.

    An optional ``budget`` caps the slots ever taken, over the client's whole
    life: a supervised worker process recycled after N jobs claims exactly N,
    not N plus whatever one more claim round brought in. Slots freed unused
    (``unused=True``) return to the budget; a finished job's do not.
    Once the budget is spent, ``take_all`` waits as if every slot were busy.

    ``prefetch`` extra slots (ADR 0058) let the fetcher claim jobs that wait
    for a pool thread, so the threads have work in hand while the next claim
    is on its way: they open while every recent job was short (the slowest
    of the last hundred or so under ``_SHORT``, as ``free(ran=)`` reports
    them) and close at the first long one. With them open, at most
    ``size + prefetch`` claims are unfinished.
    """

    def __init__(self, size: int, budget: int | None = None, *, prefetch: int = 0) -> None:
        self._size = size
        self._idle = size
        self._budget = budget
        self._prefetch = prefetch
        self.extra = 0
        """The prefetch slots open now (0 or ``prefetch``)."""
        self._slowest = _SHORT  # decayed: no prefetch until a short job was seen
        self._cond = threading.Condition(threading.Lock())
        # Threads inside take_all's wait: free skips the notify without one
        # (a pool thread frees its slot after every job).
        self._waiting = 0

    def _enough(self) -> int:
        return max(1, self.extra // 2)

    def _available(self) -> int:
        if self._budget is None:
            return self._idle
        return min(self._idle, self._budget)

    def take_all(self, stopping: threading.Event, timeout: float | None = None) -> int:
        """Wait for at least one idle slot (or stop/timeout), then take every idle one.

        While the prefetch slots are open it waits up to ``_PATIENCE`` for half
        of them to be idle, so the threads still have work in hand and a claim
        brings many jobs, not one per job that ended.
        """
        now = time.monotonic()
        deadline = None if timeout is None else now + timeout
        patience = now + _PATIENCE
        with self._cond:
            while not stopping.is_set():
                available = self._available()
                now = time.monotonic()
                if available >= (self._enough() if now < patience else 1):
                    break
                wait = 0.5 if deadline is None else min(deadline - now, 0.5)
                if available > 0:
                    wait = min(wait, patience - now)
                elif self.extra:
                    # Woken only once enough are idle: look for fewer now and then.
                    wait = min(wait, _GLANCE)
                elif deadline is not None and deadline <= now:
                    return 0
                if wait <= 0:
                    break
                # Bounded so a stop that cannot notify us is still noticed.
                self._waiting += 1
                try:
                    self._cond.wait(wait)
                finally:
                    self._waiting -= 1
            if stopping.is_set():
                return 0
            taken = self._available()
            self._idle -= taken
            if self._budget is not None:
                self._budget -= taken
            return taken

    def free(self, count: int = 1, *, unused: bool = False, ran: float | None = None) -> None:
        """Return ``count`` slots; ``unused`` ones (never ran a job) also refund the budget.
        ``ran``: how long the job that held the slot ran (seconds), for the prefetch."""
        if count <= 0:
            return
        with self._cond:
            if ran is not None and self._prefetch:
                self._slowest = slowest = max(ran, self._slowest * _DECAY)
                extra = self._prefetch if slowest < _SHORT else 0
                if extra != self.extra:
                    # Closing may leave idle below zero until enough jobs end.
                    self._size += extra - self.extra
                    self._idle += extra - self.extra
                    self.extra = extra
            self._idle = min(self._size, self._idle + count)
            if unused and self._budget is not None:
                self._budget += count
            if self._waiting and self._available() >= self._enough():
                self._cond.notify_all()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()
