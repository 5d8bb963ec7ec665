"""Inserts on asyncio: the ``await`` twins of ``drover._db.insert`` and ``drover._db.caller``.

Only the I/O is async here. A single insert sends what ``insert_statement``
builds and reads its answer with ``inserted_row``, as ``job_insert`` does;
every write of more than one statement (a unique insert, a batch, a graph)
is the synchronous path's own plan (``drover._db.plans``), carried out by
``arun`` with ``await`` where ``plans.run`` blocks (ADR 0047). So both paths
make the same decisions and write the same rows. ``translate`` wraps each
``await``: psycopg and pool errors become the same ``drover.DroverError``
subclasses as in synchronous code.

None of these functions commits, rolls back or changes session settings on a
caller's connection. On drover's own (autocommit) pool connections a single
statement is its own transaction, and a batch runs in one ``transaction()``.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self, TypeAlias, TypeVar

import psycopg
from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool

from drover._db.caller import check_transaction
from drover._db.conninfo import check_conninfo, describe_target
from drover._db.errors import redact, translate
from drover._db.graph import GRAPH_ACTION, graph_plan
from drover._db.insert import insert_statement, inserted_row, many_action, many_plan
from drover._db.namespace import DEFAULT, Namespace
from drover._db.plans import ALL, ONE, Atomic, Copy, Execute, Plan, atomic
from drover._db.queries import query
from drover._db.unique import unique_one_plan
from drover._records import EncodedBatch, EncodedGraph, Identity, JobInsertParams
from drover.errors import DatabaseError, InvalidArgument, UnsupportedConnection
from drover.job import JobRow

__all__ = [
    "AsyncConnection",
    "aio_borrow",
    "aio_insert",
    "aio_insert_graph",
    "aio_insert_many",
    "aio_insert_unique",
    "aio_notify_now",
    "aio_open",
    "aio_pool_from",
    "arun",
    "resolve_async_connection",
]

T = TypeVar("T")

AsyncConnection: TypeAlias = psycopg.AsyncConnection[Any]
"""A psycopg async connection, as this module passes it around."""


# --- pools ---------------------------------------------------------------------------------------


def aio_pool_from(
    source: object, *, who: str, max_size: int
) -> tuple[AsyncConnectionPool[Any], bool]:
    """``(pool, owned)``: the caller's ``AsyncConnectionPool`` as is, or a new, unopened one.

    A conninfo string is checked here (a malformed one is a
    ``drover.InvalidArgument``, without its password); the pool opened from
    it hands out autocommit connections and is opened by the first borrow
    (opening needs a running event loop, which ``__init__`` may not have).
    """
    if isinstance(source, str):
        if not source.strip():
            raise InvalidArgument(f"{who} needs a conninfo string or URL; got an empty string")
        try:
            conninfo = check_conninfo(source)
        except ValueError as exc:
            raise InvalidArgument(f"{who}: {exc}") from None
        attempts = _Attempts(describe_target(conninfo))
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            conninfo,
            min_size=1,
            max_size=max_size,
            open=False,
            name="drover-async",
            kwargs={"autocommit": True, "application_name": "drover"},
            configure=_aio_without_prepares,
            connection_class=_recording(attempts),
        )
        _ATTEMPTS[pool] = attempts
        return pool, True
    if isinstance(source, AsyncConnectionPool):
        return source, False
    hint = (
        " (a synchronous ConnectionPool goes to drover.Client)"
        if type(source).__name__ == "ConnectionPool"
        else ""
    )
    raise InvalidArgument(
        f"{who} needs a psycopg_pool.AsyncConnectionPool or a conninfo string, "
        f"not {type(source).__qualname__}{hint}"
    )


async def _aio_without_prepares(conn: AsyncConnection) -> None:
    """Turn prepared statements off on a new connection that goes through a pooler.

    The async form of ``pool.without_prepares`` (ADR 0040): one round trip per
    new connection, comparing the server's process id with the one the
    handshake announced.
    """
    async with conn.cursor(row_factory=tuple_row) as cur:
        await cur.execute(query("pooler_backend_pid"), prepare=False)
        row = await cur.fetchone()
    if row is None or int(row[0]) != conn.info.backend_pid:
        conn.prepare_threshold = None


class _Attempts:
    """How the connection attempts of a pool drover made ended: a refusal, or a success."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.error: BaseException | None = None
        self.connected = False


_ATTEMPTS: weakref.WeakKeyDictionary[AsyncConnectionPool[Any], _Attempts] = (
    weakref.WeakKeyDictionary()
)


def _recording(attempts: _Attempts) -> type[psycopg.AsyncConnection[Any]]:
    class RecordingConnection(psycopg.AsyncConnection[Any]):
        @classmethod
        async def connect(cls, conninfo: str = "", **kwargs: Any) -> Self:
            try:
                conn = await super().connect(conninfo, **kwargs)
            except BaseException as exc:
                attempts.error = exc
                raise
            attempts.connected = True
            return conn

    return RecordingConnection


