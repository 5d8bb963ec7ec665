"""Claims jobs for idle pool slots and hands them to the pool."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Mapping

from drover._kernel.claims import Claim
from drover._kernel.completer import Completer
from drover._kernel.kit import Kit, run_hooks
from drover._kernel.outage import Backoff
from drover._kernel.service import ThreadService
from drover._records import Outcome, Recorded
from drover.job import JobRow

__all__ = ["Fetcher", "weighted_order"]

# While every slot is busy the claim connection is kept this long, so a drain
# of short jobs keeps it from round to round, and long jobs do not hold it.
_BUSY_HOLD = 0.05
# Failed rounds in a row back off from the poll interval, doubling up to this
# (or the poll interval, if longer): few connection attempts on a server out of
# slots, and a worker back at work within seconds of one freeing up.
_BACKOFF_CAP = 5.0


def weighted_order(queues: Mapping[str, int], rng: random.Random) -> list[str]:
    """A full permutation of the queues by weighted sampling without replacement.

    A queue's weight sets how often it is tried first, never whether it is
    tried: every queue appears in every round, so none starves.
    """
    names = list(queues)
    if len(names) == 1:
        return names
    weights = [queues[n] for n in names]
    order: list[str] = []
    total = sum(weights)
    while names:
        pick = rng.random() * total
        index = len(names) - 1
        acc = 0
        for i, w in enumerate(weights):
            acc += w
            if pick < acc:
                index = i
                break
        order.append(names[index])
        total -= weights[index]
        names[index], names[-1] = names[-1], names[index]
        weights[index], weights[-1] = weights[-1], weights[index]
        names.pop()
        weights.pop()
    return order


class Fetcher(ThreadService):
    """The claim loop: wait for idle slots, claim at most that many, dispatch, repeat.

    One round takes every idle slot at once and claims from the queues in
    weighted order, one round trip per queue until the slots are filled. A
    queue with ``max_workers`` is asked for no more than its free part of
    that cap (and skipped, with no round trip, when it has none), so the
    other queues take the remaining slots. Each claimed job is tracked in
    flight *before* it is dispatched, so the heartbeat covers it and shutdown
    sees it. A round that claims nothing sleeps ``poll_interval``, cut short
    by ``wake``, by a capped queue's job returning while that queue was at its
    cap, or by stop. A failed claim ends the round; the loop carries on after
    a backoff: the poll interval, doubled for every further failure in a
    row up to 5 s (or the poll interval, if longer), not cut short by
    ``wake``. A transient failure (no connection, the server's statement or
    lock timeout) is logged once per episode by ``trouble``; others each time.
    While more outcomes wait to be written than ``concurrency``, the excess
    idle slots stay idle until the completer catches up, so the claims held
    (running or finished and unwritten) never exceed twice the concurrency.
    While it claims, the completer keeps its plain completions for it, and
    each claim writes the ones kept so far in its own statement (``riders``,
    ADR 0058); before it waits on anything but a free slot it hands them back.
    """

    name = "fetcher"
    intake = True

    def __init__(
        self,
        kit: Kit,
        *,
        dispatch: Callable[[list[Claim]], None],
        rng: random.Random | None = None,
        riders: Completer | None = None,
    ) -> None:
        super().__init__(client_id=kit.client_id, logger=kit.log)
        settings = kit.settings
        self._weights = dict(settings.weights)
        self._slots = kit.slots
        self._inflight = kit.inflight
        self._dispatch = dispatch
        self._poll = settings.poll_interval
        self._backoff = Backoff(self._poll, max(self._poll, _BACKOFF_CAP))
        self._failures = 0
        self._lease_seconds = kit.lease_seconds
        # Outcomes written in batches let a slot take its next job before the
        # last one's outcome is written; this bounds how far ahead it may run
        # (ADR 0003 amendment): held claims stay under twice the concurrency,
        # so a crash re-runs at most that many jobs, however slow the writes.
        self._backlog = settings.concurrency
        self._rng = rng or random.Random()  # noqa: S311 - queue ordering, not security
        self._wakeup = threading.Event()
        # A capped queue with room again after a round skipped it: claim now,
        # not after the poll interval. (A free slot alone wakes take_all.)
        self._inflight.on_room(self._wakeup.set)
        # Kept while rounds keep finding work; returned before every sleep.
        self._session = kit.store.claim_session()
        self._store = kit.store
        self._context_args = kit.context_args
        self._claimed_hooks = kit.hooks.claimed
        self._before_write = kit.hooks.before_write
        # The completer's plain completions ride with the claims (ADR 0058).
        self._riders = riders
        # Written into each claimed row for operators (Inspector.lease_holder).
        self._holder = kit.holder
        self.claims = 0
        """Claim round trips made (for tests and stats)."""
        self.held_back = 0
        """Rounds that left idle slots unclaimed to wait for outcomes to be written."""

    def join_timeout(self, budget: float | None) -> float | None:
        # Normally instant; bounded so a claim stuck on an unresponsive database cannot hold stop()
        # forever (a late claim is untracked and rescued after its lease).
        return None if budget is None else max(budget, 5.0)

    def wake(self) -> None:
        """Cut the current poll sleep short (new work was inserted)."""
        self._wakeup.set()

    def _wake(self) -> None:
        self._wakeup.set()
        self._slots.wake()

    def _ride(self, on: bool) -> None:
        # Completions ride with the claims while this loop claims; before it waits on anything but a
        # free slot (a poll, a backoff, the completer), the completer writes them itself.
        if self._riders is not None:
            self._riders.ride(on)

    def _loop(self) -> None:
        try:
            self._ride(True)
            while not self._stopping.is_set():
                taken = self._slots.take_all(self._stopping, timeout=_BUSY_HOLD)
                if taken == 0:
                    # Every slot stays busy (long jobs): return the connection
                    # rather than keep it from the handlers while they run.
                    self._session.release()
                    taken = self._slots.take_all(self._stopping)
                    if taken == 0:
                        continue
                riders = self._riders.take_riders() if self._riders is not None else []
                wanted = self._within_backlog(taken, len(riders))
                if wanted == 0:
                    # The database is behind on outcomes: wait for the completer.
                    # The claim connection stays held: the wait is usually a
                    # batch's commit, and the completer writes on its own.
                    self._slots.free(taken, unused=True)
                    self.held_back += 1
                    self._ride(False)
                    if riders:
                        self._requeue(riders)
                    self._inflight.wait_unwritten(self._backlog, self._stopping)
                    self._ride(True)
                    continue
                claimed, failed = 0, True
                try:
                    claimed, failed = self._claim_round(wanted, riders)
                except Exception:
                    # Backstop (claims and dispatch handle their own errors): never let
                    # the claim loop die; log, back off one poll interval, go on.
                    self._log.error("fetch round failed", exc_info=True)
                finally:
                    self._slots.free(taken - claimed, unused=True)
                if failed:
                    # Back off on the stop event alone: a wake-up (an insert, a
                    # freed slot) must not turn an outage into a busy loop.
                    self._session.release()
                    self._ride(False)
                    self._failures += 1
                    self._pause(self._backoff.delay(self._failures))
                    self._wakeup.clear()
                    self._ride(True)
                    continue
                self._failures = 0
                if claimed == 0:
                    self._session.release()
                    self._ride(False)
                    self._wakeup.wait(self._poll)
                    self._wakeup.clear()
                    self._ride(True)
        finally:
            self._ride(False)
            self._session.release()

    def run_once(self) -> int:
        """One claim round for the slots idle right now; returns the number claimed."""
        taken = self._slots.take_all(self._stopping, timeout=0)
        riders = self._riders.take_riders() if self._riders is not None else []
        wanted = self._within_backlog(taken, len(riders))
        try:
            claimed, _ = self._claim_round(wanted, riders) if wanted else (0, False)
            if not wanted:
                self._requeue(riders)
        finally:
            self._session.release()
        self._slots.free(taken - claimed, unused=True)
        return claimed

    def _within_backlog(self, taken: int, riding: int = 0) -> int:
        """How many of ``taken`` idle slots may claim with the outcomes unwritten now
        (``riding`` of them written by this claim)."""
        # Prefetch slots count against the same bound: at most 2 x concurrency held.
        over = self._inflight.unwritten() - riding - (self._backlog - self._slots.extra)
        return taken if over <= 0 else max(0, taken - over)

    def _requeue(self, riders: list[Outcome]) -> None:
        if riders and self._riders is not None:
            self._riders.requeue(riders)

    def _claim_round(self, wanted: int, riders: list[Outcome] | None = None) -> tuple[int, bool]:
        claimed = 0
        riding = riders or []
        try:
            for queue in weighted_order(self._weights, self._rng):
                if claimed >= wanted or self._stopping.is_set():
                    break
                want = wanted - claimed
                room = self._inflight.room(queue)
                if room is not None:
                    if room == 0:
                        continue  # at its max_workers: the job that frees one wakes us
                    want = min(want, room)
                try:
                    if riding:
                        # What must land before outcomes (the last progress reports).
                        if self._before_write:
                            run_hooks(self._log, self._before_write)
                        batch, riding = riding, []
                        rows, sent, wakes = self._session.claim(
                            queue,
                            want,
                            self._lease_seconds,
                            self._holder,
                            completions=batch,
                            landed=self._landing(batch, riding),
                        )
                    else:
                        rows, sent, wakes = self._session.claim(
                            queue, want, self._lease_seconds, self._holder
                        )
                    self.claims += 1
                except Exception as exc:  # DroverError from the database, or anything unforeseen
                    if not self._failed(exc):
                        self._log.error(
                            "fetch jobs from queue %s failed",
                            queue,
                            extra={"queue": queue},
                            exc_info=True,
                        )
                    return claimed, True
                claimed += self._dispatch_claimed(rows, sent, wakes)
            return claimed, False
        finally:
            # Not written (no claim sent, or it failed before they landed):
            # the completer writes them, retrying as it does.
            self._requeue(riding)

    def _landing(
        self, batch: list[Outcome], unwritten: list[Outcome]
    ) -> Callable[[list[Recorded]], None]:
        """The ``landed`` of a claim carrying ``batch``; until it is called, the batch
        stays in ``unwritten`` (handed back to the completer if the claim fails), and
        after, the ones the claim left unsettled (refused: the completer writes them)."""
        riders = self._riders
        assert riders is not None
        unwritten.extend(batch)

        def landed(results: list[Recorded]) -> None:
            unwritten.clear()
            settled = batch
            if len(results) != len(batch):
                written = {(r.outcome.id, r.outcome.attempt) for r in results}
                settled = [o for o in batch if (o.id, o.attempt) in written]
                unwritten.extend(o for o in batch if (o.id, o.attempt) not in written)
            riders.riders_landed(settled, results)

        return landed

    def _dispatch_claimed(self, rows: list[JobRow], sent: float, wakes: frozenset[int]) -> int:
        self._ok()
        deadline = sent + self._lease_seconds
        store, args = self._store, self._context_args
        claims = [
            Claim(row, deadline, wakes=row.id in wakes, store=store, context_args=args)
            for row in rows
        ]
        if self._claimed_hooks:
            run_hooks(self._log, self._claimed_hooks, claims)
        # Tracked before they are handed to the pool threads, so the
        # heartbeat covers them and shutdown sees them.
        self._inflight.add_many(claims)
        self._dispatch(claims)
        return len(rows)
