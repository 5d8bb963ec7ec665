"""PostgreSQL's ``KernelStore``: the kernel's statements (``kernel.sql``) and their runners.

The kernel (``drover._kernel``) sees only the ``KernelStore`` protocol
(``drover._kernel.store``); this is its PostgreSQL implementation, on the
pool of a ``drover._db.store.Store`` (``Store.kernel``). Each operation
borrows one connection and returns it, except the two sessions, which keep
theirs between a busy loop's rounds (``drover._db.pool.HeldConnection``).

The statements here know nothing of any feature (ADR 0045). Features come
in through the ``Doors`` the store is made with (``drover._db.doors``):

- a claim of a queue with a gate (``drover_gates``) is refused by the
  kernel's claim and made by the gate's claim, straight away for
  ``_RECHECK_GATES`` seconds after, then by the kernel's claim again to
  notice the gate gone;
- an outcome is written by the kernel's completion unless the job is
  watched (``drover_watched``) or the outcome carries a result: those go
  through ``Doors.watched``, so with no feature in use a claim and a
  completion each run one kernel statement, and nothing else.

Every runner is one round trip in the usual case, on a connection the
caller holds, and commits with it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from operator import attrgetter
from typing import Any

from psycopg.rows import tuple_row
from psycopg_pool import ConnectionPool

from drover._db import Connection, insert_one
from drover._db.admin import job_get
from drover._db.caller import resolve_connection, transaction_open
from drover._db.deadline import socket_deadline
from drover._db.doors import (
    Doors,
    GateClaim,
    WatchedWrite,
    int_array,
    is_plain_completion,
    refusal,
)
from drover._db.errors import naming_role, translate
from drover._db.floors import Backdated, ClaimCursors, level_params
from drover._db.namespace import DEFAULT, Namespace
from drover._db.pool import HeldConnection, borrow
from drover._db.queries import query
from drover._db.rows import row_from_db
from drover._db.sweeps import Sweep, SweepFloors
from drover._kernel.store import Claimed
from drover._records import JobInsertParams, Outcome, Recorded, Renewal, WriteResult
from drover.errors import DatabaseError, LeaseLost
from drover.job import JobRow, JobState

__all__ = [
    "GatesSeen",
    "PgKernelStore",
    "claim",
    "claim_expired",
    "complete_claim",
    "extend_leases",
    "hand_back",
    "record_outcomes",
    "rescue",
]

_RECHECK_GATES = 10.0
"""Seconds a queue's claims go straight to its gate's claim after finding the gate."""


def claim(
    conn: Connection,
    queue: str,
    limit: int,
    lease_seconds: float,
    holder: str | None = None,
    *,
    gates: Mapping[str, GateClaim],
    via: str | None = None,
    ns: Namespace = DEFAULT,
    completions: Sequence[Outcome] = (),
    landed: Callable[[list[Recorded]], None] | None = None,
    doors: Doors | None = None,
    levels: Sequence[tuple[int, datetime]] | None = None,
) -> tuple[list[JobRow], frozenset[int], str | None]:
    """Claim up to ``limit`` due jobs of ``queue`` for ``holder``, sorted by id.

    ``levels`` (ADR 0059): the priority levels to read, each with the due
    time its read starts at (``ClaimCursors.levels``); ``None`` walks every
    level from its oldest job. A gate's claim ignores it.

    Returns the rows, the ids whose outcome frees capacity shared with other
    clients (a gate's), and the gate whose claim ran (``None``: the
    kernel's). ``via`` names a gate the caller found on an earlier claim: its
    claim runs straight away (as correct without the gate, only slower).
    Otherwise the kernel's claim runs, and when it finds the queue gated
    (a row of NULLs) the gate is looked up and its claim runs: two or three
    round trips, the first time.

    ``completions`` (plain completions without a result) are written first,
    fenced as ``record_outcomes`` writes them: in the kernel's claim
    statement itself (ADR 0058), or, when the claim goes to a gate, by
    ``record_outcomes`` just before it. ``landed`` gets the final result of
    each one settled, as soon as it is, before the claim returns or raises:
    the claim statement settles those it applied and leaves out those it
    refused (a stale claim, or a job a feature watches), which the caller
    writes with ``record_outcomes`` like any other outcome, so no statement
    but the claim runs in the usual case and no read follows a refusal here.
    When this raises before calling ``landed``, none of them was written.
    """
    if not 0 < limit <= 2**31 - 1:
        raise ValueError(f"claim limit must be in 1..2147483647, not {limit}")
    if completions and (landed is None or doors is None):
        raise ValueError("a claim carrying completions needs landed and doors")
    settle = landed if landed is not None else _nothing
    wakes: frozenset[int] = frozenset()
    with translate(f"claim jobs from queue {queue!r}"):
        if via is None:
            params = {
                "queue": queue,
                "limit": limit,
                "lease_seconds": lease_seconds,
                "holder": holder,
                "done_ids": int_array([o.id for o in completions]),
                "done_attempts": int_array([o.attempt for o in completions]),
                **level_params(levels),
            }
            with conn.cursor(row_factory=tuple_row, binary=True) as cur:
                cur.execute(query("job_claim", ns), params)
                found = cur.fetchall()
            if completions:
                refused = {(r[0], r[5]) for r in found if r[1] is None and r[0] is not None}
                settle(
                    [
                        Recorded(o, _APPLIED, None, None)
                        for o in completions
                        if (o.id, o.attempt) not in refused
                    ]
                )
                if refused:
                    found = [r for r in found if r[1] is not None or r[0] is None]
            if found and found[-1][0] is None:
                with conn.cursor(row_factory=tuple_row) as cur:
                    cur.execute(query("job_gates", ns), {"queue": queue})
                    via = _gate_of(queue, [v for (v,) in cur.fetchall()], gates)
            if via is None:
                # Not gated, or the gate was removed since the claim looked.
                rows = [row_from_db(r) for r in found if r[0] is not None]
                rows.sort(key=lambda r: r.id)
                return rows, wakes, None
        elif completions:
            assert doors is not None
            settle(record_outcomes(conn, completions, doors=doors, ns=ns))
        rows, wakes = gates[via](conn, queue, limit, lease_seconds, holder, ns=ns)
    rows.sort(key=lambda r: r.id)
    return rows, wakes, via


def _nothing(results: list[Recorded]) -> None:
    """``landed`` of a claim that carries no completions."""


def _gate_of(queue: str, vias: list[str], gates: Mapping[str, GateClaim]) -> str | None:
    if not vias:
        return None
    known = [v for v in vias if v in gates]
    if len(known) != len(vias) or len(known) > 1:
        raise DatabaseError(
            f"claim jobs from queue {queue!r}: the queue is gated by {', '.join(vias)}, "
            f"and this client claims through {', '.join(sorted(gates)) or 'no gate'} "
            "(a newer drover release may have added a gate: upgrade this client)"
        )
    return known[0]


def record_outcomes(
    conn: Connection,
    outcomes: Sequence[Outcome],
    *,
    doors: Doors,
    ns: Namespace = DEFAULT,
) -> list[Recorded]:
    """Write ``outcomes``, each fenced on its claim; one result per outcome, in input order.

    The kernel's statement writes every outcome without a result: a batch of
    plain completions takes ``job_complete`` (two integer arrays in, the
    refused claims out), any other ``job_record``. The claims it refused
    whose row still runs with their attempt (a feature watches the job), and
    every outcome with a result, go through ``doors.watched`` in a second
    statement, whose answers are final. Usual batch: one round trip, no row.
    """
    if not outcomes:
        return []
    if any(map(_RESULT, outcomes)):
        return _with_results(conn, outcomes, doors=doors, ns=ns)
    write = _complete if all(map(is_plain_completion, outcomes)) else _record
    recorded, watched = write(conn, outcomes, ns=ns)
    if watched:
        again = doors.watched(conn, [outcomes[i] for i in watched], ns=ns)
        for i, answer in zip(watched, again, strict=True):
            recorded[i] = answer
    return recorded


# An outcome's result (None for none; a result is JSON text, never empty).
_RESULT = attrgetter("result")
_APPLIED = WriteResult.APPLIED


def _with_results(
    conn: Connection, outcomes: Sequence[Outcome], *, doors: Doors, ns: Namespace
) -> list[Recorded]:
    """A batch where some handlers returned a value: those go to the watch, the rest as usual."""
    done: list[Recorded | None] = [None] * len(outcomes)
    kernel = [i for i, o in enumerate(outcomes) if o.result is None]
    watched = [i for i, o in enumerate(outcomes) if o.result is not None]
    if kernel:
        mine = [outcomes[i] for i in kernel]
        write = _complete if all(map(is_plain_completion, mine)) else _record
        written, refused = write(conn, mine, ns=ns)
        watched.extend(kernel[i] for i in refused)
        for i, recorded in zip(kernel, written, strict=True):
            done[i] = recorded
    watched.sort()
    again = doors.watched(conn, [outcomes[i] for i in watched], ns=ns)
    for i, recorded in zip(watched, again, strict=True):
        done[i] = recorded
    return [r for r in done if r is not None]


def _complete(
    conn: Connection, outcomes: Sequence[Outcome], *, ns: Namespace
) -> tuple[list[Recorded], list[int]]:
    """The plain completions' statement: a result per outcome, and the indexes of the
    claims to send to the watch (their place holds a refusal until then)."""
    with (
        translate(f"record {len(outcomes)} job outcomes"),
        conn.cursor(row_factory=tuple_row) as cur,
    ):
        cur.execute(
            query("job_complete", ns),
            {
                "ids": int_array([o.id for o in outcomes]),
                "attempts": int_array([o.attempt for o in outcomes]),
            },
        )
        refused = {(id_, attempt) for id_, attempt in cur.fetchall()}
        return _refusals(conn, outcomes, refused, ns=ns)


def _refusals(
    conn: Connection,
    outcomes: Sequence[Outcome],
    refused: set[tuple[int, int]],
    *,
    ns: Namespace,
) -> tuple[list[Recorded], list[int]]:
    """The results of plain completions of which the claims ``refused`` were refused, and
    the indexes of those to send to the watch (their place holds a refusal until then)."""
    if not refused:  # the usual batch: every claim applied
        return [Recorded(o, _APPLIED, None, None) for o in outcomes], []
    with conn.cursor(row_factory=tuple_row) as cur:
        # A new snapshot: the row as it is now, whatever the write waited for.
        cur.execute(query("job_current_states", ns), ([i for i, _ in refused],))
        current = {id_: (state, attempt) for id_, state, attempt in cur.fetchall()}
    recorded: list[Recorded] = []
    watched: list[int] = []
    for i, o in enumerate(outcomes):
        if (o.id, o.attempt) not in refused:
            recorded.append(Recorded(o, _APPLIED, None, None))
            continue
        state, attempt = current.get(o.id, (None, None))
        if state == JobState.RUNNING.value and attempt == o.attempt:
            watched.append(i)  # still this claim's: a feature watches the job
        recorded.append(Recorded(o, refusal(state), state, attempt))
    return recorded, watched


def _record(
    conn: Connection, outcomes: Sequence[Outcome], *, ns: Namespace
) -> tuple[list[Recorded], list[int]]:
    """The general outcomes' statement: a result per outcome, and the indexes of the claims
    to send to the watch (their place holds a refusal until then)."""
    params = {
        "ids": [o.id for o in outcomes],
        "attempts": [o.attempt for o in outcomes],
        "states": [o.state.value for o in outcomes],
        "scheduled_at": [o.scheduled_at for o in outcomes],
        "errors": [None if o.error is None else json.dumps(o.error) for o in outcomes],
        "refund_attempt": [o.refund_attempt for o in outcomes],
    }
    with (
        translate(f"record {len(outcomes)} job outcomes"),
        conn.cursor(row_factory=tuple_row) as cur,
    ):
        cur.execute(query("job_record", ns), params)
        rows = cur.fetchall()
    by_claim = {(id_, attempt): (applied, state, now) for id_, attempt, applied, state, now in rows}
    recorded: list[Recorded] = []
    watched: list[int] = []
    for i, o in enumerate(outcomes):
        applied, state, now = by_claim[(o.id, o.attempt)]
        if applied:
            recorded.append(Recorded(o, _APPLIED, None, None))
            continue
        if state == JobState.RUNNING.value and now == o.attempt:
            # Running with this claim's attempt as the statement saw it: a feature watches the job,
            # or the row changed under the write. The watch's statement decides, in a new snapshot.
            watched.append(i)
        recorded.append(Recorded(o, refusal(state), state, now))
    return recorded, watched


def extend_leases(
    conn: Connection,
    held: Sequence[tuple[int, int]],
    lease_seconds: float,
    *,
    ns: Namespace = DEFAULT,
) -> list[Renewal]:
    """Renew the leases of the ``(id, attempt)`` claims still current; one result per claim.

    ``Renewal.cancel_request`` is always ``None``: cancel requests are the
    cancels feature's (``drover._db.cancels.job_cancel_requests``).
    """
    if not held:
        return []
    with translate(f"extend {len(held)} job leases"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(
            query("job_extend_leases", ns),
            {
                "ids": [h[0] for h in held],
                "attempts": [h[1] for h in held],
                "lease_seconds": lease_seconds,
            },
        )
        return [Renewal(id_, until, bool(current)) for id_, until, current in cur.fetchall()]


def claim_expired(
    conn: Connection, limit: int, lease_seconds: float, *, ns: Namespace = DEFAULT, sweep: Sweep
) -> list[JobRow]:
    """Re-lease up to ``limit`` running jobs whose lease expired past ``sweep.floor``
    (``None``: any; ADR 0059), attempt unchanged; ``sweep`` is told what was found."""
    params = {"limit": limit, "lease_seconds": lease_seconds, "floor": sweep.floor}
    with translate("claim expired jobs"), conn.cursor(row_factory=tuple_row) as cur:
        found = cur.execute(query("job_claim_expired", ns), params).fetchall()
    rows = [row_from_db(r[1:]) for r in found if r[1] is not None]
    sweep.ran(found[0][0], len(rows), limit)
    return rows


def rescue(
    conn: Connection,
    limit: int,
    lease_seconds: float,
    decide: Callable[[JobRow], Outcome],
    sweep: Sweep,
    *,
    by: str,
    doors: Doors,
    ns: Namespace = DEFAULT,
) -> tuple[int, list[Recorded]]:
    """The rescue on ``conn``, in the caller's transaction: claim the expired (``sweep``),
    record ``decide(row)`` for each, then the doors' rescue hooks; ``(rows found, results)``."""
    rows = claim_expired(conn, limit, lease_seconds, ns=ns, sweep=sweep)
    if not rows:
        return 0, []
    results = record_outcomes(conn, [decide(row) for row in rows], doors=doors, ns=ns)
    for hook in doors.on_rescue:
        hook(conn, rows, results, by=by, ns=ns)
    return len(rows), results


def hand_back(
    conn: Connection,
    outcomes: Sequence[Outcome],
    *,
    worker: str,
    doors: Doors,
    ns: Namespace = DEFAULT,
) -> list[Recorded]:
    """Shutdown's hand-back outcomes on ``conn``, in the caller's transaction, then the
    doors' hand-back hooks; the writes' results."""
    results = record_outcomes(conn, outcomes, doors=doors, ns=ns)
    for hook in doors.on_hand_back:
        hook(conn, results, worker=worker, ns=ns)
    return results


class GatesSeen:
    """Which queues a claimer found gated, and when: its claims go straight to the
    gate's claim for ``_RECHECK_GATES`` seconds, saving a round trip, then try the
    kernel's claim again to notice the gate removed. One thread uses it."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[str, float]] = {}

    def via(self, queue: str, now: float) -> str | None:
        """The gate to claim ``queue`` through at ``now`` (``time.monotonic()``), if any."""
        seen = self._seen.get(queue)
        return seen[0] if seen is not None and now - seen[1] < _RECHECK_GATES else None

    def saw(self, queue: str, via: str | None, through: str | None, sent: float) -> None:
        """Note a claim of ``queue`` sent at ``sent`` with ``via`` that ran ``through``."""
        if through is None:
            self._seen.pop(queue, None)
        elif via is None:
            self._seen[queue] = (through, sent)


class _ClaimSession:
    """The fetcher's held session (``ClaimSession``). One thread uses it."""

    def __init__(
        self, pool: ConnectionPool[Any], doors: Doors, ns: Namespace, backdated: Backdated
    ) -> None:
        self._held = HeldConnection(pool, "fetch jobs")
        self._doors = doors
        self._ns = ns
        self._gates = GatesSeen()
        self.cursors = ClaimCursors(backdated)

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
        with self._held as conn, naming_role(conn):
            sent = time.monotonic()
            via = self._gates.via(queue, sent)
            levels = self.cursors.levels(queue, sent)
            while True:
                rows, wakes, through = claim(
                    conn,
                    queue,
                    limit,
                    lease_seconds,
                    holder,
                    gates=self._doors.gates,
                    via=via,
                    ns=self._ns,
                    completions=completions,
                    landed=landed,
                    doors=self._doors,
                    levels=levels,
                )
                self._gates.saw(queue, via, through, sent)
                if through is not None or not self.cursors.claimed(
                    queue, rows, levels, sent, time.monotonic()
                ):
                    return Claimed(rows, sent, wakes)
                # Nothing from the floors, and a walk is due: walk now (ADR 0059).
                levels, completions, landed, sent = None, (), None, time.monotonic()

    def release(self) -> None:
        self._held.release()

    @property
    def holding(self) -> bool:
        """True while a connection is kept (for tests)."""
        return self._held.holding


class _OutcomeSession:
    """The completer's held session (``OutcomeSession``). One thread uses it."""

    def __init__(
        self, pool: ConnectionPool[Any], doors: Doors, ns: Namespace, backdated: Backdated
    ) -> None:
        self._held = HeldConnection(pool, "record job outcomes")
        self._doors = doors
        self._ns = ns
        self.shared = backdated

    def record(self, outcomes: Sequence[Outcome]) -> list[Recorded]:
        with self._held as conn, naming_role(conn):
            recorded = record_outcomes(conn, outcomes, doors=self._doors, ns=self._ns)
        self.shared.check(outcomes)
        return recorded

    def release(self) -> None:
        self._held.release()

    @property
    def holding(self) -> bool:
        """True while a connection is kept (for tests)."""
        return self._held.holding


class PgKernelStore:
    """The kernel's operations on one pool, in one schema (``ns``), with the features
    plugged in through ``doors`` (``drover._db.features.FEATURES`` for drover's own).
    Thread-safe: the pool is."""

    def __init__(self, pool: ConnectionPool[Any], ns: Namespace = DEFAULT, *, doors: Doors) -> None:
        self._pool = pool
        self._ns = ns
        self._doors = doors
        self.shared = Backdated()
        """What its claim and outcome sessions share: backdated due times, claim times."""
        self.sweeps = SweepFloors()
        """Where this store's next rescue sweep begins (ADR 0059)."""

    @property
    def ns(self) -> Namespace:
        """The schema of the installation this store works on."""
        return self._ns

    @property
    def doors(self) -> Doors:
        """The features plugged into this store's statements."""
        return self._doors

    def claim_session(self) -> _ClaimSession:
        return _ClaimSession(self._pool, self._doors, self._ns, self.shared)

    def outcome_session(self) -> _OutcomeSession:
        return _OutcomeSession(self._pool, self._doors, self._ns, self.shared)

    def extend_leases(
        self, held: Sequence[tuple[int, int]], lease_seconds: float, *, deadline: float
    ) -> tuple[float, list[Renewal]]:
        with (
            borrow(self._pool, "extend job leases") as conn,
            socket_deadline(conn, deadline),
        ):
            sent = time.monotonic()
            return sent, extend_leases(conn, held, lease_seconds, ns=self._ns)

    def rescue(
        self, limit: int, lease_seconds: float, decide: Callable[[JobRow], Outcome], *, by: str
    ) -> tuple[int, list[Recorded]]:
        # One transaction, so the rescued rows stay locked until the hooks (the duplicate
        # ledger) have written: a fetcher cannot claim one in between and make an entry skip
        # it. The next sweep's floor (ADR 0059) moves only once this one has committed.
        with (
            borrow(self._pool, "rescue expired jobs") as conn,
            self.sweeps.sweep() as s,
            conn.transaction(),
        ):
            return rescue(
                conn, limit, lease_seconds, decide, s, by=by, doors=self._doors, ns=self._ns
            )

    def hand_back(self, outcomes: Sequence[Outcome], *, worker: str) -> list[Recorded]:
        with borrow(self._pool, "return jobs to the queue") as conn, conn.transaction():
            return hand_back(conn, outcomes, worker=worker, doors=self._doors, ns=self._ns)

    def complete_in_tx(self, conn: object, job_id: int, attempt: int, result: str | None) -> object:
        resolved = resolve_connection(
            conn, "complete_tx", "or let the handler return and drover completes the job"
        )
        complete_claim(resolved, job_id, attempt, result, ns=self._ns, watched=self._doors.watched)
        return resolved

    def transaction_open(self, conn: object) -> bool:
        return transaction_open(conn)

    def insert(self, params: JobInsertParams) -> JobRow:
        # The kernel's one insert: jobs.sql's job_insert.
        with borrow(self._pool, "insert job") as conn:
            return insert_one.job_insert(conn, params, notify=False, ns=self._ns)

    def get(self, job_id: int) -> JobRow | None:
        with borrow(self._pool, "get job") as conn:
            return job_get(conn, job_id, ns=self._ns)


def complete_claim(
    conn: Connection,
    job_id: int,
    attempt: int,
    result: str | None = None,
    *,
    ns: Namespace = DEFAULT,
    watched: WatchedWrite,
) -> None:
    """Complete the claim ``(job_id, attempt)`` in ``conn``'s open transaction, or raise LeaseLost.

    ``result`` is the job's result as JSON text (``None``: no result).

    The kernel's completion statement (``job_complete``), fenced on ``(id,
    attempt, state = 'running')`` and on no feature watching the job. A claim
    it refused whose row still runs with its attempt (a feature watches the
    job), and a completion with a result, go through ``watched`` (the
    features' ``job_complete_many``: an operator's cancel request ends it
    cancelled, without error). When the claim is no longer current, a second
    statement reads why (for the message). None of them fails the caller's
    transaction, so the caller decides: LeaseLost is meant to propagate and
    roll it back. The row stays locked until that transaction ends.
    """
    state: str | None = None
    now: int | None = None
    if result is None:
        claim = {"ids": f"{{{job_id}}}", "attempts": f"{{{attempt}}}"}
        with (
            translate(f"complete job {job_id} in the caller's transaction"),
            conn.cursor(row_factory=tuple_row) as cur,
        ):
            cur.execute(query("job_complete", ns), claim)
            if cur.fetchone() is None:
                return  # completed
            cur.execute(query("job_current_states", ns), ([job_id],))
            found = cur.fetchone()
        if found is not None:
            state, now = str(found[1]), int(found[2])
        if state != JobState.RUNNING.value or now != attempt:
            raise LeaseLost(job_id, attempt, state, now)
    (recorded,) = watched(
        conn, [Outcome(job_id, attempt, JobState.COMPLETED, result=result)], ns=ns
    )
    if recorded.result is not WriteResult.APPLIED:
        # Applied covers a cancel at an operator's request (ADR 0030) too.
        raise LeaseLost(job_id, attempt, recorded.current_state, recorded.current_attempt)
