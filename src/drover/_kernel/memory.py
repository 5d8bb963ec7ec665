"""An in-memory ``KernelStore``: the kernel's rules on a dict, without PostgreSQL.

What it is for: running the kernel's own logic (claim, dispatch,
completion, lease renewal, rescue, hand-back, shutdown drain) where a
server is not wanted, and fast tests of that logic. It keeps the rules of
``drover._kernel.store`` exactly as PostgreSQL's statements do
(``sql/queries/runtime.sql``); the conformance suite (``tests/kernel/``)
runs the same behaviours against both stores, so a difference that matters
shows there. Oban's Inline engine, Procrastinate's ``InMemoryConnector`` and
River's driver test suite are the precedents (ADR 0051).

What it is: every job in one dict under one lock, ids from a counter, the
store's clock a callable (``time.time()`` as an aware UTC ``datetime`` by
default; a ``ManualClock`` in tests that move time instead of waiting).
Leases, dueness, ``attempted_at`` and ``finalized_at`` all read that clock.
Every method is thread-safe; the two sessions are stateless, so sharing one
is harmless, though the protocol asks for one thread each.

Row locks are modelled where the rules depend on them: ``complete_in_tx``
joins a ``MemoryTransaction`` (this store's stand-in for the caller's
psycopg transaction), whose completion stays invisible to every other
caller until it commits, and whose row stays locked until it ends, as
PostgreSQL's does: a claim or a rescue skips it, a renewal leaves it
unrenewed for that beat, and an outcome write of the same job waits for the
transaction to end and then sees what it did.

What it deliberately does not do (the kernel's core only, no feature):

- no cluster-wide limits or queue caps (``Claimed.wakes`` is always empty);
- no waiting for results (a completion stores its result, readable with
  ``hidden``, but nobody is notified);
- no dependencies or workflows (no ``pending`` state, nothing released or
  cancelled when a job ends);
- no unique identities, debounce or throttle; only the plain ``unique_key``
  of ``JobInsertParams`` (one active job per queue, kind and key), since the
  kernel's insert accepts it;
- no cancel requests for running jobs (``Renewal.cancel_request`` is always
  ``None``, an outcome is never turned into ``cancelled``);
- no duplicate ledger, progress, metadata updates, notifications or
  wake-ups (callers poll), retention, periodic jobs, statistics;
- no persistence and no sharing: the jobs live in this process's memory
  and are gone when it ends. Nothing here replaces PostgreSQL in production.
"""

from __future__ import annotations

import heapq
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, NamedTuple

from drover._durations import Duration, to_seconds
from drover._kernel.store import Claimed, is_plain_completion, refusal
from drover._records import JobInsertParams, Outcome, Recorded, Renewal, WriteResult
from drover.errors import (
    DuplicateJob,
    InvalidArgument,
    LeaseLost,
    NotInTransaction,
    UnsupportedConnection,
)
from drover.job import (
    ACTIVE_STATES,
    NO_META,
    TERMINAL_STATES,
    WAITING_STATES,
    JobRow,
    JobState,
)
from drover.queues import QueueState

__all__ = [
    "Clock",
    "HiddenColumns",
    "ManualClock",
    "MemoryClaimSession",
    "MemoryOutcomeSession",
    "MemoryStore",
    "MemoryTransaction",
    "system_clock",
]

Clock = Callable[[], datetime]
"""A store's clock: returns the current time as a timezone-aware ``datetime``."""

_MAX_CLAIM = 2**31 - 1
_RUNNING = JobState.RUNNING
_WAITING = frozenset(WAITING_STATES)
_TERMINAL = frozenset(TERMINAL_STATES)
_ACTIVE = frozenset(ACTIVE_STATES)


def system_clock() -> datetime:
    """``time.time()`` as an aware UTC ``datetime``: the default store clock."""
    return datetime.fromtimestamp(time.time(), UTC)


class ManualClock:
    """A clock that moves only when told to: tests move time instead of waiting for it.

    Starts at ``start`` (aware; default: the system's time now) and stays
    there until ``advance``. Thread-safe.
    """

    def __init__(self, start: datetime | None = None) -> None:
        if start is not None and start.utcoffset() is None:
            raise InvalidArgument("ManualClock start must be a timezone-aware datetime")
        self._now = (start or system_clock()).astimezone(UTC)
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, by: Duration) -> datetime:
        """Move the clock forward by ``by`` (a ``timedelta`` or seconds, not negative);
        the new time."""
        seconds = to_seconds(by, "ManualClock.advance")
        if seconds < 0:
            raise InvalidArgument(f"ManualClock.advance cannot go back in time ({seconds} s)")
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now