# How often aio_open looks at how the first connection attempts ended.
_OPEN_SLICE = 0.05


class aio_borrow:
    """A connection of ``pool`` for one ``async with`` block, given back at its end.

    On a connection that is not in autocommit mode (an application's pool)
    the block's transaction is committed on success and rolled back on an
    error, as the pool's own ``connection()`` does. ``timeout`` bounds the
    wait for a connection (default: the pool's); running out, or the pool
    being closed, is a ``drover.DatabaseError``. Errors inside the block are
    the statements' own (each is translated where it runs). A plain class
    rather than ``pool.connection()``: fewer generators per insert on the
    single-insert path (ADR 0034).
    """

    __slots__ = ("_action", "_conn", "_pool", "_timeout")

    def __init__(
        self, pool: AsyncConnectionPool[Any], action: str, *, timeout: float | None = None
    ) -> None:
        self._pool = pool
        self._action = action
        self._timeout = timeout
        self._conn: AsyncConnection | None = None

    async def __aenter__(self) -> AsyncConnection:
        with translate(self._action):
            conn: AsyncConnection = await self._pool.getconn(self._timeout)
        self._conn = conn
        return conn

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        conn = self._conn
        assert conn is not None
        self._conn = None
        try:
            if not conn.autocommit and not conn.closed:
                with translate(self._action):
                    if exc_type is None:
                        await conn.commit()
                    else:
                        await conn.rollback()
        finally:
            await self._pool.putconn(conn)


async def aio_open(pool: AsyncConnectionPool[Any], action: str, *, timeout: float) -> None:
    """Open a pool drover made, waiting up to ``timeout`` s for its first connection.

    A wrong URL or a refused login fails here, as a ``drover.DatabaseError``
    naming the cause (without a password): on a pool drover made, at the
    server's first refusal (a connection limit, a wrong password), in well
    under a second; a pool already open is left as is.
    """
    if not pool.closed:
        return
    attempts = _ATTEMPTS.get(pool)
    try:
        if attempts is None:
            await pool.open(wait=True, timeout=timeout)
            return
        # Fail at the server's first refusal (too many connections, a wrong
        # password), with its reason, rather than after the whole timeout.
        await pool.open(wait=False)
        deadline = time.monotonic() + timeout
        while not attempts.connected:
            if attempts.error is not None:
                reason = redact(str(attempts.error).strip().splitlines()[0])
                await pool.close()
                raise DatabaseError(
                    f"{action}: could not connect to the database at {attempts.target}: {reason}"
                ) from attempts.error
            if time.monotonic() >= deadline:
                await pool.close()
                raise DatabaseError(
                    f"{action}: could not connect (no connection within {timeout:g}s)"
                )
            await asyncio.sleep(_OPEN_SLICE)
    except DatabaseError:
        raise
    except Exception as exc:
        raise DatabaseError(f"{action}: could not connect ({redact(str(exc).strip())})") from exc


# --- the caller's connection ---------------------------------------------------------------------


async def resolve_async_connection(
    obj: object, api: str = "insert_tx", instead: str = "or use client.insert()"
) -> AsyncConnection:
    """The psycopg ``AsyncConnection`` behind ``obj``, checked to be inside a transaction.

    Accepts a psycopg ``AsyncConnection`` or ``AsyncCursor`` and a SQLAlchemy
    ``AsyncSession`` or ``AsyncConnection`` (``postgresql+psycopg://``),
    recognised by their attributes so SQLAlchemy is never imported here. A
    session's ``connection()`` begins its transaction if none is open.
    """
    if isinstance(obj, psycopg.AsyncConnection):
        conn: object = obj
    elif isinstance(obj, psycopg.AsyncCursor):
        conn = obj.connection
    elif isinstance(obj, psycopg.Connection | psycopg.Cursor):
        raise UnsupportedConnection(
            f"{api} is asynchronous and needs an async connection; "
            "a synchronous psycopg connection goes to drover.Client.insert_tx"
        )
    elif hasattr(obj, "sync_session") and callable(getattr(obj, "connection", None)):
        # SQLAlchemy AsyncSession: connection() autobegins and returns an AsyncConnection.
        session: Any = obj
        conn = await _from_async_sqlalchemy(await session.connection(), api)
    elif hasattr(obj, "sync_connection") and callable(getattr(obj, "get_raw_connection", None)):
        conn = await _from_async_sqlalchemy(obj, api)
    else:
        raise UnsupportedConnection(
            f"{api} needs a psycopg AsyncConnection or AsyncCursor, or a SQLAlchemy "
            f"AsyncSession or AsyncConnection; got {type(obj).__module__}.{type(obj).__qualname__}"
        )
    if not isinstance(conn, psycopg.AsyncConnection):
        raise UnsupportedConnection(
            f"{api} needs psycopg 3 underneath; got a "
            f"{type(conn).__module__}.{type(conn).__qualname__} connection "
            "(with SQLAlchemy use a postgresql+psycopg:// URL)"
        )
    check_transaction(conn, api, instead)
    return conn


