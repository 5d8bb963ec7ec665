"""The Store: drover's one door to the database for everything that runs on its own connections.

A ``Store`` owns a connection pool (one drover opened, or the
application's) and offers the operations drover runs on it: inserts in
transactions of their own, reads and operator actions, the engine's fenced
writes and sweeps, and the connections a busy loop keeps
(``Store.held``) or a service needs for itself (``Store.listen``,
``Store.lead``). The client, the Inspector, the background services and
the test helpers use only this; none of them sees a pool or a connection.
Work inside a caller's transaction is not the Store's: see
``drover._db.caller``.

Every one-shot operation borrows one connection for its statements and
returns it at once (committed by autocommit, or by the pool's context
manager on an application's pool). Thread-safe: the pool is.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

from psycopg_pool import ConnectionPool

from drover._db import (
    Connection,
    admin,
    bulk,
    cancels,
    claims,
    clients,
    graph,
    health,
    insert,
    ledger,
    limits,
    queues,
    results,
    retention,
    stats,
    testing,
    ticks,
    unique,
)
from drover._db.clients import ClientEntry
from drover._db.conninfo import describe_target
from drover._db.deadline import socket_deadline
from drover._db.held import HeldSession
from drover._db.migrator import read_status, require_current_schema
from drover._db.namespace import DEFAULT, Namespace
from drover._db.notify import Listening, notify_queues_now
from drover._db.pool import OwnedPool, behind_pooler, borrow, dedicated_connect, pool_from
from drover._db.progress import ProgressReport, job_report_progress
from drover._records import (
    EncodedBatch,
    EncodedGraph,
    Identity,
    JobInsertParams,
    KindStats,
    Outcome,
    PeriodicInfo,
    QueueStats,
    Recorded,
    Renewal,
    WorkerInfo,
)
from drover.health import HealthFacts, HealthThresholds
from drover.job import JobRow, JobState
from drover.limits import Limit, LimitKey, LimitState
from drover.queues import QueueState
from drover.unique import UniqueIdentity
from drover.workflows import WorkflowJob

__all__ = ["Store"]


class Store:
    """drover's database operations on one pool (see the module docstring)."""

    def __init__(
        self,
        pool: ConnectionPool[Any],
        *,
        owned: bool,
        pgbouncer: bool | None = None,
        session_url: str | None = None,
        ns: Namespace = DEFAULT,
    ) -> None:
        self._pool = pool
        self._owned = owned
        self._pooled = pgbouncer
        self._session_url = session_url
        self._ns = ns

    @classmethod
    def open(
        cls,
        source: object,
        *,
        who: str,
        max_size: int,
        pgbouncer: bool | None = None,
        session_url: str | None = None,
        ns: Namespace = DEFAULT,
    ) -> Store:
        """A store on the caller's pool as is, or on a new pool opened from a conninfo string.

        A conninfo string is parsed first, so a malformed one is an
        ``drover.InvalidArgument`` naming ``who`` (without the
        password), not a connection failure later. ``pgbouncer`` and
        ``session_url`` are ``Config``'s (ADR 0040). ``ns`` is the schema of
        the drover installation every operation runs against (ADR 0043);
        two stores on one pool may serve two schemas.
        """
        pool, owned = pool_from(source, who=who, max_size=max_size, pooled=pgbouncer)
        return cls(pool, owned=owned, pgbouncer=pgbouncer, session_url=session_url, ns=ns)

    @property
    def ns(self) -> Namespace:
        """The schema of the installation this store works on."""
        return self._ns

    @property
    def pool(self) -> ConnectionPool[Any]:
        """The pool (drover's own, or the one the application passed in)."""
        return self._pool

    @property
    def owned(self) -> bool:
        """True when drover opened the pool, and so closes it."""
        return self._owned

    def close(self) -> None:
        """Close the pool if drover opened it; an application's pool is left open."""
        if self._owned:
            self._pool.close()

    # --- sessions behind a transaction pooler (ADR 0040) -------------------------------------

    def behind_pooler(self) -> bool:
        """Whether the pool's connections go through a transaction pooler.

        As configured (``Config.pgbouncer``), else as the pool's first
        connection found out, else asked on one borrowed connection (an
        application's pool); the answer is kept. Thread-safe: a race asks
        twice and gets the same answer.
        """
        if self._pooled is None:
            found = self._pool.pooled if isinstance(self._pool, OwnedPool) else None
            if found is None:
                with borrow(self._pool, "find out whether a connection pooler is in the way") as c:
                    found = behind_pooler(c)
            self._pooled = found
        return self._pooled

    @property
    def session_url(self) -> bool:
        """True when ``Config.session_url`` routes the session connections past the pooler."""
        return self._session_url is not None

    def has_sessions(self) -> bool:
        """Whether session state (LISTEN, a session lock) can be kept: a ``session_url``,
        or no transaction pooler in the way."""
        return self._session_url is not None or not self.behind_pooler()

    def _session_connect(self, action: str, role: str) -> Connection:
        # A session of its own: on session_url when set, else the pool's conninfo.
        return dedicated_connect(
            self._pool, action, role, session_url=self._session_url, pooled=self._pooled
        )

    # --- connections a service keeps -------------------------------------------------------

    def held(self, action: str) -> HeldSession:
        """A session that keeps its pool connection between a busy loop's rounds."""
        return HeldSession(self._pool, action, self._ns)

    def listen(self, *, cancels: bool = False) -> Listening:
        """A dedicated connection listening for wake-ups (closed by its owner); with
        ``cancels``, for operators' requests to cancel running jobs too (ADR 0030)."""
        if cancels:
            return Listening(self._session_connect, also="notify_listen_cancels", ns=self._ns)
        return Listening(self._session_connect, ns=self._ns)

    def listen_done(self) -> Listening:
        """A dedicated connection listening for awaited jobs' ends (``Client.result``)."""
        return Listening(
            self._session_connect, "notify_listen_done", "listen for job results", ns=self._ns
        )

    def lead(self) -> ticks.Leadership:
        """A dedicated connection on which the ticker competes for leadership."""
        return ticks.Leadership(self._session_connect, self._ns)

    def lead_by_lease(self, holder: str, ttl: float) -> ticks.LeasedLeadership:
        """Leadership by a lease row on pooled connections, for clients without a session
        (behind a transaction pooler with no ``session_url``, ADR 0040)."""
        return ticks.LeasedLeadership(self._pool, holder=holder, ttl=ttl, ns=self._ns)

    # --- schema -----------------------------------------------------------------------------

    def require_current_schema(self, action: str) -> None:
        """Raise ``drover.SchemaMissing`` unless every migration is applied."""
        with borrow(self._pool, action) as conn:
            require_current_schema(conn, self.target, action, self._ns)

    @property
    def target(self) -> str:
        """``host:port/dbname`` of the pool's database, for messages (never the password)."""
        conninfo = self._pool.conninfo
        return describe_target(conninfo) if isinstance(conninfo, str) else "the database"

    # --- inserts in a transaction of their own ----------------------------------------------

    def insert(self, params: JobInsertParams, *, notify: bool) -> JobRow:
        """Insert one job, committed on return; with ``notify`` the wake-up commits with it."""
        with borrow(self._pool, "insert job") as conn:
            return insert.job_insert(conn, params, notify=notify, ns=self._ns)

    def insert_rows(self, batch: Sequence[JobInsertParams]) -> list[JobRow | None]:
        """Insert several callers' jobs in one statement; ``None`` where a unique key lost."""
        with borrow(self._pool, "insert job") as conn:
            return insert.job_insert_rows(conn, batch, ns=self._ns)

    def insert_unique(self, params: JobInsertParams, identity: Identity) -> JobRow:
        """Insert one job with a unique identity, committed on return (``_db.unique``);
        the job holding the identity (flagged ``duplicate``) if there is one."""
        with borrow(self._pool, "insert job") as conn:
            return unique.insert_one(conn, params, identity, notify=False, ns=self._ns)

    def insert_many(self, batch: EncodedBatch) -> list[JobRow]:
        """Insert a batch with COPY in one transaction; rows in input order."""
        with borrow(self._pool, "insert jobs") as conn:
            return insert.job_insert_many(conn, batch, caller_tx=False, notify=False, ns=self._ns)

    def insert_graph(
        self, encoded: EncodedGraph, *, notify: bool
    ) -> tuple[list[JobRow], int | None]:
        """Insert jobs with dependencies in one transaction of their own (``_db.graph``)."""
        with borrow(self._pool, "insert jobs with dependencies") as conn, conn.transaction():
            return graph.job_insert_graph(conn, encoded, notify=notify, ns=self._ns)

    def parent_results(self, job_id: int) -> list[graph.ParentResult]:
        """The dependencies of a job that still exist, with their results, in id order."""
        with borrow(self._pool, "read a job's dependencies") as conn:
            return graph.job_parent_results(conn, job_id, ns=self._ns)

    def workflow(self, job_id: int) -> tuple[int, list[WorkflowJob]] | None:
        """The workflow of job ``job_id`` (or with that id), or ``None``."""
        with borrow(self._pool, "read a workflow") as conn:
            return graph.workflow_jobs(conn, job_id, ns=self._ns)

    def notify_now(self, queues: Sequence[str], *, timeout: float) -> None:
        """Wake the listeners of ``queues`` now, waiting at most ``timeout`` for a connection."""
        with borrow(self._pool, "notify listeners of insert", timeout=timeout) as conn:
            notify_queues_now(conn, queues, ns=self._ns)

    # --- jobs and queues --------------------------------------------------------------------

    def get_job(self, job_id: int) -> JobRow | None:
        """The job's row now with its duplicate ledger (``JobRow.ledger``), or ``None``."""
        with borrow(self._pool, "get job") as conn:
            return ledger.job_get_with_ledger(conn, job_id, ns=self._ns)

    def list_jobs(
        self,
        *,
        queue: str | None,
        state: JobState | None,
        limit: int,
        kind: str | None,
        before_id: int | None,
        args_json: str | None = None,
        tags: Sequence[str] | None = None,
    ) -> list[JobRow]:
        """Jobs newest first, filtered by whatever is given (``args_json``: args containing it)."""
        with borrow(self._pool, "list jobs") as conn:
            return admin.job_list(
                conn,
                queue=queue,
                state=state,
                limit=limit,
                kind=kind,
                before_id=before_id,
                args_json=args_json,
                tags=tags,
                ns=self._ns,
            )

    def lease_holder(self, job_id: int) -> tuple[bool, str | None]:
        """``(exists, leased_by)`` for the job."""
        with borrow(self._pool, "read the lease holder") as conn:
            return admin.job_lease_holder(conn, job_id, ns=self._ns)

    def mark_awaited(self, job_id: int) -> None:
        """Ask the writer of the job's terminal state to notify ``drover_done``."""
        with borrow(self._pool, "wait for a job") as conn:
            results.job_mark_awaited(conn, job_id, ns=self._ns)

    def unique_identity(self, job_id: int) -> UniqueIdentity | bool | None:
        """The job's unique identity (``None``: it has none; ``False``: no such job)."""
        with borrow(self._pool, "read a job's unique identity") as conn:
            return unique.job_unique_identity(conn, job_id, ns=self._ns)

    def job_result(self, job_id: int) -> results.StoredResult | None:
        """The job's state, stored result and last error (``None``: no such job)."""
        with borrow(self._pool, "read a job's result") as conn:
            return results.job_result(conn, job_id, ns=self._ns)

    def cancel_job(self, job_id: int) -> JobRow:
        """Cancel a waiting or dead job (see ``drover._db.admin.job_operator_transition``)."""
        with borrow(self._pool, "cancel job") as conn:
            return admin.job_operator_transition(conn, job_id, admin.CANCEL, ns=self._ns)

    def cancel_or_request(
        self, job_id: int, *, reason: str | None, hard: bool, grace: float
    ) -> tuple[JobRow, bool]:
        """Cancel a job now, or (running) ask its owner to; True when it was a request."""
        with borrow(self._pool, "cancel job") as conn:
            return cancels.job_cancel_or_request(
                conn, job_id, reason=reason, hard=hard, grace=grace, ns=self._ns
            )

    def retry_job(self, job_id: int) -> JobRow:
        """Send a dead or cancelled job back to the queue with fresh attempts."""
        with borrow(self._pool, "retry job") as conn:
            return admin.job_operator_transition(conn, job_id, admin.RETRY, ns=self._ns)

    def retry_dead(self, kind: str, queue: str | None) -> int:
        """Redrive every dead job of ``kind`` (on ``queue``); return how many."""
        with borrow(self._pool, "retry dead jobs") as conn:
            return admin.job_retry_dead_of_kind(conn, kind, queue, ns=self._ns)

    def cancel_jobs(self, ids: Sequence[int]) -> list[int]:
        """Cancel every listed waiting or dead job in one statement; the ids cancelled."""
        with borrow(self._pool, "cancel jobs") as conn:
            return bulk.job_cancel_many(conn, ids, ns=self._ns)

    def retry_jobs(self, ids: Sequence[int]) -> list[int]:
        """Redrive every listed dead or cancelled job in one statement; the ids redriven."""
        with borrow(self._pool, "retry jobs") as conn:
            return bulk.job_retry_many(conn, ids, ns=self._ns)

    def pause_queue(self, name: str) -> QueueState:
        """Pause ``name`` for every client (idempotent)."""
        with borrow(self._pool, "pause queue") as conn:
            return queues.queue_pause(conn, name, ns=self._ns)

    def resume_queue(self, name: str) -> bool:
        """Resume ``name`` and wake listening clients; False when it was not paused."""
        with borrow(self._pool, "resume queue") as conn:
            return queues.queue_resume(conn, name, ns=self._ns)

    def queue_states(self) -> list[QueueState]:
        """Every queue with a pause record, by name."""
        with borrow(self._pool, "list queues") as conn:
            return queues.queue_list(conn, ns=self._ns)

    # --- limits -----------------------------------------------------------------------------

    def declare_limits(self, declared: Sequence[tuple[LimitKey, Limit]]) -> None:
        """Write the limits code declares, keeping operators' overrides."""
        if declared:
            with borrow(self._pool, "declare limits") as conn:
                limits.limit_declare(conn, declared, ns=self._ns)

    def limits(self) -> list[LimitState]:
        """Every limit with its effective values and its use now."""
        with borrow(self._pool, "list limits") as conn:
            return limits.limit_list(conn, ns=self._ns)

    def set_limit(
        self, key: LimitKey, concurrency: int | None, rate: int | None, per: timedelta | None
    ) -> LimitState:
        """Override a limit's values (creating it if need be), wake every fetcher; the result."""
        with borrow(self._pool, "set limit") as conn:
            return limits.limit_set(conn, key, concurrency, rate, per, ns=self._ns)

    def clear_limit(self, key: LimitKey) -> Literal["cleared", "removed"] | None:
        """Drop a limit's override, removing an undeclared limit; None when nothing changed."""
        with borrow(self._pool, "clear limit") as conn:
            return limits.limit_clear(conn, key, ns=self._ns)

    def delete_limit(self, key: LimitKey) -> bool:
        """Remove a limit whole; False when there was none."""
        with borrow(self._pool, "delete limit") as conn:
            return limits.limit_delete(conn, key, ns=self._ns)

    # --- statistics -------------------------------------------------------------------------

    def queue_stats(self) -> QueueStats:
        """Depth per queue and state, and the oldest claimable age per queue."""
        with borrow(self._pool, "refresh queue stats") as conn:
            return stats.queue_stats(conn, ns=self._ns)

    def queue_overview(self, action: str) -> tuple[QueueStats, list[QueueState]]:
        """``queue_stats`` and ``queue_states``, read on one connection."""
        with borrow(self._pool, action) as conn:
            return stats.queue_stats(conn, ns=self._ns), queues.queue_list(conn, ns=self._ns)

    def throughput(self, minutes: int) -> tuple[datetime, dict[tuple[datetime, str], int]]:
        """Per-minute completions, failures and deaths over the last ``minutes``."""
        with borrow(self._pool, "read throughput") as conn:
            return stats.throughput(conn, minutes, ns=self._ns)

    def kind_stats(self, minutes: int) -> list[KindStats]:
        """Per kind over the last ``minutes``: outcomes and run-time percentiles."""
        with borrow(self._pool, "read per-kind stats") as conn:
            return stats.kind_stats(conn, minutes, ns=self._ns)

    def periodic_list(self) -> list[PeriodicInfo]:
        """Every registered periodic job, with the leader now."""
        with borrow(self._pool, "list periodic jobs") as conn:
            return ticks.periodic_list(conn, ns=self._ns)

    def health_facts(self, thresholds: HealthThresholds) -> HealthFacts:
        """The queue doctor's facts, read on one connection (ADR 0035).

        The horizon questions (sessions, slots, prepared transactions) are
        asked whatever the schema; the drover-table questions only when the
        schema is current, since an older schema may lack what they read.
        """
        with borrow(self._pool, "examine queue health") as conn:
            status = read_status(conn, self._ns)
            latest = max(
                [m.version for m in status.pending] + [m.version for m in status.applied],
                default=0,
            )
            xmin_age = thresholds.xmin_age.total_seconds()
            horizon = HealthFacts(
                schema_current=status.current_version,
                schema_latest=latest,
                backends=health.horizon_backends(conn, xmin_age, ns=self._ns),
                slots=health.horizon_slots(conn, ns=self._ns),
                prepared=health.horizon_prepared(conn, xmin_age, ns=self._ns),
            )
            if not status.up_to_date:
                return horizon
            return dataclasses.replace(
                horizon,
                tables=health.table_facts(conn, ns=self._ns),
                expired=health.expired_leases(
                    conn, thresholds.lease_grace.total_seconds(), ns=self._ns
                ),
                unserved=health.unserved_queues(
                    conn, thresholds.unserved_grace.total_seconds(), ns=self._ns
                ),
                periodic=health.periodic_facts(conn, ns=self._ns),
            )

    # --- the registry of live clients ------------------------------------------------------

    def refresh_client(
        self,
        entry: ClientEntry,
        *,
        running: int,
        ttl_seconds: float,
        started_at: datetime | None,
        deadline: float,
    ) -> tuple[datetime, int]:
        """Write this client's registry row and reap expired ones (see ``clients.sql``).

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
                ns=self._ns,
            )

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
            return claims.job_record_outcomes(conn, outcomes, ns=self._ns)

    def report_progress(self, reports: Sequence[ProgressReport]) -> set[int]:
        """Write progress reports in one statement, each fenced on its execution."""
        with borrow(self._pool, "report job progress") as conn:
            return job_report_progress(conn, reports, ns=self._ns)

    def extend_leases(
        self, held: Sequence[tuple[int, int]], lease_seconds: float, *, deadline: float
    ) -> tuple[float, list[Renewal]]:
        """Renew the leases of the ``(id, attempt)`` claims still current.

        Returns when the statement was sent (``time.monotonic()``, once the
        connection was in hand) with one renewal per claim. A call that takes
        longer than ``deadline`` seconds has its connection shut down under it
        (a half-open connection would hang it for good) and fails.
        """
        with (
            borrow(self._pool, "extend job leases") as conn,
            socket_deadline(conn, deadline),
        ):
            sent = time.monotonic()
            return sent, claims.job_extend_leases(conn, held, lease_seconds, ns=self._ns)

    def rescue(
        self, limit: int, lease_seconds: float, decide: Callable[[JobRow], Outcome], *, by: str
    ) -> tuple[int, list[Recorded]]:
        """Re-lease up to ``limit`` expired claims, record ``decide(row)`` for each, and
        note each rescue in its job's duplicate ledger (``by``: the rescuing client).

        One transaction, so the rescued rows stay locked until their ledger
        entries are written (a fetcher cannot claim one in between and make
        the entry skip it). Returns ``(rows found, the writes' results)``.
        """
        with borrow(self._pool, "rescue expired jobs") as conn, conn.transaction():
            return ledger.rescue_and_record(conn, limit, lease_seconds, decide, by=by, ns=self._ns)

    def hand_back(self, outcomes: Sequence[Outcome], *, worker: str) -> list[Recorded]:
        """Record shutdown's hand-back outcomes and note each in its job's duplicate ledger,
        in one transaction, as ``rescue``. Returns the writes' results."""
        with borrow(self._pool, "return jobs to the queue") as conn, conn.transaction():
            return ledger.hand_back_and_record(conn, outcomes, worker=worker, ns=self._ns)

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
