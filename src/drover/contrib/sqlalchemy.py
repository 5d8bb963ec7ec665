"""Enqueue inside a SQLAlchemy 2 transaction (Flask-SQLAlchemy included).

The job is written on the session's (or connection's) own database connection,
in its open transaction: it exists if and only if that transaction commits.
Use a ``postgresql+psycopg://`` URL, so the driver is psycopg 3.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy.engine import Connection as SAConnection
from sqlalchemy.orm import Session, scoped_session

from drover._db.namespace import namespace_for
from drover._insert import tx
from drover._insert.funnel import prepare_many, prepare_one, through
from drover.errors import UnsupportedConnection
from drover.insert_middleware import InsertMiddleware, checked_insert_chain
from drover.job import InsertItem, InsertOpts, Job, JobArgs, JobRow
from drover.middleware import Middleware

__all__ = ["complete", "insert", "insert_many"]


def _driver(target: object) -> Any:
    """The driver (psycopg) connection under ``target``, with a SQLAlchemy transaction open."""
    if isinstance(target, Session | scoped_session):
        sa_conn = target.connection()  # autobegins the session's transaction
    elif isinstance(target, SAConnection):
        if not target.in_transaction():
            # Begin it the way executing any statement would (2.0 autobegin), so
            # the caller's commit() commits the job; without it SQLAlchemy would
            # not know a transaction is open and commit() would do nothing.
            target.begin()
        sa_conn = target
    else:
        raise UnsupportedConnection(
            "drover.contrib.sqlalchemy needs a SQLAlchemy Session, scoped_session or Connection, "
            f"not {type(target).__module__}.{type(target).__qualname__}"
        )
    return sa_conn.connection.driver_connection


def insert(
    session_or_connection: Session | scoped_session[Any] | SAConnection,
    args: JobArgs,
    opts: InsertOpts | None = None,
    *,
    notify: bool = True,
    schema: str | None = None,
    middleware: Sequence[Middleware | InsertMiddleware] = (),
) -> JobRow:
    """Insert one job in the session's (or connection's) transaction; return the row.

    Nothing is committed here: the job commits or rolls back with the caller's
    transaction, nested savepoints (``begin_nested()``) included. A duplicate
    unique key raises ``drover.DuplicateJob`` and leaves the transaction
    usable. With ``notify`` (the default) listening workers are woken when the
    transaction commits. ``schema`` is the installation's schema
    (``Config.schema``; ``None``: the default), whatever the session's
    ``search_path``. ``middleware``: the insert middleware the insert goes
    through (``drover.InsertMiddleware``, ``operation`` ``insert_tx``; a
    ``Config.middleware`` list may be passed as is). A job with
    ``InsertOpts.depends_on`` is inserted ``pending`` with its dependencies.

    Raises:
        drover.InvalidJobArgs, drover.InvalidInsertOpts: bad input, before any SQL.
        drover.InvalidArgument: ``schema`` is not a plain lowercase name, or
            ``middleware`` is not a list of middleware.
        drover.UnsupportedConnection: not a SQLAlchemy session or connection, or
            not on psycopg 3.
        drover.DuplicateJob: the unique key is held by a waiting or running job.
        drover.DatabaseError: the statement failed (the transaction is then aborted).
    """
    ns = namespace_for(schema)
    chain = checked_insert_chain(middleware, "middleware")
    prepared = prepare_one(args, opts, "insert_tx", workflows=False)
    writer = tx.CallerWriter(_resolver(session_or_connection), notify=notify, ns=ns)
    return through(chain, prepared, writer)[0]


def _resolver(target: object) -> tx.Resolve:
    return lambda: tx.caller(_driver(target))()


def insert_many(
    session_or_connection: Session | scoped_session[Any] | SAConnection,
    items: Iterable[InsertItem],
    *,
    notify: bool = True,
    schema: str | None = None,
    middleware: Sequence[Middleware | InsertMiddleware] = (),
) -> list[JobRow]:
    """Insert a batch with COPY in the session's transaction (as ``Client.insert_many_tx``);
    ``schema`` and ``middleware`` as for ``insert`` (``operation`` ``insert_many_tx``)."""
    ns = namespace_for(schema)
    chain = checked_insert_chain(middleware, "middleware")
    prepared = prepare_many(items, "insert_many_tx")
    writer = tx.CallerWriter(_resolver(session_or_connection), notify=notify, ns=ns)
    return through(chain, prepared, writer)


def complete(
    session_or_connection: Session | scoped_session[Any] | SAConnection, job: Job[Any]
) -> None:
    """Complete a running job in the session's (or connection's) transaction.

    ``job.complete_tx`` on SQLAlchemy: the handler's ORM writes and the job's
    completion commit or roll back together (see ``drover.Job.complete_tx``).
    Let ``drover.LeaseLost`` escape ``session.begin()`` (or roll back) so
    the writes go with it.

    Raises:
        drover.LeaseLost: this execution no longer holds the job.
        drover.UnsupportedConnection: not a SQLAlchemy session or connection on psycopg 3.
    """
    job.complete_tx(_driver(session_or_connection))
