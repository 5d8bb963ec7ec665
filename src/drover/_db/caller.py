"""The caller's connection: what ``insert_tx`` and ``complete_tx`` write through.

A caller's connection is not drover's: drover runs its statements in the
caller's open transaction and never commits, rolls back or changes session
settings. ``resolve_connection`` accepts psycopg objects directly and
recognises Django and SQLAlchemy wrappers by their attributes, so neither
framework is ever imported here.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import pq

from drover._db import Connection
from drover.errors import NotInTransaction, UnsupportedConnection

__all__ = [
    "Connection",
    "check_transaction",
    "resolve_connection",
    "transaction_open",
]

_OPEN = (
    pq.TransactionStatus.INTRANS,
    pq.TransactionStatus.INERROR,
    pq.TransactionStatus.ACTIVE,
)


def _from_framework(obj: Any, api: str = "insert_tx") -> Any:
    """Unwrap a Django or SQLAlchemy object to its DB-API connection, or return None."""
    # Django CursorWrapper: .db is the DatabaseWrapper, .cursor the raw psycopg cursor.
    if hasattr(obj, "db") and hasattr(obj, "cursor") and not callable(obj.cursor):
        return getattr(obj.cursor, "connection", None)
    # Django DatabaseWrapper: connected lazily; .connection is None until then.
    if hasattr(obj, "ensure_connection") and hasattr(obj, "vendor"):
        if obj.vendor != "postgresql":
            raise UnsupportedConnection(
                f"{api} needs a PostgreSQL database; this Django connection is {obj.vendor!r}"
            )
        obj.ensure_connection()
        return obj.connection
    # SQLAlchemy Session / scoped_session: .connection() autobegins the transaction.
    if hasattr(obj, "get_bind") and callable(getattr(obj, "connection", None)):
        return _from_framework(obj.connection(), api)
    # SQLAlchemy Connection: .connection is the pool proxy holding the driver connection.
    proxy = getattr(obj, "connection", None)
    if proxy is not None and hasattr(proxy, "driver_connection"):
        return proxy.driver_connection
    return None


def resolve_connection(
    obj: object, api: str = "insert_tx", instead: str = "or use client.insert()"
) -> Connection:
    """The psycopg connection behind ``obj``, checked to be inside a transaction.

    ``api`` names the caller in messages; ``instead`` ends the autocommit
    message with the alternative.

    Accepts a psycopg ``Connection`` or ``Cursor``, a Django connection or
    cursor wrapper, and a SQLAlchemy ``Connection`` or ``Session``.
    """
    if isinstance(obj, psycopg.Connection):
        conn: object = obj
    elif isinstance(obj, psycopg.Cursor):
        conn = obj.connection
    elif isinstance(obj, psycopg.AsyncConnection | psycopg.AsyncCursor):
        raise UnsupportedConnection(
            f"{api} is synchronous and cannot use an async psycopg connection"
        )
    else:
        conn = _from_framework(obj, api)
        if conn is None:
            raise UnsupportedConnection(
                f"{api} needs a psycopg Connection or Cursor, a Django connection or cursor, "
                f"or a SQLAlchemy Connection or Session; got {type(obj).__module__}."
                f"{type(obj).__qualname__}"
            )
    if not isinstance(conn, psycopg.Connection):
        raise UnsupportedConnection(
            f"{api} needs psycopg 3 underneath; got a "
            f"{type(conn).__module__}.{type(conn).__qualname__} connection "
            "(with SQLAlchemy use a postgresql+psycopg:// URL)"
        )
    check_transaction(conn, api, instead)
    return conn


def check_transaction(
    conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], api: str, instead: str
) -> None:
    """Refuse a closed connection, one in autocommit outside a transaction, or a failed one.

    Shared by the synchronous and the asyncio callers' paths (``drover._db.aio``).
    """
    if conn.closed:
        raise UnsupportedConnection(f"{api} was given a closed connection")
    # An autocommit connection is fine inside an explicit block (psycopg's
    # conn.transaction() issues BEGIN): only one with no transaction open has
    # nothing to join. A non-autocommit connection begins one implicitly.
    if conn.autocommit and conn.info.transaction_status not in (
        pq.TransactionStatus.INTRANS,
        pq.TransactionStatus.INERROR,  # refused below with its own message
    ):
        raise NotInTransaction(
            f"{api} needs an open transaction, but the connection is in autocommit mode: "
            "wrap the call in `with conn.transaction():`, Django's transaction.atomic() or "
            f"SQLAlchemy's session.begin(), {instead}"
        )
    if conn.info.transaction_status == pq.TransactionStatus.INERROR:
        raise NotInTransaction(
            f"{api} was given a connection whose transaction has already failed; roll it back first"
        )


def transaction_open(conn: object) -> bool:
    """True while the psycopg connection ``conn`` is inside a transaction (or a statement)."""
    info = getattr(conn, "info", None)
    if info is None or getattr(conn, "closed", True):
        return False
    return info.transaction_status in _OPEN
