"""The writers of ``AsyncClient``: its own async pool, and the caller's asyncio transaction.

The asyncio counterparts of ``Client``'s writer and of ``drover._insert.tx``:
the funnel (``drover._insert.funnel``) has already encoded the call and
fixed its route; these carry the route out with ``await`` on an
``AsyncConnection``, through the same statements and plans as the
synchronous path (``drover._db.aio``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from typing import Any

from psycopg_pool import AsyncConnectionPool

from drover._db.aio import (
    aio_borrow,
    aio_insert,
    aio_insert_graph,
    aio_insert_many,
    aio_insert_unique,
    resolve_async_connection,
)
from drover._db.namespace import DEFAULT, Namespace
from drover._insert.funnel import MANY, ONE, UNIQUE, Prepared
from drover.job import JobRow

__all__ = ["AsyncCallerWriter", "AsyncOwnWriter"]

_ACTIONS = ("insert job", "insert job", "insert jobs", "insert jobs with dependencies")


class AsyncOwnWriter:
    """Writes a prepared insert in a transaction of its own, on a connection of ``pool()``.

    ``committed(queues)`` is awaited after the commit of a job, a batch or a
    unique insert that inserted (the wake-ups, sent after the commit); a
    graph queues its wake-ups in its own transaction when ``notify``.
    """

    __slots__ = ("_committed", "_notify", "_ns", "_pool")

    def __init__(
        self,
        pool: Callable[[str], Awaitable[AsyncConnectionPool[Any]]],
        committed: Callable[[Collection[str]], Awaitable[None]],
        *,
        notify: bool,
        ns: Namespace = DEFAULT,
    ) -> None:
        self._pool = pool
        self._committed = committed
        self._notify = notify
        self._ns = ns

    async def __call__(self, prepared: Prepared) -> list[JobRow]:
        route, payload, ns = prepared.route, prepared.payload, self._ns
        if route == MANY and not payload.params:
            return []  # no round trip
        action = _ACTIONS[route]
        pool = await self._pool(action)
        async with aio_borrow(pool, action) as conn:
            if route == ONE:
                rows = [await aio_insert(conn, payload, notify=False, ns=ns)]
            elif route == UNIQUE:
                rows = [await aio_insert_unique(conn, *payload, notify=False, ns=ns)]
            elif route == MANY:
                rows = await aio_insert_many(conn, payload, caller_tx=False, notify=False, ns=ns)
            else:
                rows, _ = await aio_insert_graph(
                    conn, payload, own_transaction=True, notify=self._notify, ns=ns
                )
                return rows
        if route == MANY:
            await self._committed(payload.queues)
        elif not rows[0].duplicate:
            await self._committed((rows[0].queue,))
        return rows


class AsyncCallerWriter:
    """Writes a prepared insert on the caller's async connection, in its transaction.

    ``conn`` is what the caller handed over (``resolve_async_connection``
    finds and checks the psycopg ``AsyncConnection`` under it). ``notify``:
    queue each job's wake-up in the transaction, delivered if it commits. A
    batch with unique keys runs under a savepoint; an empty batch makes no
    round trip once the connection is checked.
    """

    __slots__ = ("_conn", "_notify", "_ns")

    def __init__(self, conn: object, *, notify: bool, ns: Namespace = DEFAULT) -> None:
        self._conn = conn
        self._notify = notify
        self._ns = ns

    async def __call__(self, prepared: Prepared) -> list[JobRow]:
        conn = await resolve_async_connection(self._conn)
        route, payload, notify, ns = prepared.route, prepared.payload, self._notify, self._ns
        if route == ONE:
            return [await aio_insert(conn, payload, notify=notify, ns=ns)]
        if route == UNIQUE:
            return [await aio_insert_unique(conn, *payload, notify=notify, ns=ns)]
        if route == MANY:
            return await aio_insert_many(conn, payload, caller_tx=True, notify=notify, ns=ns)
        rows, _ = await aio_insert_graph(conn, payload, own_transaction=False, notify=notify, ns=ns)
        return rows
