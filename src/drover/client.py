"""The Client facade: owns the connection pool and offers the insert API.

The client validates input, picks a connection and delegates to the database
layer; it runs no SQL of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from drover._db import store
from drover._db.connections import ConnectionPool, borrow, open_pool, resolve_connection
from drover._encode import encode_insert
from drover.errors import InvalidJobArgs
from drover.job import InsertOpts, JobArgs, JobRow

__all__ = ["Client", "InsertItem"]

InsertItem = JobArgs | tuple[JobArgs, InsertOpts | None]
"""An element of ``insert_many``: args alone, or ``(args, opts)``."""


def _encode_batch(items: object) -> list[store.JobInsertParams]:
    if isinstance(items, JobArgs | str | bytes) or not isinstance(items, Iterable):
        raise InvalidJobArgs(
            f"insert_many needs a list of JobArgs or (JobArgs, InsertOpts) pairs, "
            f"not {type(items).__qualname__}"
        )
    encoded = []
    for index, item in enumerate(items):
        if isinstance(item, tuple):
            if len(item) != 2:
                raise InvalidJobArgs(
                    f"item {index}: expected (JobArgs, InsertOpts), got a {len(item)}-tuple"
                )
            args, opts = item
        else:
            args, opts = item, None
        encoded.append(encode_insert(args, opts, where=f"item {index}: "))
    return encoded


class Client:
    """drover's entry point: inserts jobs (and, once started, runs them).

    ``pool_or_conninfo`` is either a ``psycopg_pool.ConnectionPool`` that the
    application owns (drover borrows connections and never closes it) or a
    conninfo string / URL, from which the client opens its own pool and closes
    it in :meth:`close`.

    All methods are thread-safe. Each non-transactional insert borrows one pool
    connection for one round trip (``insert_many``: a constant three), so a
    client can be shared by every thread of a web application. When no pool
    connection frees up within the pool's timeout, the insert raises
    :class:`drover.DatabaseError`.
    """

    __module__ = "drover"

    def __init__(self, pool_or_conninfo: ConnectionPool[Any] | str) -> None:
        if isinstance(pool_or_conninfo, str):
            if not pool_or_conninfo.strip():
                raise ValueError("Client needs a conninfo string or URL; got an empty string")
            self._pool: ConnectionPool[Any] = open_pool(pool_or_conninfo)
            self._owns_pool = True
        elif isinstance(pool_or_conninfo, ConnectionPool):
            self._pool = pool_or_conninfo
            self._owns_pool = False
        else:
            raise TypeError(
                "Client needs a psycopg_pool.ConnectionPool or a conninfo string, "
                f"not {type(pool_or_conninfo).__qualname__}"
            )
        self._close_lock = threading.Lock()
        self._closed = False

    @property
    def pool(self) -> ConnectionPool[Any]:
        """The connection pool the client uses (its own, or the one it was given)."""
        return self._pool

    def insert(self, args: JobArgs, opts: InsertOpts | None = None) -> JobRow:
        """Insert one job in its own transaction and return the stored row.

        The database clock decides whether the job is ``available`` or
        ``scheduled`` (see :class:`InsertOpts`). The job is committed, and so
        visible to workers, when this returns.

        Raises:
            drover.InvalidJobArgs: ``args`` is not a JobArgs or cannot be encoded
                (nothing was written).
            drover.DuplicateJob: the unique key is held by a waiting or running job.
            drover.DatabaseError: the database refused or could not be reached.
        """
        params = encode_insert(args, opts)
        with borrow(self._pool, "insert job") as conn:
            return store.job_insert(conn, params)

    def insert_tx(self, conn: object, args: JobArgs, opts: InsertOpts | None = None) -> JobRow:
        """Insert one job inside the caller's open transaction.

        The job exists if and only if that transaction commits; until then no
        worker can see it. ``conn`` is a psycopg ``Connection`` or ``Cursor``, a
        Django connection or cursor wrapper, or a SQLAlchemy ``Connection`` or
        ``Session`` (``postgresql+psycopg://``). drover opens its own cursor,
        never commits or rolls back, and changes no session settings. A
        duplicate unique key raises :class:`drover.DuplicateJob` and leaves the
        caller's transaction usable.

        Raises:
            drover.InvalidJobArgs: bad args, checked before ``conn`` is used.
            drover.NotInTransaction: the connection is in autocommit mode (for
                Django: outside ``transaction.atomic()``), or its transaction
                has already failed.
            drover.UnsupportedConnection: ``conn`` is not one of the above.
            drover.DuplicateJob: the unique key is held by a waiting or running job.
            drover.DatabaseError: the statement failed; the caller's transaction
                is then aborted, as with any failed statement.
        """
        params = encode_insert(args, opts)
        return store.job_insert(resolve_connection(conn), params)

    def insert_many(self, items: Iterable[InsertItem]) -> list[JobRow]:
        """Insert a batch atomically with COPY and return the rows in input order.

        ``items`` holds ``JobArgs`` or ``(JobArgs, InsertOpts)`` pairs. Every item
        is validated before anything is written; a bad item or a unique-key
        collision (with an existing job, or between two items) writes nothing.
        An empty batch makes no round trip.

        Raises:
            drover.InvalidJobArgs: an item is invalid (the message names its index).
            drover.DuplicateJob: an item's unique key is taken.
            drover.DatabaseError: the database refused or could not be reached.
        """
        batch = _encode_batch(items)
        if not batch:
            return []
        with borrow(self._pool, "insert jobs") as conn:
            return store.job_insert_many(conn, batch, caller_tx=False)

    def insert_many_tx(self, conn: object, items: Iterable[InsertItem]) -> list[JobRow]:
        """Insert a batch inside the caller's open transaction (see :meth:`insert_tx`).

        The batch runs under a savepoint, so a unique-key collision writes
        nothing and leaves the caller's transaction usable. Several calls in one
        transaction are fine.
        """
        batch = _encode_batch(items)
        resolved = resolve_connection(conn)
        if not batch:
            return []
        return store.job_insert_many(resolved, batch, caller_tx=True)

    def get_job(self, job_id: int) -> JobRow | None:
        """The job's current row, or ``None`` when no job has that id."""
        if isinstance(job_id, bool) or not isinstance(job_id, int):
            raise TypeError(f"job_id must be an int, not {type(job_id).__qualname__}")
        with borrow(self._pool, "get job") as conn:
            return store.job_get(conn, job_id)

    def close(self) -> None:
        """Close the pool if the client opened it; idempotent.

        A pool passed in by the application is left open. Inserts after
        ``close`` fail with :class:`drover.DatabaseError`.
        """
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        if self._owns_pool:
            self._pool.close()

    def __repr__(self) -> str:
        owner = "own pool" if self._owns_pool else "borrowed pool"
        return f"<drover.Client {owner}{' closed' if self._closed else ''}>"
