"""The operator side of the Store: jobs and queues, limits, statistics, the doctor's facts.

``OperatorStore`` is an object the ``drover._db.store.Store`` holds
(``Store.operator``) on the Store's own pool and namespace: the reads and
operator actions the Inspector, the Client's job reads and queue switches,
the CLI, the status page, ``drover.testing`` and the engine's refresher,
awaiter and health probe run. Each method borrows one connection for its
statements and returns it at once. Thread-safe: the pool is. It neither
opens nor closes the pool; the Store that made it does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

from psycopg_pool import ConnectionPool

from drover._db import (
    admin,
    bulk,
    cancels,
    clients,
    health,
    ledger,
    limits,
    queues,
    results,
    stats,
    ticks,
    unique,
)
from drover._db.migrator import read_status
from drover._db.namespace import Namespace
from drover._db.pool import borrow
from drover._db.sweeps import DepthFloors
from drover._records import KindStats, PeriodicInfo, QueueStats
from drover.health import HealthFacts, HealthSample, HealthThresholds
from drover.job import JobRow, JobState
from drover.limits import Limit, LimitKey, LimitState
from drover.queues import QueueState
from drover.unique import UniqueIdentity

__all__ = ["OperatorStore"]


class OperatorStore:
    """The reads and operator actions on a Store's pool (see the module docstring).

    Built by ``Store.__init__``; reached as ``store.operator``.
    """

    def __init__(self, pool: ConnectionPool[Any], ns: Namespace) -> None:
        self._pool = pool
        self._ns = ns
        self._depth = DepthFloors()

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

    def count_dead(self, kind: str, queue: str | None) -> int:
        """How many dead jobs of ``kind`` (on ``queue``) there are."""
        with borrow(self._pool, "count dead jobs") as conn:
            return admin.job_count_dead_of_kind(conn, kind, queue, ns=self._ns)

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

    def queue_stats(self, *, floored: bool = False) -> QueueStats:
        """Depth per queue and state, and the oldest claimable age per queue. ``floored``:
        a long-lived reader's (the refresher's) depth counts, read from where this store's
        last floored count left off and now and then in full (ADR 0059); else exact."""
        with borrow(self._pool, "refresh queue stats") as conn:
            return stats.queue_stats(conn, ns=self._ns, floors=self._depth if floored else None)

    def queue_overview(self, action: str) -> tuple[QueueStats, list[QueueState]]:
        """``queue_stats`` and ``queue_states``, read on one connection."""
        with borrow(self._pool, action) as conn:
            return stats.queue_stats(conn, ns=self._ns), queues.queue_list(conn, ns=self._ns)

    def throughput(
        self, minutes: int, kind: str | None = None, queue: str | None = None
    ) -> tuple[datetime, dict[tuple[datetime, str], int]]:
        """Per-minute completions, failures and deaths over the last ``minutes`` (of ``kind``
        and ``queue`` when given)."""
        with borrow(self._pool, "read throughput") as conn:
            return stats.throughput(conn, minutes, kind=kind, queue=queue, ns=self._ns)

    def kind_stats(self, minutes: int) -> list[KindStats]:
        """Per kind over the last ``minutes``: outcomes and run-time percentiles."""
        with borrow(self._pool, "read per-kind stats") as conn:
            return stats.kind_stats(conn, minutes, ns=self._ns)

    def job_counts(self) -> dict[tuple[str, str], int]:
        """``{(queue, state): count}`` over every job, finished ones too (a sequential scan:
        for ``drover demo``'s progress line, not for a hot path)."""
        with borrow(self._pool, "count jobs") as conn:
            return stats.job_counts_by_state(conn, ns=self._ns)

    def periodic_list(self) -> list[PeriodicInfo]:
        """Every registered periodic job, with the leader now."""
        with borrow(self._pool, "list periodic jobs") as conn:
            return ticks.periodic_list(conn, ns=self._ns)

    def health_samples(self, since: datetime) -> list[HealthSample]:
        """The health samples from ``since`` on, oldest first (ADR 0060)."""
        with borrow(self._pool, "read the health samples") as conn:
            return clients.health_samples_since(conn, since, ns=self._ns)

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
                sessions=health.session_visibility(conn, ns=self._ns),
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
                claims=health.client_claims(conn, ns=self._ns),
            )
