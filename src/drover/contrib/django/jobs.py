"""Inserting and completing jobs on a Django connection, inside ``transaction.atomic()``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import connections

from drover._db import Connection
from drover._db.namespace import namespace_for
from drover._insert import tx
from drover._insert.funnel import prepare_many, prepare_one, through
from drover.contrib.django.settings import alias, insert_middleware, schema
from drover.contrib.django.wording import django_remedy
from drover.errors import NotInTransaction
from drover.job import InsertItem, InsertOpts, Job, JobArgs, JobRow

__all__ = ["complete", "insert", "insert_many"]


def _raw(using: str | None) -> Any:
    connection = connections[alias(using)]
    connection.ensure_connection()
    raw = connection.connection
    if connection.in_atomic_block and connection.needs_rollback:
        raise NotInTransaction(
            "the current transaction.atomic() block has failed and must be rolled back first"
        )
    return raw


def _resolver(using: str | None) -> tx.Resolve:
    # Outside atomic() (autocommit) a Django insert is allowed: it commits on
    # its own, and a batch runs in a transaction of its own.
    def resolve() -> tuple[Connection, bool]:
        raw = _raw(using)
        return raw, bool(connections[alias(using)].in_atomic_block)

    return resolve


def insert(
    args: JobArgs, opts: InsertOpts | None = None, using: str | None = None, *, notify: bool = True
) -> JobRow:
    """Insert one job on the Django connection ``using`` (``DROVER["DATABASE"]`` by default).

    Inside ``transaction.atomic()`` the job joins that transaction: it exists
    if and only if the block commits, and a savepoint that rolls back (a
    nested ``atomic()`` that raised) takes the job with it. Outside one
    (autocommit), it is a single committed insert. No commit of drover's own
    either way. Wakes listening workers at commit when ``notify``. A job with
    ``InsertOpts.depends_on`` is inserted ``pending`` with its dependencies.
    The insert goes through the insert middleware of
    ``DROVER["CONFIG"]["middleware"]`` (``drover.InsertMiddleware``;
    ``operation`` ``insert_tx``).

    Raises:
        drover.InvalidJobArgs, drover.InvalidInsertOpts: bad input, before any SQL.
        drover.DuplicateJob: the unique key is held by a waiting or running job
            (the transaction stays usable).
        drover.NotInTransaction: the atomic block already failed.
        drover.SchemaMissing: drover's tables are not in that database; the
            message says to run `manage.py migrate`.
        drover.DatabaseError: the statement failed.
    """
    with django_remedy():
        ns = namespace_for(schema())
        prepared = prepare_one(args, opts, "insert_tx", workflows=False)
        writer = tx.CallerWriter(_resolver(using), notify=notify, ns=ns)
        return through(insert_middleware(), prepared, writer)[0]


def insert_many(
    items: Iterable[InsertItem], using: str | None = None, *, notify: bool = True
) -> list[JobRow]:
    """Insert a batch with COPY on the Django connection (see `insert`; ``operation``
    ``insert_many_tx``)."""
    with django_remedy():
        ns = namespace_for(schema())
        prepared = prepare_many(items, "insert_many_tx")
        writer = tx.CallerWriter(_resolver(using), notify=notify, ns=ns)
        return through(insert_middleware(), prepared, writer)


def complete(job: Job[Any], using: str | None = None) -> None:
    """Complete a running job inside the current ``transaction.atomic()`` on ``using``.

    ``job.complete_tx`` on the Django connection: the handler's model writes
    and the job's completion commit or roll back together (see
    ``drover.Job.complete_tx``). Call it inside ``atomic()`` (in
    autocommit there is no transaction to share) and let
    ``drover.LeaseLost`` escape the block so the writes roll back.

    Raises:
        drover.LeaseLost: this execution no longer holds the job.
        drover.NotInTransaction: no atomic block, or one that already failed.
    """
    job.complete_tx(_raw(using))
