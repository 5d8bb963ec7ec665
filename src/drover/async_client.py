"""``AsyncClient``: drover's inserts for asyncio applications (FastAPI, Starlette, aiohttp).

A facade like ``Client``: its inserts go through the same insert funnel
(``drover._insert.funnel``: the same encoding, insert middleware and
routes), carried out by ``drover._insert.aio_tx``'s writers with ``await``
on a psycopg ``AsyncConnectionPool`` (its own or the application's) or the
caller's async connection, and it announces the jobs it commits itself
through an asyncio notifier task. It only inserts:
jobs are run by a ``drover.Client`` (``drover worker``), which is where
workers, concurrency and the other settings of ``Config`` apply.
"""

from __future__ import annotations

import inspect
from collections.abc import Collection, Iterable
from types import TracebackType
from typing import Any, Self, TypeVar, Unpack, overload

from psycopg_pool import AsyncConnectionPool

from drover._db.aio import aio_open, aio_pool_from, arun
from drover._db.ledger import get_with_ledger_plan
from drover._db.namespace import namespace_for
from drover._db.results import result_plan
from drover._durations import Duration
from drover._insert.aio_notifier import AsyncNotifier
from drover._insert.aio_tx import AsyncCallerWriter, AsyncOwnWriter
from drover._insert.funnel import athrough, prepare_many, prepare_one, single_result
from drover._runtime.aio_awaiter import AsyncAwaiter
from drover._runtime.awaiter import awaited, ended
from drover.config import Config
from drover.errors import DatabaseError, InvalidArgument, NotFound
from drover.insert_middleware import insert_chain
from drover.job import (
    InsertItem,
    InsertOptions,
    InsertOpts,
    JobArgs,
    JobRow,
    check_job_id,
    with_options,
)
from drover.workflows import Chain, Group, InsertedWorkflow

__all__ = ["AsyncClient"]

T = TypeVar("T")

# How long the first insert on the client's own pool waits for a connection.
_OPEN_TIMEOUT = 10.0


