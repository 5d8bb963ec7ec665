"""``AsyncClient``: drover's inserts for asyncio applications (FastAPI, Starlette, aiohttp).

A facade like ``Client``: it validates input with the same pure encoder,
runs the same named statements through ``drover._db.aio`` on a psycopg
``AsyncConnectionPool`` (its own or the application's), and announces the
jobs it commits itself through an asyncio notifier task. It only inserts:
jobs are run by a ``drover.Client`` (``drover worker``), which is where
workers, concurrency and the other settings of ``Config`` apply.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from types import TracebackType
from typing import Any, Self

from psycopg_pool import AsyncConnectionPool

from drover._db.aio import (
    aio_borrow,
    aio_insert,
    aio_insert_many,
    aio_insert_unique,
    aio_open,
    aio_pool_from,
)
from drover._db.namespace import namespace_for
from drover._insert import aio_tx
from drover._insert.aio_notifier import AsyncNotifier
from drover._insert.encode import encode_batch, encode_insert
from drover._insert.graph import has_dependencies
from drover._insert.identity import identity_of, needs_identity
from drover._insert.tracing import insert_tracer_of, stamp, stamp_batch, trace_members
from drover.config import Config
from drover.errors import DatabaseError, InvalidArgument
from drover.job import InsertItem, InsertOpts, JobArgs, JobRow
from drover.workflows import Chain, Group

__all__ = ["AsyncClient"]

# How long the first insert on the client's own pool waits for a connection.
_OPEN_TIMEOUT = 10.0

_NO_GRAPHS = (
    "{api} does not insert workflows or jobs with InsertOpts.depends_on yet; "
    "insert them with drover.Client (from a thread: await asyncio.to_thread(client.insert, ...))"
)


def _refuse_graphs(args: object, opts: object, api: str) -> None:
    if isinstance(args, Chain | Group) or has_dependencies(opts):
        raise InvalidArgument(_NO_GRAPHS.format(api=api))


def _listed(items: Iterable[InsertItem], api: str) -> Any:
    # Items read once; a batch with a dependent item is refused as a whole.
    # Anything that is not a list of items is left for the encoder to name.
    if isinstance(items, JobArgs | str | bytes) or not isinstance(items, Iterable):
        return items
    listed = items if isinstance(items, list) else list(items)
    for item in listed:
        if isinstance(item, tuple) and len(item) == 2:
            _refuse_graphs(item[0], item[1], api)
    return listed


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
    refused with ``drover.InvalidArgument``: insert them with ``Client``.

    Tracing: as ``Client``'s, with a ``drover.contrib.otel.TracingMiddleware``
    in ``config.middleware`` (the span is current in the calling task).
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
        # None unless a Config.middleware entry also traces inserts (ADR 0042).
        self._tracer = insert_tracer_of(config.middleware)

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

    async def insert(self, args: JobArgs, opts: InsertOpts | None = None) -> JobRow:
        """Insert one job, committed when this returns, and return the stored row.

        As ``Client.insert``: the same validation (before any connection is
        borrowed), the same statement on a connection of the pool, and the
        same rows (``InsertOpts`` with a time, priority, unique key, tags and
        metadata; ``unique``, ``debounce`` and ``throttle`` may return the
        holding job flagged ``row.duplicate``).

        Raises:
            drover.InvalidJobArgs: ``args`` is not a JobArgs or cannot be
                encoded (nothing was written).
            drover.InvalidInsertOpts: bad options (nothing was written).
            drover.InvalidArgument: a workflow or ``depends_on`` (see the class).
            drover.DuplicateJob: the unique key is held by a waiting or running job.
            drover.DatabaseError: the database refused or could not be reached.
        """
        _refuse_graphs(args, opts, "AsyncClient.insert")
        tracer = self._tracer
        if tracer is None:
            return await self._insert(args, opts, None)
        with tracer.insert_span("insert") as span:
            row = await self._insert(args, opts, trace_members(span.carrier))
            span.inserted((row,))
            return row

    async def _insert(self, args: JobArgs, opts: InsertOpts | None, members: str | None) -> JobRow:
        params = encode_insert(args, opts)
        if members:
            params = stamp(params, members)
        identity = None
        if needs_identity(opts):
            assert opts is not None
            identity = identity_of(args, params, opts)
        pool = await self._ready("insert job")
        async with aio_borrow(pool, "insert job") as conn:
            if identity is not None:
                row = await aio_insert_unique(conn, params, identity, notify=False, ns=self._ns)
            else:
                row = await aio_insert(conn, params, notify=False, ns=self._ns)
        if not row.duplicate:
            await self._committed((row.queue,))
        return row

    async def insert_many(self, items: Iterable[InsertItem]) -> list[JobRow]:
        """Insert a batch atomically with COPY and return the rows in input order.

        As ``Client.insert_many``: every item is validated and encoded before
        anything is sent; a bad item or a unique-key collision writes
        nothing; an empty batch makes no round trip; the rows are committed
        when this returns, and each queue gets one wake-up after the commit.

        Raises:
            drover.InvalidJobArgs: an item is invalid (the message names its index).
            drover.InvalidArgument: an item has ``depends_on``.
            drover.DuplicateJob: an item's unique key is taken.
            drover.DatabaseError: the database refused or could not be reached.
        """
        tracer = self._tracer
        if tracer is None:
            return await self._insert_many(items, None)
        with tracer.insert_span("insert_many") as span:
            rows = await self._insert_many(items, trace_members(span.carrier))
            span.inserted(rows)
            return rows

    async def _insert_many(self, items: Iterable[InsertItem], members: str | None) -> list[JobRow]:
        batch = encode_batch(_listed(items, "AsyncClient.insert_many"))
        if not batch.params:
            return []
        if members:
            batch = stamp_batch(batch, members)
        pool = await self._ready("insert jobs")
        async with aio_borrow(pool, "insert jobs") as conn:
            rows = await aio_insert_many(conn, batch, caller_tx=False, notify=False, ns=self._ns)
        await self._committed(batch.queues)
        return rows

    async def insert_tx(
        self, conn: object, args: JobArgs, opts: InsertOpts | None = None
    ) -> JobRow:
        """Insert one job inside the caller's open async transaction.

        The job exists if and only if that transaction commits. ``conn`` is a
        psycopg ``AsyncConnection`` or ``AsyncCursor``, or a SQLAlchemy
        ``AsyncSession`` or ``AsyncConnection`` (``postgresql+psycopg://``).
        drover runs its statement on that connection, never commits or rolls
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
        _refuse_graphs(args, opts, "AsyncClient.insert_tx")
        notify = self._config.notify
        tracer = self._tracer
        if tracer is None:
            return await aio_tx.insert_tx(conn, args, opts, notify=notify, ns=self._ns)
        with tracer.insert_span("insert_tx") as span:
            row = await aio_tx.insert_tx(
                conn, args, opts, notify=notify, members=trace_members(span.carrier), ns=self._ns
            )
            span.inserted((row,))
            return row

    async def insert_many_tx(self, conn: object, items: Iterable[InsertItem]) -> list[JobRow]:
        """Insert a batch with COPY inside the caller's open async transaction (see ``insert_tx``).

        As ``Client.insert_many_tx``: a batch with unique keys runs under a
        savepoint, so a collision writes nothing and leaves the transaction
        usable; the wake-ups are delivered only if the transaction commits.
        """
        listed = _listed(items, "AsyncClient.insert_many_tx")
        notify = self._config.notify
        tracer = self._tracer
        if tracer is None:
            return await aio_tx.insert_many_tx(conn, listed, notify=notify, ns=self._ns)
        with tracer.insert_span("insert_many_tx") as span:
            rows = await aio_tx.insert_many_tx(
                conn, listed, notify=notify, members=trace_members(span.carrier), ns=self._ns
            )
            span.inserted(rows)
            return rows

    async def _committed(self, queues: Collection[str]) -> None:
        if self._notifier is not None:
            await self._notifier.committed(queues)

    async def close(self) -> None:
        """Send pending wake-ups, then close the pool if the client made it; idempotent.

        A pool passed in by the application stays open (and inserts on it
        after ``close`` still work, notifying inline).
        """
        if self._closed:
            return
        self._closed = True
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
