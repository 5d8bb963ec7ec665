"""Inserting inside a caller's transaction: the one path behind ``Client.insert_tx``,
``Client.insert_many_tx`` and the Django and SQLAlchemy integrations.

Each caller differs only in how it finds the psycopg connection under what it
was given (a psycopg connection or cursor, a Django alias, a SQLAlchemy
session), so each passes a ``resolve`` function; the order of what happens is
the same for all: the input is validated and encoded first, so bad input is
refused before the connection is touched, then the connection is resolved
(and checked to be in a transaction), then the statements run in that
transaction. drover never commits it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from drover._db import Connection
from drover._db.caller import resolve_connection
from drover._db.graph import job_insert_graph
from drover._db.insert import job_insert, job_insert_many
from drover._db.namespace import DEFAULT, Namespace
from drover._db.unique import insert_one
from drover._insert.encode import encode_batch, encode_insert
from drover._insert.identity import identity_of, needs_identity
from drover._insert.tracing import stamp, stamp_batch
from drover._records import EncodedGraph
from drover.job import InsertItem, InsertOpts, JobArgs, JobRow

__all__ = ["Resolve", "caller", "insert_graph_tx", "insert_many_tx", "insert_tx"]

Resolve = Callable[[], tuple[Connection, bool]]
"""Finds the caller's connection: ``(connection, inside_callers_transaction)``.

The flag is False only where the caller allows autocommit (Django outside
``atomic()``): a batch then runs in a transaction of its own."""


def caller(obj: object, api: str = "insert_tx") -> Resolve:
    """The ``Resolve`` of an object handed to ``api``: a psycopg connection or cursor,
    a Django connection or cursor, a SQLAlchemy connection or session, which must be
    inside a transaction (see ``drover._db.caller.resolve_connection``)."""
    return lambda: (resolve_connection(obj, api), True)


def insert_tx(
    resolve: Resolve,
    args: JobArgs,
    opts: InsertOpts | None,
    *,
    notify: bool,
    members: str | None = None,
    ns: Namespace = DEFAULT,
) -> JobRow:
    """Insert one job through the caller's connection; with ``notify`` it wakes at commit.

    With a unique identity, debounce or throttle (ADR 0031) the job holding
    the identity may come back instead, flagged ``duplicate``. ``members``:
    the trace context to stamp the job with (``drover._insert.tracing``).
    """
    params = encode_insert(args, opts)
    if members:
        params = stamp(params, members)
    if needs_identity(opts):
        assert opts is not None
        identity = identity_of(args, params, opts)
        conn, _ = resolve()
        return insert_one(conn, params, identity, notify=notify, ns=ns)
    conn, _ = resolve()
    return job_insert(conn, params, notify=notify, ns=ns)


def insert_many_tx(
    resolve: Resolve,
    items: Iterable[InsertItem],
    *,
    notify: bool,
    members: str | None = None,
    ns: Namespace = DEFAULT,
) -> list[JobRow]:
    """Insert a batch with COPY through the caller's connection; rows in input order.

    An empty batch makes no round trip (the connection is still resolved and
    checked, so a misuse fails the same way whatever the batch holds).
    ``members``: the trace context to stamp each job with.
    """
    batch = encode_batch(items)
    conn, in_callers_tx = resolve()
    if not batch.params:
        return []
    if members:
        batch = stamp_batch(batch, members)
    return job_insert_many(conn, batch, caller_tx=in_callers_tx, notify=notify, ns=ns)


def insert_graph_tx(
    resolve: Resolve, graph: EncodedGraph, *, notify: bool, ns: Namespace = DEFAULT
) -> tuple[list[JobRow], int | None]:
    """Insert jobs with dependencies (a workflow) through the caller's connection.

    Where the caller allows autocommit (Django outside ``atomic()``), the
    graph gets a transaction of its own: its statements must commit together.
    """
    conn, in_callers_tx = resolve()
    if in_callers_tx:
        return job_insert_graph(conn, graph, notify=notify, ns=ns)
    with conn.transaction():
        return job_insert_graph(conn, graph, notify=notify, ns=ns)
