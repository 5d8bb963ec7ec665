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

This module keeps the pool, the sessions, the connections services keep
and the inserts. The reads and operator actions are an object the Store
holds, ``Store.operator`` (``drover._db.store_operator.OperatorStore``, on
the same pool and namespace); the engine's writes and sweeps are in
``drover._db.store_engine``, mixed into ``Store``.

Every one-shot operation borrows one connection for its statements and
returns it at once (committed by autocommit, or by the pool's context
manager on an application's pool). Thread-safe: the pool is.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from psycopg_pool import ConnectionPool

from drover._db import Connection, graph, insert, ticks, unique
from drover._db.conninfo import describe_target
from drover._db.features import FEATURES
from drover._db.handback import HandBackHold
from drover._db.held import HeldSession
from drover._db.kernel import PgKernelStore
from drover._db.migrator import require_current_schema
from drover._db.namespace import DEFAULT, Namespace
from drover._db.notify import Listening, notify_queues_now
from drover._db.pool import OwnedPool, behind_pooler, borrow, dedicated_connect, pool_from
from drover._db.privileges import PageRights, page_rights, work_rights
from drover._db.roles import DEFAULT_WORKER
from drover._db.store_engine import EngineOps
from drover._db.store_operator import OperatorStore
from drover._records import EncodedBatch, EncodedGraph, Identity, JobInsertParams
from drover.errors import CannotClaim
from drover.job import JobRow
from drover.workflows import WorkflowJob, WorkflowSummary

__all__ = ["Store"]


class Store(EngineOps):
    """drover's database operations on one pool (see the module docstring).

    The operator-side reads and actions are ``Store.operator``, an
    ``OperatorStore`` (``_db/store_operator.py``) on this store's pool; the
    engine's writes and sweeps and the test helpers' reads come from
    ``EngineOps`` (``_db/store_engine.py``).
    """

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
        self._operator = OperatorStore(pool, ns)
        self._kernel = PgKernelStore(pool, ns, doors=FEATURES)

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
    def kernel(self) -> PgKernelStore:
        """The kernel's operations on this store's pool (``drover._kernel.store.KernelStore``),
        with drover's features plugged in (``drover._db.features.FEATURES``). One per store:
        its claim and outcome sessions share what they must (ADR 0059)."""
        return self._kernel

    @property
    def operator(self) -> OperatorStore:
        """The reads and operator actions on this store's pool: jobs, queues, limits, stats."""
        return self._operator

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

    def lend(self, action: str, timeout: float | None = None) -> AbstractContextManager[Connection]:
        """One pool connection for a plugin's own statements (``PluginContext.connection``).

        The one place a connection leaves the Store for code that is not
        drover's (ADR 0046): returned at the block's end (committed on
        success, rolled back on an error, on a pool not in autocommit), and
        a psycopg error inside the block re-raised as ``drover.DatabaseError``
        naming ``action``. ``timeout`` bounds the wait for a connection.
        """
        return borrow(self._pool, action, timeout=timeout)

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

    def hand_back_hold(self, logger: logging.Logger) -> HandBackHold:
        """A session that keeps jobs about to be handed back from other workers until it
        ends (``drover worker``'s shutdown, ADR 0053)."""
        return HandBackHold(self._session_connect, logger, self._ns)

    def lead(self) -> ticks.Leadership:
        """A dedicated connection on which the ticker competes for leadership."""
        return ticks.Leadership(self._session_connect, self._ns)

    def lead_by_lease(self, holder: str, ttl: float) -> ticks.LeasedLeadership:
        """Leadership by a lease row on pooled connections, for clients without a session
        (behind a transaction pooler with no ``session_url``, ADR 0040)."""
        return ticks.LeasedLeadership(self._pool, holder=holder, ttl=ttl, ns=self._ns)

    # --- schema -----------------------------------------------------------------------------

    def require_ready_to_work(self, action: str) -> None:
        """``drover.SchemaMissing`` unless every migration is applied, then
        ``drover.CannotClaim`` unless the role may claim and run jobs: two reads on one
        connection, once per start (ADR 0054)."""
        with borrow(self._pool, action) as conn:
            require_current_schema(conn, self.target, action, self._ns)
            rights = work_rights(conn, action, ns=self._ns)
        if rights.missing:
            raise CannotClaim(
                f"{action}: role {rights.role!r} may not claim and run jobs: it lacks "
                f"{'; '.join(rights.missing)}. Apply the SQL `drover roles` prints (as the "
                f"owner) and connect as a login in its worker role (e.g. GRANT {DEFAULT_WORKER} "
                f"TO {rights.role}); a client that only inserts and reads results need not "
                "be started",
                role=rights.role,
                missing=rights.missing,
            )

    def page_rights(self) -> PageRights:
        """Which of the status page's writes the role may make (ADR 0054)."""
        with borrow(self._pool, "read the status page's privileges") as conn:
            return page_rights(conn, ns=self._ns)

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
        with borrow(self._pool, "insert jobs with dependencies") as conn:
            return graph.job_insert_graph(
                conn, encoded, notify=notify, own_transaction=True, ns=self._ns
            )

    def parent_results(self, job_id: int) -> list[graph.ParentResult]:
        """The dependencies of a job that still exist, with their results, in id order."""
        with borrow(self._pool, "read a job's dependencies") as conn:
            return graph.job_parent_results(conn, job_id, ns=self._ns)

    def workflow(self, job_id: int) -> tuple[int, list[WorkflowJob]] | None:
        """The workflow of job ``job_id`` (or with that id), or ``None``."""
        with borrow(self._pool, "read a workflow") as conn:
            return graph.workflow_jobs(conn, job_id, ns=self._ns)

    def workflows(self, limit: int, before: int | None) -> list[WorkflowSummary]:
        """The ``limit`` newest workflows (ids below ``before``), newest first."""
        with borrow(self._pool, "list workflows") as conn:
            return graph.workflow_list(conn, limit, before, ns=self._ns)

    def notify_now(self, queues: Sequence[str], *, timeout: float) -> None:
        """Wake the listeners of ``queues`` now, waiting at most ``timeout`` for a connection."""
        with borrow(self._pool, "notify listeners of insert", timeout=timeout) as conn:
            notify_queues_now(conn, queues, ns=self._ns)