class HiddenColumns(NamedTuple):
    """The columns of a stored job that ``JobRow`` does not carry (for tests)."""

    leased_by: str | None
    """The holder named by the last claim (kept after the lease ends, as in PostgreSQL)."""
    attempted_at: datetime | None
    """When the last claim took the job."""
    result: str | None
    """The result a completion stored, as JSON text, or ``None``."""


@dataclass(slots=True)
class _Job:
    """One stored job: ``drover_jobs``'s columns the kernel reads or writes."""

    id: int
    kind: str
    queue: str
    args_json: str
    state: JobState
    attempt: int
    max_attempts: int
    errors: tuple[str, ...]
    """Each entry as JSON text: a row decodes its own copy, as a read from the table does."""
    scheduled_at: datetime
    leased_until: datetime | None
    created_at: datetime
    finalized_at: datetime | None
    unique_key: str | None
    priority: int
    meta_json: str | None
    tags: tuple[str, ...]
    leased_by: str | None = None
    attempted_at: datetime | None = None
    result: str | None = None

    def row(self) -> JobRow:
        """A snapshot of this job, decoded afresh (nothing the caller changes reaches the store)."""
        meta = NO_META if self.meta_json is None else json.loads(self.meta_json) or NO_META
        return JobRow(
            self.id,
            self.kind,
            self.queue,
            json.loads(self.args_json),
            self.state,
            self.attempt,
            self.max_attempts,
            tuple(json.loads(e) for e in self.errors),
            self.scheduled_at,
            self.leased_until,
            self.created_at,
            self.finalized_at,
            self.unique_key,
            self.priority,
            None,
            None,
            meta,
            self.tags,
        )


def _prepare(outcomes: Sequence[Outcome]) -> list[tuple[str | None, datetime | None]]:
    """Each outcome's error as JSON text and its time in UTC: everything that can fail
    is checked before anything is written."""
    prepared = []
    for o in outcomes:
        if o.result is not None:
            _check_json(o.result, "the job's result")
        when = None if o.scheduled_at is None else _aware(o.scheduled_at, "Outcome.scheduled_at")
        prepared.append((None if o.error is None else json.dumps(o.error), when))
    return prepared


def _aware(value: datetime, what: str) -> datetime:
    if value.utcoffset() is None:
        raise InvalidArgument(f"{what} must be a timezone-aware datetime, not {value!r}")
    return value.astimezone(UTC)


def _check_json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"{what} is not valid JSON text: {exc}") from None


class MemoryTransaction:
    """A caller's transaction on one ``MemoryStore``: what ``complete_in_tx`` joins.

    The in-memory store cannot join a psycopg transaction, so it accepts
    this instead (``MemoryStore.transaction()``). A completion made in it
    is staged: nobody else sees it until ``commit``; ``rollback`` drops it.
    Until either, the job's row is locked by this transaction (see
    ``MemoryStore``). ``now()`` inside it is the time it began, as
    PostgreSQL's ``now()`` is a transaction's start: a completion's
    ``finalized_at`` is that time.

    As a context manager it commits when the block ends normally and rolls
    back when it raises. Ending it twice is harmless. Thread-safe; the
    caller owns it, as it owns its own connection.
    """

    def __init__(self, store: MemoryStore, started: datetime) -> None:
        self._store = store
        self.started = started
        """The store's clock when the transaction began."""
        self._staged: dict[int, _Job] = {}
        self._open = True

    @property
    def open(self) -> bool:
        """True until ``commit`` or ``rollback``."""
        return self._open

    def commit(self) -> None:
        """Make the transaction's completions visible and release its row locks."""
        self._store._end(self, commit=True)

    def rollback(self) -> None:
        """Drop the transaction's completions and release its row locks."""
        self._store._end(self, commit=False)

    def __enter__(self) -> MemoryTransaction:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._store._end(self, commit=exc_type is None)


