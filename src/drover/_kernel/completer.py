"""Records outcomes in batches: many jobs per round trip, each still fenced.

The completer is also where a claim leaves this client's books: every claim
ends in ``Completer.settle`` (or, at shutdown, ``Completer.hand_back``),
and only the completer untracks it, once its outcome is written, refused,
discarded or given up on.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from drover._db.errors import classify
from drover._kernel import disposition
from drover._kernel.claims import Claim
from drover._kernel.disposition import Decision
from drover._kernel.kit import Kit, StaleWrite, run_hooks
from drover._kernel.service import ThreadService
from drover._kernel.store import is_plain_completion
from drover._records import Outcome, Recorded, WriteResult
from drover.errors import DroverError
from drover.job import JobState

__all__ = ["Completer"]

MAX_BATCH = 1000
# After a write, the connection is kept this long for the next outcomes, so a
# drain of short jobs writes on one connection; an idle completer returns it.
_BUSY_HOLD = 0.05
# A plain completion waiting to ride with the fetcher's next claim is written
# by the completer itself once it has waited this long (the fetcher is
# asleep: no work, every slot busy, or held back).
_RIDE_WAIT = 0.05
_RETRY_DELAYS = (0.05, 0.2, 0.5, 1.0, 2.0)
# Failures that mean a statement waited on a lock past the server's timeout:
# the batch is then split, so one locked row holds back only its own outcome.
_WAITED_OUT = ("lock_timeout", "statement_timeout")


def write_label(outcome: Outcome) -> str:
    """What a write was, in the duplicate ledger's words: complete, fail, snooze or cancel."""
    if outcome.state is JobState.COMPLETED:
        return "complete"
    if outcome.state is JobState.CANCELLED:
        return "cancel"
    if outcome.refund_attempt:
        return "snooze"
    return "fail"


def _ids(batch: list[Outcome]) -> str:
    shown = ", ".join(str(o.id) for o in batch[:20])
    return shown if len(batch) <= 20 else f"{shown} and {len(batch) - 20} more"


