"""Connections: drover's own pool, and the caller's connection for ``insert_tx``.

``resolve_connection`` accepts psycopg objects directly and recognises Django
and SQLAlchemy wrappers by their attributes, so neither framework is ever
imported by drover.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, TypeAlias

import psycopg
from psycopg import pq
from psycopg_pool import ConnectionPool

from drover._db.errors import translate
from drover.errors import InvalidArgument, NotInTransaction, UnsupportedConnection

__all__ = [
    "Connection",
    "ConnectionPool",
    "PoolOrConninfo",
    "borrow",
    "check_conninfo",
    "describe_target",
    "open_pool",
    "pool_from",
    "resolve_connection",
]

Connection: TypeAlias = psycopg.Connection[Any]
PoolOrConninfo: TypeAlias = "ConnectionPool[Any] | str"


def _autocommit(conn: Connection) -> None:
    # drover's own connections run single statements in autocommit (one round
    # trip per insert) and open explicit transactions where several statements
    # must be atomic.
    conn.autocommit = True


def open_pool(conninfo: str, *, max_size: int = 10, name: str = "drover") -> ConnectionPool[Any]:
    """Open a pool that drover owns (and will close)."""
    return ConnectionPool(
        conninfo,
        min_size=1,
        max_size=max(1, max_size),
        configure=_autocommit,
        open=True,
        name=name,
        timeout=30.0,
    )


@contextlib.contextmanager
def borrow(
    source: PoolOrConninfo | Connection, action: str, *, timeout: float | None = None
) -> Iterator[Connection]:
    """Yield a connection from a pool, a conninfo string, or an open connection.

    A connection opened from a conninfo string is closed afterwards; a pool's
    connection goes back to the pool (committed on success, rolled back on an
    error, by the pool's own context manager). ``timeout`` bounds the wait for
    a pool connection (default: the pool's own).
    """
    if isinstance(source, psycopg.Connection):
        yield source
    elif isinstance(source, ConnectionPool):
        with translate(action), source.connection(timeout=timeout) as conn:
            yield conn
    elif isinstance(source, str):
        with translate(action):
            conn = psycopg.connect(source, autocommit=True)
        with conn:
            yield conn
    else:
        raise TypeError(
            "expected a psycopg_pool.ConnectionPool or a conninfo string, "
            f"not {type(source).__name__}"
        )


def _from_framework(obj: Any) -> Any:
    """Unwrap a Django or SQLAlchemy object to its DB-API connection, or return None."""
    # Django CursorWrapper: .db is the DatabaseWrapper, .cursor the raw psycopg cursor.
    if hasattr(obj, "db") and hasattr(obj, "cursor") and not callable(obj.cursor):
        return getattr(obj.cursor, "connection", None)
    # Django DatabaseWrapper: connected lazily; .connection is None until then.
    if hasattr(obj, "ensure_connection") and hasattr(obj, "vendor"):
        if obj.vendor != "postgresql":
            raise UnsupportedConnection(
                f"insert_tx needs a PostgreSQL database; this Django connection is {obj.vendor!r}"
            )
        obj.ensure_connection()
        return obj.connection
    # SQLAlchemy Session / scoped_session: .connection() autobegins the transaction.
    if hasattr(obj, "get_bind") and callable(getattr(obj, "connection", None)):
        return _from_framework(obj.connection())
    # SQLAlchemy Connection: .connection is the pool proxy holding the driver connection.
    proxy = getattr(obj, "connection", None)
    if proxy is not None and hasattr(proxy, "driver_connection"):
        return proxy.driver_connection
    return None


def resolve_connection(obj: object) -> Connection:
    """The psycopg connection behind ``obj``, checked to be inside a transaction.

    Accepts a psycopg ``Connection`` or ``Cursor``, a Django connection or
    cursor wrapper, and a SQLAlchemy ``Connection`` or ``Session``.
    """
    if isinstance(obj, psycopg.Connection):
        conn: object = obj
    elif isinstance(obj, psycopg.Cursor):
        conn = obj.connection
    elif isinstance(obj, psycopg.AsyncConnection | psycopg.AsyncCursor):
        raise UnsupportedConnection(
            "insert_tx is synchronous and cannot use an async psycopg connection"
        )
    else:
        conn = _from_framework(obj)
        if conn is None:
            raise UnsupportedConnection(
                "insert_tx needs a psycopg Connection or Cursor, a Django connection or cursor, "
                f"or a SQLAlchemy Connection or Session; got {type(obj).__module__}."
                f"{type(obj).__qualname__}"
            )
    if not isinstance(conn, psycopg.Connection):
        raise UnsupportedConnection(
            "insert_tx needs psycopg 3 underneath; got a "
            f"{type(conn).__module__}.{type(conn).__qualname__} connection "
            "(with SQLAlchemy use a postgresql+psycopg:// URL)"
        )
    if conn.closed:
        raise UnsupportedConnection("insert_tx was given a closed connection")
    if conn.autocommit:
        raise NotInTransaction(
            "insert_tx needs an open transaction, but the connection is in autocommit mode: "
            "wrap the call in `with conn.transaction():`, Django's transaction.atomic() or "
            "SQLAlchemy's session.begin(), or use client.insert()"
        )
    if conn.info.transaction_status == pq.TransactionStatus.INERROR:
        raise NotInTransaction(
            "insert_tx was given a connection whose transaction has already failed; "
            "roll it back first"
        )
    return conn


def check_conninfo(conninfo: str, *, connect_timeout: int = 5) -> str:
    """Validate a conninfo string or URL and give it a connect timeout if it has none.

    Raises ``ValueError`` (password-free message) when it cannot be parsed.
    """
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        # libpq's message quotes the offending text, which may be the password.
        raise ValueError(
            "the database URL cannot be parsed: check its syntax, parameter names and "
            "percent-encoding"
        ) from None
    if "connect_timeout" in params:
        return conninfo
    return psycopg.conninfo.make_conninfo(conninfo, connect_timeout=connect_timeout)


def describe_target(conninfo: str) -> str:
    """``host:port/dbname`` of a conninfo string, never its password."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "the database"
    host = str(params.get("host") or "localhost")
    port = str(params.get("port") or "5432")
    return f"{host}:{port}/{params.get('dbname') or ''}"


def pool_from(source: object, *, who: str, max_size: int) -> tuple[ConnectionPool[Any], bool]:
    """``(pool, owned)``: the caller's pool as is, or a new one opened from a conninfo string."""
    if isinstance(source, str):
        if not source.strip():
            raise InvalidArgument(f"{who} needs a conninfo string or URL; got an empty string")
        return open_pool(source, max_size=max_size), True
    if isinstance(source, ConnectionPool):
        return source, False
    raise InvalidArgument(
        f"{who} needs a psycopg_pool.ConnectionPool or a conninfo string, "
        f"not {type(source).__qualname__}"
    )