class MemoryClaimSession:
    """The fetcher's session on a ``MemoryStore``: holds nothing, so ``release`` does nothing."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store

    def claim(
        self,
        queue: str,
        limit: int,
        lease_seconds: float,
        holder: str,
        *,
        completions: Sequence[Outcome] = (),
        landed: Callable[[list[Recorded]], None] | None = None,
    ) -> Claimed:
        """Write ``completions`` (results to ``landed``), then claim up to ``limit`` due
        jobs of ``queue`` for ``holder`` (the store's rules)."""
        if completions:
            if landed is None:
                raise ValueError("a claim carrying completions needs landed")
            landed(self._store._record(completions))
        return self._store._claim(queue, limit, lease_seconds, holder)

    def release(self) -> None:
        """Nothing to give up."""


class MemoryOutcomeSession:
    """The completer's session on a ``MemoryStore``: holds nothing, so ``release`` does nothing."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store

    def record(self, outcomes: Sequence[Outcome]) -> list[Recorded]:
        """Write ``outcomes``, each fenced on its claim; one result each, in input order."""
        return self._store._record(outcomes)

    def release(self) -> None:
        """Nothing to give up."""


class MemoryStore:
    """The kernel's operations on jobs held in memory (see the module docstring).

    Thread-safe: one lock (re-entrant) guards every job, and each operation
    is atomic under it, as each PostgreSQL operation is one transaction.
    ``rescue`` calls ``decide`` under that lock, as PostgreSQL's rescue
    calls it inside its transaction with the rows locked: ``decide`` must
    not wait for another thread that uses the store.

    Row locks: a job completed in an open ``MemoryTransaction`` is locked
    until that transaction ends. A claim or a rescue skips it, a renewal
    does not renew it (reporting it still current), and ``record``,
    ``hand_back`` or another transaction's ``complete_in_tx`` of that job
    blocks until the transaction ends, as PostgreSQL's row lock does (a
    transaction left open forever blocks them forever).

    Beyond the protocol, for tests and embedding: ``pause_queue`` and
    ``resume_queue`` (a claim skips a paused queue), ``transaction`` (what
    ``complete_in_tx`` joins), ``hidden`` (the columns ``JobRow`` does not
    carry) and ``clock`` (the store's clock).
    """

    def __init__(self, clock: Clock = system_clock) -> None:
        self._clock = clock
        self._cond = threading.Condition(threading.RLock())
        self._jobs: dict[int, _Job] = {}
        self._ids = itertools.count(1)
        # The waiting jobs of each queue, in two heaps: not yet due by (scheduled_at,
        # id), and due in claim order. A claim moves what came due from the first to
        # the second, then pops the second: each job is sorted once, not per claim.
        self._later: dict[str, list[tuple[datetime, int]]] = {}
        self._due: dict[str, list[tuple[int, datetime, int]]] = {}
        # Ids of running jobs: a rescue reads only these.
        self._running: set[int] = set()
        # (queue, kind, unique_key) -> id of the job that last took the key.
        self._keys: dict[tuple[str, str, str], int] = {}
        self._paused: dict[str, QueueState] = {}
        self._locks: dict[int, MemoryTransaction] = {}
        self._lock_waiters = 0

    @property
    def clock(self) -> Clock:
        """The store's clock (leases and dueness are on it)."""
        return self._clock

    def _now(self) -> datetime:
        return _aware(self._clock(), "the store's clock")

    # --- the protocol ------------------------------------------------------------------------

    def claim_session(self) -> MemoryClaimSession:
        """A new session for one fetcher."""
        return MemoryClaimSession(self)

    def outcome_session(self) -> MemoryOutcomeSession:
        """A new session for one completer."""
        return MemoryOutcomeSession(self)

    def extend_leases(
        self, held: Sequence[tuple[int, int]], lease_seconds: float, *, deadline: float
    ) -> tuple[float, list[Renewal]]:
        """Renew the ``(id, attempt)`` claims still current; ``(time.monotonic() when sent,
        one renewal per claim)``. ``deadline`` is accepted and unused: nothing here waits."""
        sent = time.monotonic()
        if not held:
            return sent, []
        with self._cond:
            until = self._now() + timedelta(seconds=lease_seconds)
            renewed: dict[int, datetime] = {}
            for job_id, attempt in held:
                job = self._jobs.get(job_id)
                if (
                    job is not None
                    and job.state is _RUNNING
                    and job.attempt == attempt
                    and job_id not in self._locks
                ):
                    job.leased_until = until
                    renewed[job_id] = until
            renewals = []
            for job_id, attempt in held:
                job = self._jobs.get(job_id)
                current = job is not None and job.state is _RUNNING and job.attempt == attempt
                renewals.append(Renewal(job_id, renewed.get(job_id), current))
            return sent, renewals

    def rescue(
        self, limit: int, lease_seconds: float, decide: Callable[[JobRow], Outcome], *, by: str
    ) -> tuple[int, list[Recorded]]:
        """Re-lease up to ``limit`` expired claims, oldest expiry first, and record
        ``decide(row)`` for each, fenced; ``(rows found, the writes' results)``.

        ``by`` is accepted and unused (no duplicate ledger here). If ``decide``
        raises, nothing has changed.
        """
        with self._cond:
            now = self._now()
            expired = sorted(
                (
                    j
                    for j in (self._jobs[i] for i in self._running)
                    if j.leased_until is not None
                    and j.leased_until <= now
                    and j.id not in self._locks
                ),
                key=lambda j: (j.leased_until, j.id),
            )[: max(limit, 0)]
            if not expired:
                return 0, []
            until = now + timedelta(seconds=lease_seconds)
            rows = [replace(j, leased_until=until).row() for j in expired]
            outcomes = [decide(row) for row in rows]
            prepared = _prepare(outcomes)
            for job in expired:
                job.leased_until = until
            # The rows are the rescue's own (re-leased, unlocked), so nothing to wait for;
            # an outcome ``decide`` made for another job is fenced like any other.
            self._wait_unlocked(o.id for o in outcomes)
            return len(rows), self._apply(outcomes, prepared, now, self._states(outcomes))

    def hand_back(self, outcomes: Sequence[Outcome], *, worker: str) -> list[Recorded]:
        """Record shutdown's outcomes, each fenced; their results. ``worker`` is unused
        (no duplicate ledger here)."""
        return self._record(outcomes)

    def complete_in_tx(self, conn: object, job_id: int, attempt: int, result: str | None) -> object:
        """Complete the claim in ``conn``, an open ``MemoryTransaction`` of this store, fenced;
        raise ``drover.LeaseLost`` when the claim is no longer current. Returns ``conn``
        (the handle ``transaction_open`` takes).

        The completion is staged in the transaction and the row locked until
        it ends (see the class docstring). Anything but an open transaction
        of this store is refused (``UnsupportedConnection``,
        ``NotInTransaction``), changing nothing.
        """
        tx = self._transaction_of(conn)
        if result is not None:
            _check_json(result, "the job's result")
        with self._cond:
            while (holder := self._locks.get(job_id)) is not None and holder is not tx:
                self._wait_for_a_transaction()
            if not tx.open:
                raise NotInTransaction("complete_tx was given a transaction that has ended")
            job = tx._staged.get(job_id) or self._jobs.get(job_id)
            if job is None:
                raise LeaseLost(job_id, attempt, None, None)
            if job.state is not _RUNNING or job.attempt != attempt:
                raise LeaseLost(job_id, attempt, job.state.value, job.attempt)
            tx._staged[job_id] = replace(
                job,
                state=JobState.COMPLETED,
                leased_until=None,
                finalized_at=tx.started,
                result=result,
            )
            self._locks[job_id] = tx
        return tx

    def transaction_open(self, conn: object) -> bool:
        """True while ``conn`` is a ``MemoryTransaction`` that has not ended."""
        return isinstance(conn, MemoryTransaction) and conn.open

    def insert(self, params: JobInsertParams) -> JobRow:
        """Insert one job with the defaults the database gives, visible at once.

        Due now (``available``) unless ``scheduled_at`` is later than the
        store's clock (``scheduled``); a time in the past means now. Raises
        ``drover.DuplicateJob`` when another active job of the queue and kind
        holds ``unique_key``, and ``drover.InvalidArgument`` for args or
        metadata that are not JSON, changing nothing.
        """
        _check_json(params.args_json, "the job's args")
        if params.meta is not None and not isinstance(
            _check_json(params.meta, "the job's metadata"), dict
        ):
            raise InvalidArgument("the job's metadata must be a JSON object")
        when = None if params.scheduled_at is None else _aware(params.scheduled_at, "scheduled_at")
        with self._cond:
            now = self._now()
            key = None
            if params.unique_key is not None:
                key = (params.queue, params.kind, params.unique_key)
                holder = self._jobs.get(self._keys.get(key, 0))
                if holder is not None and holder.state in _ACTIVE:
                    raise DuplicateJob(
                        f"a job of kind {params.kind!r} with unique key {params.unique_key!r} "
                        f"is already waiting or running on queue {params.queue!r}",
                        queue=params.queue,
                        kind=params.kind,
                        unique_key=params.unique_key,
                    )
            due = now if when is None or when < now else when
            job = _Job(
                id=next(self._ids),
                kind=params.kind,
                queue=params.queue,
                args_json=params.args_json,
                state=JobState.SCHEDULED if due > now else JobState.AVAILABLE,
                attempt=0,
                max_attempts=params.max_attempts,
                errors=(),
                scheduled_at=due,
                leased_until=None,
                created_at=now,
                finalized_at=None,
                unique_key=params.unique_key,
                priority=params.priority,
                meta_json=params.meta,
                tags=tuple(params.tags),
            )
            self._jobs[job.id] = job
            self._enqueue(job)
            if key is not None:
                self._keys[key] = job.id
            return job.row()

    def get(self, job_id: int) -> JobRow | None:
        """The job as committed now, or ``None``."""
        with self._cond:
            job = self._jobs.get(job_id)
            return None if job is None else job.row()

    # --- beyond the protocol -----------------------------------------------------------------

    def transaction(self) -> MemoryTransaction:
        """Begin a transaction for ``complete_in_tx`` (``with store.transaction() as tx:``)."""
        return MemoryTransaction(self, self._now())

    def pause_queue(self, name: str) -> QueueState:
        """Pause ``name``: claims take nothing from it. Idempotent (the first pause time stays)."""
        with self._cond:
            now = self._now()
            found = self._paused.get(name)
            state = QueueState(name, now if found is None else found.paused_at, now)
            self._paused[name] = state
            return state

    def resume_queue(self, name: str) -> bool:
        """Resume ``name``; False when it was not paused."""
        with self._cond:
            return self._paused.pop(name, None) is not None

    @property
    def lock_waiters(self) -> int:
        """Calls waiting now for a transaction's row lock (for tests)."""
        with self._cond:
            return self._lock_waiters

    def hidden(self, job_id: int) -> HiddenColumns | None:
        """The committed job's columns that ``JobRow`` does not carry, or ``None``."""
        with self._cond:
            job = self._jobs.get(job_id)
            if job is None:
                return None
            return HiddenColumns(job.leased_by, job.attempted_at, job.result)

    # --- the work ----------------------------------------------------------------------------

    def _claim(self, queue: str, limit: int, lease_seconds: float, holder: str) -> Claimed:
        if isinstance(limit, bool) or not 0 < limit <= _MAX_CLAIM:
            raise InvalidArgument(f"claim limit must be in 1..{_MAX_CLAIM}, not {limit}")
        sent = time.monotonic()
        with self._cond:
            now = self._now()
            if queue in self._paused:
                return Claimed([], sent)
            picked = self._take_due(queue, limit, now)
            until = now + timedelta(seconds=lease_seconds)
            for job in picked:
                self._running.add(job.id)
                job.state = _RUNNING
                job.attempt += 1
                job.leased_until = until
                job.leased_by = holder
                job.attempted_at = now
            picked.sort(key=lambda j: j.id)
            return Claimed([job.row() for job in picked], sent)

    def _enqueue(self, job: _Job) -> None:
        """File a job that has just become waiting (inserted, or back from a claim)."""
        heapq.heappush(self._later.setdefault(job.queue, []), (job.scheduled_at, job.id))

    def _take_due(self, queue: str, limit: int, now: datetime) -> list[_Job]:
        """Pop up to ``limit`` due jobs of ``queue`` in claim order."""
        later = self._later.get(queue)
        due = self._due.setdefault(queue, [])
        jobs = self._jobs
        while later and later[0][0] <= now:
            _, job_id = heapq.heappop(later)
            job = jobs[job_id]
            heapq.heappush(due, (-job.priority, job.scheduled_at, job_id))
        picked: list[_Job] = []
        while due and len(picked) < limit:
            _, at, job_id = heapq.heappop(due)
            job = jobs[job_id]
            if at > now:  # a clock that went back: not due after all
                self._enqueue(job)
                continue
            picked.append(job)
        return picked

    def _record(self, outcomes: Sequence[Outcome]) -> list[Recorded]:
        if not outcomes:
            return []
        with self._cond:
            # As one PostgreSQL statement: its clock and its snapshot are taken
            # when it starts, before it waits for any row lock.
            now = self._now()
            snapshot = self._states(outcomes)
            prepared = _prepare(outcomes)
            self._wait_unlocked(o.id for o in outcomes)
            return self._apply(outcomes, prepared, now, snapshot)

    def _wait_unlocked(self, ids: Iterable[int]) -> None:
        wanted = set(ids)
        while not wanted.isdisjoint(self._locks):
            self._wait_for_a_transaction()

    def _wait_for_a_transaction(self) -> None:
        self._lock_waiters += 1
        try:
            self._cond.wait()
        finally:
            self._lock_waiters -= 1

    def _states(self, outcomes: Sequence[Outcome]) -> dict[int, tuple[JobState, int]]:
        return {o.id: (j.state, j.attempt) for o in outcomes if (j := self._jobs.get(o.id))}

    def _apply(
        self,
        outcomes: Sequence[Outcome],
        prepared: list[tuple[str | None, datetime | None]],
        now: datetime,
        snapshot: dict[int, tuple[JobState, int]],
    ) -> list[Recorded]:
        """Write ``outcomes`` as one statement. The caller holds the lock.

        Every fence is judged on the rows as they are now, before any of the
        batch is written (so of a stale and a current claim of one job only
        the current one applies, whatever their order).
        """
        now_seen = self._states(outcomes)
        applied = []
        written: set[int] = set()
        for o, (error, when) in zip(outcomes, prepared, strict=True):
            seen = now_seen.get(o.id)
            fits = seen is not None and seen[0] is _RUNNING and seen[1] == o.attempt
            applied.append(fits)
            if fits and o.id not in written:
                written.add(o.id)
                self._write(self._jobs[o.id], o, error, when, now)
        # Why a write was refused, as PostgreSQL reports it. The batch of plain
        # completions reads the rows afterwards, in a second statement. The
        # general statement reads them in its snapshot, taken when it started
        # (before any wait for a row lock), and a claim that snapshot still saw
        # current (the write waited for another transaction) is written again
        # by the features' statement, in a new snapshot: it reports the row as
        # it is after the wait.
        after = self._states(outcomes)
        plain = all(map(is_plain_completion, outcomes))
        recorded = []
        for o, fits in zip(outcomes, applied, strict=True):
            if fits:
                recorded.append(Recorded(o, WriteResult.APPLIED, None, None))
                continue
            seen = snapshot.get(o.id)
            waited = seen is not None and seen[0] is _RUNNING and seen[1] == o.attempt
            state, attempt = (after if plain or waited else snapshot).get(o.id, (None, None))
            recorded.append(
                Recorded(o, refusal(state), None if state is None else state.value, attempt)
            )
        return recorded

    def _write(
        self, job: _Job, o: Outcome, error: str | None, when: datetime | None, now: datetime
    ) -> None:
        # The column effects of job_record_outcomes (without cancel requests).
        job.state = o.state
        if o.state is not _RUNNING:
            self._running.discard(job.id)
        if o.refund_attempt:
            job.attempt = max(job.attempt - 1, 0)
        if o.state in _WAITING:
            job.scheduled_at = now if when is None else when
            self._enqueue(job)
        if error is not None:
            job.errors = (*job.errors, error)
        if o.state is JobState.COMPLETED:
            job.result = o.result
        job.leased_until = None
        job.finalized_at = now if o.state in _TERMINAL else None

    def _transaction_of(self, conn: object) -> MemoryTransaction:
        if not isinstance(conn, MemoryTransaction):
            raise UnsupportedConnection(
                "complete_tx on an in-memory store needs a MemoryTransaction from "
                f"MemoryStore.transaction(); got {type(conn).__module__}.{type(conn).__qualname__}"
            )
        if conn._store is not self:
            raise UnsupportedConnection(
                "complete_tx was given a MemoryTransaction of another in-memory store"
            )
        if not conn.open:
            raise NotInTransaction("complete_tx was given a transaction that has ended")
        return conn

    def _end(self, tx: MemoryTransaction, *, commit: bool) -> None:
        with self._cond:
            if not tx._open:
                return
            tx._open = False
            for job_id, staged in tx._staged.items():
                if commit:
                    # Nobody wrote the row while it was locked: the staged copy is the row.
                    self._jobs[job_id] = staged
                    self._running.discard(job_id)
                del self._locks[job_id]
            tx._staged.clear()
            self._cond.notify_all()