async def _from_async_sqlalchemy(aconn: Any, api: str) -> object:
    if getattr(aconn, "closed", False):
        raise UnsupportedConnection(f"{api} was given a closed connection")
    raw = await aconn.get_raw_connection()
    return raw.driver_connection


# --- statements ----------------------------------------------------------------------------------


async def aio_insert(
    conn: AsyncConnection, params: JobInsertParams, *, notify: bool, ns: Namespace = DEFAULT
) -> JobRow:
    """Insert one job (``job_insert``'s twin): one statement, the wake-up included when
    ``notify``; ``DuplicateJob`` leaves the transaction usable."""
    statement, values, lean = insert_statement(params, notify=notify, ns=ns)
    with translate(f"insert job kind {params.kind!r}"):
        async with conn.cursor(row_factory=tuple_row) as cur:
            await cur.execute(statement, values)
            row = await cur.fetchone()
    return inserted_row(params, row, lean=lean)


async def aio_insert_unique(
    conn: AsyncConnection,
    params: JobInsertParams,
    identity: Identity,
    *,
    notify: bool,
    ns: Namespace = DEFAULT,
) -> JobRow:
    """Insert one job with a unique identity, debounce or throttle (ADR 0031), or return
    the job holding it (flagged ``duplicate``): ``unique_one_plan``, as the synchronous
    ``insert_one`` runs it."""
    return await arun(
        conn,
        unique_one_plan(params, identity, notify=notify, ns=ns),
        f"insert job kind {params.kind!r}",
    )


async def aio_insert_many(
    conn: AsyncConnection,
    encoded: EncodedBatch,
    *,
    caller_tx: bool,
    notify: bool,
    ns: Namespace = DEFAULT,
) -> list[JobRow]:
    """Insert an encoded batch (``many_plan``, as ``job_insert_many`` runs it), rows in
    input order: COPY straight into ``drover_jobs``, COPY into a staging table under a
    savepoint, or one ``drover_insert_unique`` statement."""
    if not encoded.params:
        return []
    return await arun(
        conn, many_plan(encoded, caller_tx=caller_tx, notify=notify, ns=ns), many_action(encoded)
    )


async def aio_insert_graph(
    conn: AsyncConnection,
    graph: EncodedGraph,
    *,
    own_transaction: bool,
    notify: bool,
    ns: Namespace = DEFAULT,
) -> tuple[list[JobRow], int | None]:
    """Insert jobs with dependencies (``graph_plan``, as ``job_insert_graph`` runs it).

    With ``own_transaction`` (a connection of drover's pool) the statements
    run in a transaction of their own; otherwise in the caller's.
    """
    plan = graph_plan(graph, notify=notify, ns=ns)
    return await arun(conn, atomic(plan) if own_transaction else plan, GRAPH_ACTION)


async def arun(conn: AsyncConnection, plan: Plan[T], action: str) -> T:
    """Carry ``plan`` out on ``conn`` (one cursor): ``drover._db.plans.run`` with ``await``."""
    with translate(action):
        async with conn.cursor(row_factory=tuple_row) as cur:
            return await _drive(conn, cur, plan)


async def _drive(conn: AsyncConnection, cur: psycopg.AsyncCursor[Any], plan: Plan[T]) -> T:
    send = plan.send
    answer: Any = None
    while True:
        try:
            step = send(answer)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        if type(step) is Execute:
            await cur.execute(step.statement, step.params)
            fetch = step.fetch
            if fetch == ONE:
                answer = await cur.fetchone()
            elif fetch == ALL:
                answer = await cur.fetchall()
            else:
                answer = None
        elif type(step) is Copy:
            async with cur.copy(step.statement) as copy:
                if step.rows:
                    for row in step.data:
                        await copy.write_row(row)
                else:
                    for text in step.data:
                        await copy.write(text)
            answer = None
        else:
            assert type(step) is Atomic
            async with conn.transaction():
                answer = await _drive(conn, cur, step.plan)


async def aio_notify_now(
    conn: AsyncConnection, queues: Sequence[str], *, ns: Namespace = DEFAULT
) -> None:
    """Notify ``queues`` in a transaction of their own (``notify_queues_now``); ``conn``
    must be in autocommit mode, or this runs in a transaction committed by the borrow."""
    if not queues:
        return
    with translate("notify listeners"):
        async with conn.cursor() as cur:
            await cur.execute(query("notify_queues_now", ns), {"queues": list(queues)})