class AsyncClient:
    """Inserts jobs from asyncio code, with ``Client``'s guarantees and errors.

    ``pool_or_conninfo`` is a ``psycopg_pool.AsyncConnectionPool`` that the
    application owns (drover borrows connections and never closes it) or a
    conninfo string / URL, from which the client makes its own pool (up to
    10 connections), opened by the first insert and closed by ``close``.
    ``config`` is validated as ``Client`` does; of it the async client uses
    ``notify``, ``logger`` and ``schema`` (it runs no jobs).

    Concurrency: use a client from one event loop (its pool and notifier
    task belong to it); any number of tasks may insert at once, each
    borrowing one pool connection per call. Timeouts: a call waits for a
    pool connection up to the pool's timeout, then raises
    ``drover.DatabaseError``. Cancelling a call cancels its statement; as
    with any write whose reply is lost, that does not prove nothing was
    committed. Shutdown: ``await close()`` (or leaving ``async with``) sends
    pending wake-ups, then closes the pool if the client made it; wake-ups
    still pending when the loop of a client never closed ends are lost
    (workers then find the jobs by polling).

    Wake-ups: for ``insert`` and ``insert_many`` (committed by drover) one
    NOTIFY per queue follows the commit, sent by a task shared with the other
    inserts of the moment; for ``insert_tx`` and ``insert_many_tx`` it is
    queued in the caller's transaction and delivered only if it commits.

    Workflows (``drover.chain``/``group``) and ``InsertOpts.depends_on`` are
    inserted as ``Client`` inserts them, on the pool or in the caller's
    transaction (their wake-ups are queued in the transaction that commits
    them).

    Insert middleware: every call goes through the insert middleware of
    ``config.middleware`` (``drover.InsertMiddleware``, ADR 0047), the same
    objects as a ``Client``'s; their context is entered and exited on the
    calling task, around the awaited write. Tracing: as ``Client``'s, with a
    ``drover.contrib.otel.TracingMiddleware`` in ``config.middleware`` (the
    span is current in the calling task).
    """

    def __init__(
        self,
        pool_or_conninfo: AsyncConnectionPool[Any] | str,
        config: Config | None = None,
    ) -> None:
        if config is None:
            config = Config()
        elif not isinstance(config, Config):
            raise InvalidArgument(
                f"config must be a drover.Config, not {type(config).__qualname__}"
            )
        self._config = config
        self._source = pool_or_conninfo
        self._pool, self._owned = aio_pool_from(pool_or_conninfo, who="AsyncClient", max_size=10)
        self._ns = namespace_for(config.schema)
        self._notifier = (
            AsyncNotifier(lambda: self._pool, config.logger, self._ns) if config.notify else None
        )
        self._closed = False
        # The insert middleware among Config.middleware (ADR 0047).
        self._insert_chain = insert_chain(config.middleware)
        self._write = AsyncOwnWriter(
            self._ready, self._committed, notify=config.notify, ns=self._ns
        )
        # Behind a transaction pooler without a session_url nothing can LISTEN: waiters poll.
        can_listen = config.session_url is not None or config.pgbouncer is not True
        self._awaiter = AsyncAwaiter(
            self._ready,
            listen_to=self._listen_target if can_listen else None,
            ns=self._ns,
            logger=config.logger,
        )

    @property
    def config(self) -> Config:
        """The validated configuration."""
        return self._config

    @property
    def pool(self) -> AsyncConnectionPool[Any]:
        """The async pool the client uses (its own, or the one it was given)."""
        return self._pool

    async def _ready(self, action: str) -> AsyncConnectionPool[Any]:
        if self._owned:
            if self._closed:
                raise DatabaseError(f"{action}: this AsyncClient is closed")
            # Waits for the first connection, so a wrong URL or a refused
            # login fails this call (after up to _OPEN_TIMEOUT) with its cause.
            try:
                await aio_open(self._pool, action, timeout=_OPEN_TIMEOUT)
            except DatabaseError:
                # A pool that failed to open cannot be opened again: the
                # next call starts from a new one.
                self._pool, _ = aio_pool_from(self._source, who="AsyncClient", max_size=10)
                raise
        return self._pool

    @overload
    async def insert(
        self, args: JobArgs, opts: InsertOpts | None = None, **options: Unpack[InsertOptions]
    ) -> JobRow: ...
    @overload
    async def insert(self, args: Chain | Group, opts: None = None) -> InsertedWorkflow: ...
    async def insert(
        self,
        args: JobArgs | Chain | Group,
        opts: InsertOpts | None = None,
        **options: Unpack[InsertOptions],
    ) -> JobRow | InsertedWorkflow:
        """Insert one job, committed when this returns, and return the stored row.

        As ``Client.insert``: the same validation (before any connection is
        borrowed), the same statements on a connection of the pool, and the
        same rows (``InsertOpts`` with a time, priority, unique key, tags and
        metadata; ``unique``, ``debounce`` and ``throttle`` may return the
        holding job flagged ``row.duplicate``). Given a workflow
        (``drover.chain``, ``drover.group``), inserts all of its jobs in one
        transaction and returns a ``drover.InsertedWorkflow``; a job with
        ``InsertOpts.depends_on`` is inserted ``pending``.

        Raises:
            drover.InvalidJobArgs: ``args`` is not a JobArgs or cannot be
                encoded (nothing was written).
            drover.InvalidInsertOpts: bad options, or a job it depends on does
                not exist or ended dead or cancelled (nothing was written).
            drover.InvalidArgument: insert options given with a workflow.
            drover.DuplicateJob: the unique key is held by a waiting or running job.
            drover.DatabaseError: the database refused or could not be reached.
        """
        prepared = prepare_one(args, with_options(opts, options), "insert")
        chain = self._insert_chain
        rows = await (athrough(chain, prepared, self._write) if chain else self._write(prepared))
        return rows[0] if prepared.last is None else single_result(prepared, rows)

    async def insert_many(self, items: Iterable[InsertItem]) -> list[JobRow]:
        """Insert a batch atomically with COPY and return the rows in input order.

        As ``Client.insert_many``: every item is validated and encoded before
        anything is sent; a bad item or a unique-key collision writes
        nothing; an empty batch makes no round trip; the rows are committed
        when this returns, and each queue gets one wake-up after the commit.
        A batch where an item has ``InsertOpts.depends_on`` is inserted as a
        graph, in one transaction.

        Raises:
            drover.InvalidJobArgs: an item is invalid (the message names its index).
            drover.InvalidInsertOpts: an item depends on a job that does not
                exist or ended dead or cancelled.
            drover.DuplicateJob: an item's unique key is taken.
            drover.DatabaseError: the database refused or could not be reached.
        """
        prepared = prepare_many(items, "insert_many")
        return await athrough(self._insert_chain, prepared, self._write)

    @overload
    async def insert_tx(
        self,
        conn: object,
        args: JobArgs,
        opts: InsertOpts | None = None,
        **options: Unpack[InsertOptions],
    ) -> JobRow: ...
    @overload
    async def insert_tx(
        self, conn: object, args: Chain | Group, opts: None = None
    ) -> InsertedWorkflow: ...
    async def insert_tx(
        self,
        conn: object,
        args: JobArgs | Chain | Group,
        opts: InsertOpts | None = None,
        **options: Unpack[InsertOptions],
    ) -> JobRow | InsertedWorkflow:
        """Insert one job (or a workflow's jobs) inside the caller's open async transaction.

        The jobs exist if and only if that transaction commits. ``conn`` is a
        psycopg ``AsyncConnection`` or ``AsyncCursor``, or a SQLAlchemy
        ``AsyncSession`` or ``AsyncConnection`` (``postgresql+psycopg://``).
        drover runs its statements on that connection, never commits or rolls
        back and changes no session settings; the caller must not use the
        connection from another task meanwhile. A duplicate unique key raises
        ``drover.DuplicateJob`` and leaves the transaction usable.

        Raises:
            drover.InvalidJobArgs: bad args, checked before ``conn`` is used.
            drover.NotInTransaction: the connection is in autocommit mode
                outside a transaction, or its transaction has failed.
            drover.UnsupportedConnection: ``conn`` is not one of the above.
            drover.DuplicateJob: the unique key is held by a waiting or running job.
            drover.DatabaseError: the statement failed; the caller's
                transaction is then aborted, as with any failed statement.
        """
        prepared = prepare_one(args, with_options(opts, options), "insert_tx")
        rows = await athrough(self._insert_chain, prepared, self._caller_writer(conn))
        return single_result(prepared, rows)

    def _caller_writer(self, conn: object) -> AsyncCallerWriter:
        return AsyncCallerWriter(conn, notify=self._config.notify, ns=self._ns)

    async def insert_many_tx(self, conn: object, items: Iterable[InsertItem]) -> list[JobRow]:
        """Insert a batch with COPY inside the caller's open async transaction (see ``insert_tx``).

        As ``Client.insert_many_tx``: a batch with unique keys runs under a
        savepoint, so a collision writes nothing and leaves the transaction
        usable; the wake-ups are delivered only if the transaction commits.
        """
        prepared = prepare_many(items, "insert_many_tx")
        return await athrough(self._insert_chain, prepared, self._caller_writer(conn))

    async def _committed(self, queues: Collection[str]) -> None:
        if self._notifier is not None:
            await self._notifier.committed(queues)

    async def get_job(self, job_id: int) -> JobRow:
        """The job's row now, with its duplicate ledger (``JobRow.ledger``), as
        ``Client.get_job``: one statement on a connection of the pool.

        Raises:
            drover.NotFound: no such job (never inserted, or deleted by retention).
            drover.InvalidArgument: ``job_id`` is not a valid id.
            drover.DatabaseError: the database refused or could not be reached.
        """
        checked = check_job_id(job_id)
        row = await self._run(get_with_ledger_plan(checked, ns=self._ns), f"get job {checked}")
        if row is None:
            raise NotFound(f"job {checked} does not exist")
        return row  # type: ignore[no-any-return]

    async def get_result(self, job_id: int) -> Any:
        """The job's stored result now (``None`` while it has none), without waiting, as
        ``Client.get_result``.

        Raises ``drover.NotFound`` for no such job and ``drover.InvalidArgument`` for a
        bad id.
        """
        checked = check_job_id(job_id)
        action = f"read the result of job {checked}"
        found = await self._run(result_plan(checked, ns=self._ns), action)
        if found is None:
            raise NotFound(f"job {checked} does not exist")
        return found.result

    @overload
    async def result(
        self, job: JobRow | int, *, timeout: Duration | None = None, as_type: None = None
    ) -> Any: ...
    @overload
    async def result(
        self, job: JobRow | int, *, timeout: Duration | None = None, as_type: type[T]
    ) -> T: ...
    async def result(
        self, job: JobRow | int, *, timeout: Duration | None = None, as_type: type[T] | None = None
    ) -> Any:
        """Wait until ``job`` (a row or an id) has ended; return its handler's result.

        As ``Client.result``, without a thread: the job is flagged as awaited
        and the write of its terminal state notifies this client, which keeps
        one task listening on a dedicated connection (``Config.session_url``
        when set; none behind a transaction pooler without one), started by
        the first call and ended by ``close``. The state is read again at
        least every second, so a lost notification costs a second at most.
        Any number of tasks may wait at once; cancelling one ends its wait.
        ``timeout`` (a ``timedelta`` or seconds, ``None`` for no limit) bounds
        the wait; the job is not changed when it runs out.

        Raises:
            drover.JobFailed: the job ended ``dead``; ``drover.JobCancelled``
                (a subclass) when it ended ``cancelled``.
            drover.ResultTimeout: still not ended when ``timeout`` passed.
            drover.NotFound: no such job.
            drover.InvalidResult: the stored result does not validate as ``as_type``.
            drover.InvalidArgument: a bad ``job`` or ``timeout``, or a closed client.
        """
        job_id, seconds = awaited(job, timeout)
        if self._closed:
            raise InvalidArgument("this AsyncClient is closed; results need an open client")
        return ended(await self._awaiter.wait(job_id, seconds), job_id, as_type)

    async def _listen_target(self) -> tuple[str, dict[str, Any]]:
        # The session to LISTEN on: session_url, else what the pool connects with (a pool's
        # conninfo and kwargs may be given as functions, called for each connection).
        pool = self._pool
        conninfo: Any = self._config.session_url or pool.conninfo
        kwargs: Any = pool.kwargs or {}
        if callable(conninfo):
            conninfo = conninfo()
        if callable(kwargs):
            kwargs = kwargs()
        if inspect.isawaitable(conninfo):
            conninfo = await conninfo
        if inspect.isawaitable(kwargs):
            kwargs = await kwargs
        return str(conninfo), dict(kwargs)

    async def _run(self, plan: Any, action: str) -> Any:
        pool = await self._ready(action)
        async with pool.connection() as conn:
            return await arun(conn, plan, action)

    async def close(self) -> None:
        """Stop listening for results, send pending wake-ups, then close the pool if the
        client made it; idempotent.

        A pool passed in by the application stays open (and inserts on it
        after ``close`` still work, notifying inline).
        """
        if self._closed:
            return
        self._closed = True
        await self._awaiter.close()
        if self._notifier is not None:
            await self._notifier.stop()
        if self._owned:
            await self._pool.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        owner = "own pool" if self._owned else "borrowed pool"
        state = "closed" if self._closed else "open"
        return f"<drover.AsyncClient {state}, {owner}>"
