"""drover inside Django: an installable app, inserts in ``transaction.atomic()``, the admin, tasks.

Add ``"drover.contrib.django"`` to ``INSTALLED_APPS``; ``manage.py migrate``
then applies drover's schema to the database ``settings.DROVER["DATABASE"]``
names (``default``). Settings::

    DROVER = {
        "DATABASE": "default",            # the alias drover's tables live in
        "WORKERS": "myproject.jobs.workers",  # a drover.Workers, for manage.py drover worker
        "CONFIG": {"concurrency": 20, "queues": {"default": 1, "mail": 5}},  # drover.Config
    }

``insert`` joins the request's transaction; ``manage.py drover worker`` runs
the workers (and Django tasks sent to :class:`DroverTaskBackend`); every other
``manage.py drover ...`` command is the ``drover`` CLI pointed at the Django
database.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from django.db import connections

from drover._db.store import job_insert, job_insert_many
from drover._encode import encode_batch, encode_insert
from drover.contrib.django.settings import alias
from drover.errors import NotInTransaction
from drover.job import InsertOpts, Job, JobArgs, JobRow

if TYPE_CHECKING:
    from drover.contrib.django.tasks import DroverTaskBackend

__all__ = ["DroverTaskBackend", "complete", "insert", "insert_many"]

InsertItem = JobArgs | tuple[JobArgs, InsertOpts | None]


def _raw(using: str | None) -> Any:
    connection = connections[alias(using)]
    connection.ensure_connection()
    raw = connection.connection
    if connection.in_atomic_block and connection.needs_rollback:
        raise NotInTransaction(
            "the current transaction.atomic() block has failed and must be rolled back first"
        )
    return raw


def insert(
    args: JobArgs, opts: InsertOpts | None = None, using: str | None = None, *, notify: bool = True
) -> JobRow:
    """Insert one job on the Django connection ``using`` (``DROVER["DATABASE"]`` by default).

    Inside ``transaction.atomic()`` the job joins that transaction: it exists
    if and only if the block commits, and a savepoint that rolls back (a
    nested ``atomic()`` that raised) takes the job with it. Outside one
    (autocommit), it is a single committed insert. No commit of drover's own
    either way. Wakes listening workers at commit when ``notify``.

    Raises:
        drover.InvalidJobArgs, drover.InvalidInsertOpts: bad input, before any SQL.
        drover.DuplicateJob: the unique key is held by a waiting or running job
            (the transaction stays usable).
        drover.NotInTransaction: the atomic block already failed.
        drover.DatabaseError: the statement failed.
    """
    params = encode_insert(args, opts)
    return job_insert(_raw(using), params, notify=notify)


def insert_many(
    items: Iterable[InsertItem], using: str | None = None, *, notify: bool = True
) -> list[JobRow]:
    """Insert a batch with COPY on the Django connection (see :func:`insert`)."""
    batch = encode_batch(items)
    if not batch.params:
        return []
    connection = connections[alias(using)]
    raw = _raw(using)
    if connection.in_atomic_block:
        return job_insert_many(raw, batch, caller_tx=True, notify=notify)
    return job_insert_many(raw, batch, caller_tx=False, notify=notify)


def complete(job: Job[Any], using: str | None = None) -> None:
    """Complete a running job inside the current ``transaction.atomic()`` on ``using``.

    ``job.complete_tx`` on the Django connection: the handler's model writes
    and the job's completion commit or roll back together (see
    :meth:`drover.Job.complete_tx`). Call it inside ``atomic()`` (in
    autocommit there is no transaction to share) and let
    :class:`drover.LeaseLost` escape the block so the writes roll back.

    Raises:
        drover.LeaseLost: this execution no longer holds the job.
        drover.NotInTransaction: no atomic block, or one that already failed.
    """
    job.complete_tx(_raw(using))


def __getattr__(name: str) -> Any:
    # The task backend needs django.tasks (Django 6.0+): imported only when named.
    if name == "DroverTaskBackend":
        from drover.contrib.django.tasks import DroverTaskBackend

        return DroverTaskBackend
    raise AttributeError(name)
