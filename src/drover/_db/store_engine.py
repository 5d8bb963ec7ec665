"""The Store's engine-side operations: the client registry, fenced writes, sweeps, test reads.

A mixin of ``drover._db.store.Store``, kept apart so the Store's module
stays small: these are what the running engine's services (registry,
completer, progress writer, heartbeat, rescuer, pruner) and
``drover.testing`` run on one borrowed connection each, while
``store.py`` keeps the pool, the sessions and the inserts. Thread-safe as
the Store is: every method borrows its own connection.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from psycopg_pool import ConnectionPool

from drover._db import cancels, clients, kernel, ledger, retention, testing
from drover._db.clients import ClaimWindow, ClientEntry
from drover._db.deadline import socket_deadline
from drover._db.features import FEATURES
from drover._db.limits import limit_take_start
from drover._db.namespace import Namespace
from drover._db.pool import borrow
from drover._db.progress import ProgressReport, job_report_progress
from drover._db.sweeps import Sweep
from drover._records import Outcome, Recorded, WorkerInfo
from drover.job import JobRow

__all__ = ["EngineOps"]


class EngineOps:
    """The engine's and the test helpers' operations of ``Store`` (see the module docstring)."""

    # Set by Store.__init__.
    _pool: ConnectionPool[Any]
    _ns: Namespace

    # --- the registry of live clients ------------------------------------------------------

    def refresh_client(
        self,
        entry: ClientEntry,
        *,
        running: int,
        ttl_seconds: float,
        started_at: datetime | None,
        deadline: float,
        window: ClaimWindow | None = None,
    ) -> tuple[datetime, int]:
        """Write this client's registry row, with its claims' ``window`` (ADR 0060), and
        reap expired ones (see ``clients.sql``).

        Returns ``(the row's start time, rows reaped)``. Waits at most
        ``deadline`` seconds for a connection and as long again for the
        statement, so a database that does not answer delays no other work.
        """
        with (
            borrow(self._pool, "refresh the client registry", timeout=deadline) as conn,
            socket_deadline(conn, deadline),
        ):
            return clients.client_refresh(
                conn,
                entry,
                running=running,
                ttl_seconds=ttl_seconds,
                started_at=started_at,
                window=window,
                ns=self._ns,
            )

    def sample_health(self, keep_seconds: float, *, deadline: float) -> bool:
        """Write this minute's health sample unless a client already has, deleting the
        samples older than ``keep_seconds`` (ADR 0060); True when this call wrote it.
        Waits at most ``deadline`` seconds for a connection and as long for the statement."""
        with (
            borrow(self._pool, "write the health sample", timeout=deadline) as conn,
            socket_deadline(conn, deadline),
        ):
            return clients.health_sample(conn, keep_seconds, ns=self._ns)

    def unregister_client(self, registration_id: str, *, deadline: float) -> bool:
        """Delete this client's registry row; False when it was already gone."""
        with (
            borrow(self._pool, "unregister the client", timeout=deadline) as conn,
            socket_deadline(conn, deadline),
        ):
            return clients.client_unregister(conn, registration_id, ns=self._ns)

    def live_clients(self) -> list[WorkerInfo]:
        """Every client whose registry row has not expired, oldest first."""
        with borrow(self._pool, "list live clients") as conn:
            return clients.client_list(conn, ns=self._ns)

    # --- the engine's writes and sweeps -----------------------------------------------------

    def record_outcomes(self, outcomes: Sequence[Outcome], action: str) -> list[Recorded]:
        """Write outcomes in one statement, each fenced on its claim (one result per outcome)."""
        with borrow(self._pool, action) as conn:
            return kernel.record_outcomes(conn, outcomes, doors=FEATURES, ns=self._ns)

    def report_progress(self, reports: Sequence[ProgressReport]) -> set[int]:
        """Write progress reports in one statement, each fenced on its execution."""
        with borrow(self._pool, "report job progress") as conn:
            return job_report_progress(conn, reports, ns=self._ns)

    def rescue(
        self, limit: int, lease_seconds: float, decide: Callable[[JobRow], Outcome], *, by: str
    ) -> tuple[int, list[Recorded]]:
        """Re-lease up to ``limit`` expired claims, record ``decide(row)`` for each, and
        note each rescue in its job's duplicate ledger (``by``: the rescuing client).

        One transaction, so the rescued rows stay locked until their ledger
        entries are written (a fetcher cannot claim one in between and make
        the entry skip it). Returns ``(rows found, the writes' results)``. A full sweep,
        every expired lease read; the rescuer's sweeps (``Store.kernel``) start at floors
        (ADR 0059).
        """
        with borrow(self._pool, "rescue expired jobs") as conn, conn.transaction():
            return kernel.rescue(
                conn, limit, lease_seconds, decide, Sweep(None), by=by, doors=FEATURES, ns=self._ns
            )

    def hand_back(self, outcomes: Sequence[Outcome], *, worker: str) -> list[Recorded]:
        """Record shutdown's hand-back outcomes and note each in its job's duplicate ledger,
        in one transaction, as ``rescue``. Returns the writes' results."""
        with borrow(self._pool, "return jobs to the queue") as conn, conn.transaction():
            return kernel.hand_back(conn, outcomes, worker=worker, doors=FEATURES, ns=self._ns)

    def cancel_requests(self, held: Sequence[tuple[int, int]]) -> list[tuple[int, int, Any]]:
        """``(id, attempt, request)`` for those ``(id, attempt)`` claims that have an
        operator's request to cancel them (ADR 0030): the cancels feature's read."""
        with borrow(self._pool, "read cancel requests") as conn:
            found = cancels.job_cancel_requests(conn, held, ns=self._ns)
        return [(job_id, attempt, request) for (job_id, attempt), request in found.items()]

    def take_start(self, job_id: int, attempt: int) -> tuple[datetime | None, float | None]:
        """Take a handler's start under the rate limits that count starts (ADR 0052):
        ``(when, None)`` once taken, ``(None, seconds to wait)`` while a window is full;
        ``drover.LeaseLost`` when the claim is no longer this execution's."""
        with borrow(self._pool, "take a job's start") as conn:
            return limit_take_start(conn, job_id, attempt, ns=self._ns)

    def append_ledger(self, notes: Sequence[ledger.LedgerNote]) -> set[int]:
        """Append entries to jobs' duplicate ledgers (rare paths only); the ids written."""
        with borrow(self._pool, "record duplicate ledger entries") as conn:
            return ledger.job_ledger_append(conn, notes, ns=self._ns)

    def prune(self, state: str, older_than: float, limit: int) -> int | None:
        """Delete up to ``limit`` old ``state`` jobs; ``None`` when another client is pruning."""
        with borrow(self._pool, "prune finished jobs") as conn:
            return retention.job_prune_batch(conn, state, older_than, limit)

    # --- what drover.testing reads ------------------------------------------------------

    def max_job_id(self) -> int:
        """The highest job id so far (0 on an empty table)."""
        with borrow(self._pool, "read the newest job id") as conn:
            return testing.job_max_id(conn, ns=self._ns)

    def jobs_after(self, after: int) -> list[JobRow]:
        """Every job with an id above ``after``, oldest first."""
        with borrow(self._pool, "list jobs") as conn:
            return testing.job_list_after(conn, after, ns=self._ns)

    def claim_after(
        self, after: int, queues: Sequence[str] | None, limit: int, lease_seconds: float
    ) -> list[JobRow]:
        """Claim due jobs with ids above ``after`` (of ``queues`` if given), oldest due first."""
        with borrow(self._pool, "claim jobs") as conn:
            return testing.job_claim_after(conn, after, queues, limit, lease_seconds, ns=self._ns)
