"""PostgreSQL's ``KernelStore``: the kernel's operations on drover's own connections.

The kernel (``drover._kernel``) sees only the ``KernelStore`` protocol
(``drover._kernel.store``); this is its PostgreSQL implementation, on the
pool of a ``drover._db.store.Store`` (``Store.kernel``). Each operation
borrows one connection and returns it, except the two sessions, which keep
theirs between a busy loop's rounds (``drover._db.held``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from psycopg_pool import ConnectionPool

from drover._db import claims, insert, ledger
from drover._db.admin import job_get
from drover._db.caller import complete_claim, resolve_connection, transaction_open
from drover._db.deadline import socket_deadline
from drover._db.held import HeldSession
from drover._db.namespace import DEFAULT, Namespace
from drover._db.pool import borrow
from drover._kernel.store import Claimed
from drover._records import JobInsertParams, Outcome, Recorded, Renewal
from drover.job import JobRow

__all__ = ["PgKernelStore"]


class _ClaimSession:
    """The fetcher's held session (``ClaimSession``)."""

    def __init__(self, held: HeldSession) -> None:
        self._held = held

    def claim(self, queue: str, limit: int, lease_seconds: float, holder: str) -> Claimed:
        found = self._held.claim(queue, limit, lease_seconds, holder)
        return Claimed(found.rows, found.sent, found.limited)

    def release(self) -> None:
        self._held.release()

    @property
    def holding(self) -> bool:
        """True while a connection is kept (for tests)."""
        return self._held.holding


class _OutcomeSession:
    """The completer's held session (``OutcomeSession``)."""

    def __init__(self, held: HeldSession) -> None:
        self._held = held

    def record(self, outcomes: Sequence[Outcome]) -> list[Recorded]:
        return self._held.record_outcomes(outcomes)

    def release(self) -> None:
        self._held.release()

    @property
    def holding(self) -> bool:
        """True while a connection is kept (for tests)."""
        return self._held.holding


class PgKernelStore:
    """The kernel's operations on one pool, in one schema (``ns``). Thread-safe: the pool is."""

    def __init__(self, pool: ConnectionPool[Any], ns: Namespace = DEFAULT) -> None:
        self._pool = pool
        self._ns = ns

    @property
    def ns(self) -> Namespace:
        """The schema of the installation this store works on."""
        return self._ns

    def claim_session(self) -> _ClaimSession:
        return _ClaimSession(HeldSession(self._pool, "fetch jobs", self._ns))

    def outcome_session(self) -> _OutcomeSession:
        return _OutcomeSession(HeldSession(self._pool, "record job outcomes", self._ns))

    def extend_leases(
        self, held: Sequence[tuple[int, int]], lease_seconds: float, *, deadline: float
    ) -> tuple[float, list[Renewal]]:
        with (
            borrow(self._pool, "extend job leases") as conn,
            socket_deadline(conn, deadline),
        ):
            sent = time.monotonic()
            return sent, claims.job_extend_leases(conn, held, lease_seconds, ns=self._ns)

    def rescue(
        self, limit: int, lease_seconds: float, decide: Callable[[JobRow], Outcome], *, by: str
    ) -> tuple[int, list[Recorded]]:
        with borrow(self._pool, "rescue expired jobs") as conn, conn.transaction():
            return ledger.rescue_and_record(conn, limit, lease_seconds, decide, by=by, ns=self._ns)

    def hand_back(self, outcomes: Sequence[Outcome], *, worker: str) -> list[Recorded]:
        with borrow(self._pool, "return jobs to the queue") as conn, conn.transaction():
            return ledger.hand_back_and_record(conn, outcomes, worker=worker, ns=self._ns)

    def complete_in_tx(self, conn: object, job_id: int, attempt: int, result: str | None) -> object:
        resolved = resolve_connection(
            conn, "complete_tx", "or let the handler return and drover completes the job"
        )
        complete_claim(resolved, job_id, attempt, result, ns=self._ns)
        return resolved

    def transaction_open(self, conn: object) -> bool:
        return transaction_open(conn)

    def insert(self, params: JobInsertParams) -> JobRow:
        with borrow(self._pool, "insert job") as conn:
            return insert.job_insert(conn, params, notify=False, ns=self._ns)

    def get(self, job_id: int) -> JobRow | None:
        with borrow(self._pool, "get job") as conn:
            return job_get(conn, job_id, ns=self._ns)
