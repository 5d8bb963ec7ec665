"""The writer for inserts inside a caller's transaction: behind ``Client.insert_tx``,
``Client.insert_many_tx`` and the Django and SQLAlchemy helpers.

Each caller differs only in how it finds the psycopg connection under what it
was given (a psycopg connection or cursor, a Django alias, a SQLAlchemy
session), so each passes a ``resolve`` function. The order is the funnel's
(``drover._insert.funnel``): the input is validated and encoded first, so bad
input is refused before the connection is touched; then the connection is
resolved (and checked to be in a transaction) by ``CallerWriter``; then the
route's statements run in that transaction. drover never commits it, and the
wake-ups are queued inside it, so listeners hear of the jobs only if it
commits.
"""

from __future__ import annotations

from collections.abc import Callable

from drover._db import Connection
from drover._db.caller import resolve_connection
from drover._db.graph import job_insert_graph
from drover._db.insert import job_insert, job_insert_many
from drover._db.namespace import DEFAULT, Namespace
from drover._db.unique import insert_one
from drover._insert.funnel import MANY, ONE, UNIQUE, Prepared
from drover.job import JobRow

__all__ = ["CallerWriter", "Resolve", "caller"]

Resolve = Callable[[], tuple[Connection, bool]]
"""Finds the caller's connection: ``(connection, inside_callers_transaction)``.

The flag is False only where the caller allows autocommit (Django outside
``atomic()``): a batch or a graph then runs in a transaction of its own."""


def caller(obj: object, api: str = "insert_tx") -> Resolve:
    """The ``Resolve`` of an object handed to ``api``: a psycopg connection or cursor,
    a Django connection or cursor, a SQLAlchemy connection or session, which must be
    inside a transaction (see ``drover._db.caller.resolve_connection``)."""
    return lambda: (resolve_connection(obj, api), True)


class CallerWriter:
    """Writes a prepared insert on the caller's connection (a funnel writer).

    ``notify``: queue each job's wake-up in the transaction, delivered if it
    commits. A batch with unique keys runs under a savepoint, so a collision
    writes nothing and leaves the transaction usable; an empty batch makes no
    round trip (the connection is still resolved and checked, so a misuse
    fails the same way whatever the batch holds).
    """

    __slots__ = ("_conn", "_notify", "_ns", "_resolve")

    def __init__(
        self,
        resolve: Resolve | None = None,
        *,
        conn: object = None,
        notify: bool,
        ns: Namespace = DEFAULT,
    ) -> None:
        # Either resolve, or conn: what was handed to insert_tx (the common
        # case, resolved without a closure per call).
        self._resolve = resolve
        self._conn = conn
        self._notify = notify
        self._ns = ns

    def __call__(self, prepared: Prepared) -> list[JobRow]:
        if self._resolve is None:
            conn, in_callers_tx = resolve_connection(self._conn, "insert_tx"), True
        else:
            conn, in_callers_tx = self._resolve()
        route, payload, notify, ns = prepared.route, prepared.payload, self._notify, self._ns
        if route == ONE:
            return [job_insert(conn, payload, notify=notify, ns=ns)]
        if route == UNIQUE:
            return [insert_one(conn, payload[0], payload[1], notify=notify, ns=ns)]
        if route == MANY:
            return job_insert_many(conn, payload, caller_tx=in_callers_tx, notify=notify, ns=ns)
        # Where the caller allows autocommit, the graph's statements get a
        # transaction of their own: they must commit together.
        rows, _ = job_insert_graph(
            conn, payload, notify=notify, own_transaction=not in_callers_tx, ns=ns
        )
        return rows