class Completer(ThreadService):
    """Collects outcomes from pool threads and writes whatever has accumulated in one statement.

    There is no artificial delay: while one batch is being written the next
    one builds up, so batches grow exactly when the database is the
    bottleneck. A refused write (the claim was superseded) is logged per job at
    WARNING, counted, handed to the ``stale`` hooks (the duplicate ledger,
    ADR 0037) and its outcome discarded. A write that fails transiently (no
    connection, the server's statement or lock timeout, a conflict) is
    retried until it lands or the fence refuses it, backing off up to 2 s,
    logged once per episode by ``trouble``; its claims stay tracked
    meanwhile, so the heartbeat keeps renewing their leases. Any other
    failure is retried five times. A batch that waited out the server's lock
    or statement timeout is written one outcome at a time, so a row another
    session holds delays only its own outcome. Once stopping, a batch still failing
    after two retries is dropped with an ERROR and its rows stay ``running``
    for the rescuer, so a stop is never held by an unreachable database.
    """

    name = "completer"

    def __init__(self, kit: Kit) -> None:
        super().__init__(client_id=kit.client_id, logger=kit.log)
        self._store = kit.store
        self._inflight = kit.inflight
        self._events = kit.events
        self._hooks = kit.hooks
        self._holder = kit.holder
        self._queue: queue.SimpleQueue[Outcome | None] = queue.SimpleQueue()
        self._accepting = True
        self._accept_lock = threading.Lock()
        self._session = kit.store.outcome_session()
        # Plain completions kept for the fetcher's next claim (ADR 0058), under
        # _accept_lock; _riding while a fetcher takes them.
        self._riding = False
        self._riders: list[Outcome] = []
        self._riders_since = 0.0

    def settle(self, claim: Claim, decision: Decision) -> None:
        """Take a finished claim: queue its outcome for writing, or untrack it if there is none.

        After stop, an outcome is discarded with a WARNING (the rescuer
        settles the row once its lease lapses).
        """
        outcome = decision.outcome
        if outcome is None:
            self._untrack([(claim.row.id, claim.row.attempt)])
            return
        with self._accept_lock:
            if self._accepting:
                if (
                    self._riding
                    and outcome.result is None
                    and not outcome.settles_tx
                    and is_plain_completion(outcome)
                ):
                    if not self._riders:
                        self._riders_since = time.monotonic()
                    self._riders.append(outcome)
                    return
                self._queue.put(outcome)
                return
        self._discarded(outcome, "client stopped")
        self._untrack([(outcome.id, outcome.attempt)])

    # --- completions riding with the fetcher's claims (ADR 0058) -------------------------

    def ride(self, on: bool) -> None:
        """Start (a fetcher runs) or stop keeping plain completions for its claims.

        Stopping hands the completions kept so far to this thread's queue.
        """
        with self._accept_lock:
            self._riding = on
            riders, self._riders = self._riders, []
        if not on:
            self.requeue(riders)

    def take_riders(self) -> list[Outcome]:
        """The plain completions kept for the next claim (the fetcher's thread): it writes
        them with the claim and passes the results to ``riders_landed``, or hands them
        back with ``requeue``."""
        with self._accept_lock:
            riders, self._riders = self._riders, []
        return riders

    def requeue(self, outcomes: Sequence[Outcome]) -> None:
        """Have this thread write ``outcomes`` (taken to ride, not written)."""
        for outcome in outcomes:
            self._queue.put(outcome)

    def riders_landed(self, batch: list[Outcome], results: list[Recorded]) -> None:
        """Act on the results of completions written with a claim, as on a batch's."""
        try:
            self._landed(batch, results)
        except Exception:
            # As in _run: never leave them tracked; their rows are written.
            self._log.error("handling the results of jobs %s failed", _ids(batch), exc_info=True)
            self._untrack((o.id, o.attempt) for o in batch)

    def _overdue_riders(self, now: float) -> tuple[list[Outcome], float]:
        """The kept completions, if the oldest waited ``_RIDE_WAIT``; else none, and how
        long until it has (``_BUSY_HOLD`` when none are kept)."""
        with self._accept_lock:
            if not self._riders:
                return [], _BUSY_HOLD
            left = self._riders_since + _RIDE_WAIT - now
            if left > 0:
                return [], left
            riders, self._riders = self._riders, []
        return riders, _BUSY_HOLD

    def hand_back(self, claims: Sequence[Claim]) -> list[Recorded] | None:
        """Shutdown ran out of time: return these claims' jobs to the queue now, and untrack them.

        Runs on the calling thread (the one stopping the client), in one
        fenced statement. A claim whose handler completed its job with
        ``complete_tx`` is left to that transaction: writing to its row would
        wait on the transaction's lock and could hold the stop past its
        budget. Returns the write's results, or ``None`` when it failed
        (logged at ERROR; the rows stay ``running`` for the rescuer).
        """
        outcomes = [disposition.handed_back(c.row) for c in claims if not c.completed_in_tx]
        try:
            if not outcomes:
                return []
            run_hooks(self._log, self._hooks.before_hand_back, [o.id for o in outcomes])
            # The store may note each in its job's duplicate ledger (ADR 0037): its
            # handler may still be running.
            results = self._store.hand_back(outcomes, worker=self._holder)
            for recorded in results:
                if recorded.result is WriteResult.APPLIED and not recorded.cancelled:
                    self._events.rerun("handed_back")
            run_hooks(self._log, self._hooks.written, results)
            return results
        except DroverError:
            self._log.error(
                "returning jobs %s to the queue failed; the rescuer will recover them",
                ", ".join(str(o.id) for o in outcomes),
                extra={"jobs": [o.id for o in outcomes]},
                exc_info=True,
            )
            return None
        finally:
            self._untrack(((c.row.id, c.row.attempt) for c in claims), handed_back=True)

    def _untrack(self, claims: Iterable[tuple[int, int]], *, handed_back: bool = False) -> None:
        # The one place a claim leaves this client's books.
        self._inflight.untrack(claims, handed_back=handed_back)

    def join_timeout(self, budget: float | None) -> float | None:
        # Every queued outcome is written before the thread ends (its own
        # retries are bounded once stopping), so wait for it without limit.
        return None

    def _wake(self) -> None:
        self._queue.put(None)

    def stop(self, timeout: float | None = 10.0) -> bool:
        """Stop accepting outcomes, write everything queued, then end the thread."""
        self.ride(False)
        with self._accept_lock:
            self._accepting = False
        return super().stop(timeout)

    def _take_batch(self, wait: float, most: int = MAX_BATCH) -> list[Outcome]:
        batch: list[Outcome] = []
        try:
            item = self._queue.get(timeout=wait) if wait > 0 else self._queue.get_nowait()
        except queue.Empty:
            return batch
        if item is not None:
            batch.append(item)
        while len(batch) < most:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                batch.append(item)
        return batch

    def _next_batch(self, stopping: bool) -> list[Outcome]:
        if stopping:
            return self._take_batch(0)
        riders, wait = self._overdue_riders(time.monotonic())
        if riders:
            return riders + self._take_batch(0, MAX_BATCH - len(riders))
        batch = self._take_batch(wait)
        if not batch and not self._stopping.is_set():
            riders, _ = self._overdue_riders(time.monotonic())
            if riders:
                return riders
            with self._accept_lock:
                kept = bool(self._riders)
            if kept:
                return batch  # soon overdue: look again within _RIDE_WAIT
            # Idle: return the connection before the long wait. The wait is
            # bounded so a stop is noticed even if its wake-up is lost; a
            # completion kept to ride meanwhile waits for the fetcher's claim
            # or for the end of this wait.
            self._session.release()
            batch = self._take_batch(0.5)
        return batch

    def _loop(self) -> None:
        try:
            self._run()
        finally:
            self._session.release()

    def _run(self) -> None:
        while True:
            stopping = self._stopping.is_set()
            batch = self._next_batch(stopping)
            if batch:
                try:
                    self._write(batch)
                except Exception:
                    # Never let the completer die: untrack the batch so a drain
                    # cannot wait on it forever; the rescuer recovers the rows.
                    self._log.error(
                        "recording the outcomes of jobs %s failed unexpectedly; leaving them "
                        "running for the rescuer",
                        _ids(batch),
                        extra={"jobs": [o.id for o in batch]},
                        exc_info=True,
                    )
                    self._untrack((o.id, o.attempt) for o in batch)
            elif stopping:
                return

    def run_once(self) -> int:
        """Write whatever is queued now; return how many outcomes were handled."""
        batch = self._take_batch(0)
        try:
            if batch:
                self._write(batch)
        finally:
            self._session.release()
        return len(batch)

    def _write(self, batch: list[Outcome]) -> None:
        attempt = 0
        while batch:
            if self._hooks.before_write:
                run_hooks(self._log, self._hooks.before_write)
            try:
                results = self._session.record(batch)
            except DroverError as exc:
                transient = self._failed(exc)
                stopping = self._stopping.is_set()
                if (stopping and attempt >= 2) or (not transient and attempt >= len(_RETRY_DELAYS)):
                    self._log.error(
                        "recording the outcomes of jobs %s failed; leaving them running for "
                        "the rescuer",
                        _ids(batch),
                        extra={"jobs": [o.id for o in batch]},
                        exc_info=True,
                    )
                    self._untrack((o.id, o.attempt) for o in batch)
                    return
                if not stopping and len(batch) < MAX_BATCH:
                    # Outcomes that came in meanwhile join the retry: a retry
                    # that lasts (an outage, a held row) must not keep them
                    # waiting behind it.
                    batch.extend(self._take_batch(0, MAX_BATCH - len(batch)))
                if len(batch) > 1 and classify(exc) in _WAITED_OUT:
                    # A row another session holds (the server's lock or statement
                    # timeout ended the wait) must not hold back the others: write
                    # each alone, once, and retry only the ones that still fail.
                    batch = self._one_by_one(batch)
                    if not batch:
                        return
                delay = _RETRY_DELAYS[min(attempt, len(_RETRY_DELAYS) - 1)]
                if not transient:
                    self._log.error(
                        "recording the outcomes of %d job(s) failed; retry %d in %ss",
                        len(batch),
                        attempt + 1,
                        delay,
                        extra={"jobs": len(batch), "retry": attempt + 1},
                        exc_info=True,
                    )
                self._pause(delay)
                attempt += 1
            else:
                self._ok()
                self._landed(batch, results)
                return

    def _one_by_one(self, batch: list[Outcome]) -> list[Outcome]:
        """Write each outcome in a statement of its own; return the ones that failed."""
        failed: list[Outcome] = []
        for outcome in batch:
            try:
                results = self._session.record([outcome])
            except DroverError as exc:
                self._failed(exc)
                failed.append(outcome)
            else:
                self._landed([outcome], results)
        return failed

    def _landed(self, batch: list[Outcome], results: list[Recorded]) -> None:
        """Act on a written batch's results: report refusals, untrack, run the hooks."""
        applied = []
        stale: list[StaleWrite] = []
        for recorded in results:
            if recorded.result is not WriteResult.APPLIED:
                note = self._report(recorded)
                if note is not None:
                    stale.append(note)
                continue
            applied.append((recorded.outcome.id, recorded.outcome.attempt))
            if recorded.outcome.settles_tx and recorded.outcome.error is not None:
                self._tx_rolled_back(recorded.outcome)
        hooks = self._hooks
        # Read before the untrack: the claims' wakes flags go with them.
        freed = self._inflight.waking(applied) if hooks.capacity_freed else None
        self._untrack((o.id, o.attempt) for o in batch)
        if hooks.written:
            run_hooks(self._log, hooks.written, results)
        if stale and hooks.stale:
            run_hooks(self._log, hooks.stale, stale)
        if freed and freed[0]:
            # A wake-up is an optimisation: the poll still finds the work.
            run_hooks(self._log, hooks.capacity_freed, *freed)

    def _report(self, recorded: Recorded) -> StaleWrite | None:
        """Log and count a refused write; the stale write to report for it, if any."""
        outcome = recorded.outcome
        if (
            outcome.settles_tx
            and recorded.current_state == JobState.COMPLETED.value
            and recorded.current_attempt == outcome.attempt
        ):
            return None  # complete_tx's transaction committed: the expected refusal
        write = write_label(outcome)
        self._events.write_refused(recorded.result.value)
        self._events.stale_write_refused(recorded.result.value, write)
        self._discarded(
            recorded.outcome,
            f"{recorded.result.value}; it is now {recorded.current_state}, "
            f"attempt {recorded.current_attempt}",
            reason=recorded.result.value,
            current_state=recorded.current_state,
            current_attempt=recorded.current_attempt,
        )
        if recorded.current_state is None:
            return None  # the job is gone: no ledger to write to
        return StaleWrite(
            outcome.id,
            outcome.attempt,
            write,
            recorded.result.value,
            recorded.current_state,
            recorded.current_attempt,
        )

    def _tx_rolled_back(self, outcome: Outcome) -> None:
        error = outcome.error or {}
        self._log.warning(
            "job %d attempt %d called complete_tx but its transaction did not commit; "
            "recorded as a failed attempt (%s)",
            outcome.id,
            outcome.attempt,
            outcome.state.value,
            extra={
                "event": "complete_tx_rolled_back",
                "job_id": outcome.id,
                "attempt": outcome.attempt,
                "outcome": outcome.state.value,
                "error": error.get("error"),
            },
        )

    def _discarded(self, outcome: Outcome, why: str, **fields: Any) -> None:
        self._log.warning(
            "job %d attempt %d is no longer this worker's to finish (%s); "
            "discarding its %s outcome",
            outcome.id,
            outcome.attempt,
            why,
            outcome.state.value,
            extra={
                "event": "outcome_discarded",
                "job_id": outcome.id,
                "attempt": outcome.attempt,
                "outcome": outcome.state.value,
                "reason": why,
                **fields,
            },
        )
