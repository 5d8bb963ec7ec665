"""Inserting one job: the kernel's one insert (``jobs.sql``'s ``job_insert`` and its lean form).

Apart from ``drover._db.insert`` (which re-exports it), so the kernel's
store reaches the insert without the batch paths and uniqueness.
"""

from __future__ import annotations

from typing import Any, LiteralString

from psycopg.rows import tuple_row

from drover._db import Connection
from drover._db.errors import translate
from drover._db.namespace import DEFAULT, Namespace
from drover._db.queries import query
from drover._db.rows import new_row
from drover._records import JobInsertParams
from drover.errors import DuplicateJob
from drover.job import JobRow, JobState

__all__ = ["duplicate_error", "insert_statement", "inserted_row", "job_insert"]


def duplicate_error(params: JobInsertParams, where: str = "") -> DuplicateJob:
    assert params.unique_key is not None
    return DuplicateJob(
        f"{where}a job of kind {params.kind!r} with unique key {params.unique_key!r} "
        f"is already waiting or running on queue {params.queue!r}",
        queue=params.queue,
        kind=params.kind,
        unique_key=params.unique_key,
    )


def job_insert(
    conn: Connection, params: JobInsertParams, *, notify: bool, ns: Namespace = DEFAULT
) -> JobRow:
    """Insert one job; one statement, one round trip, the wake-up included when ``notify``.

    Raises ``DuplicateJob`` without aborting the transaction when the
    unique key is taken (the query skips the row instead of raising).
    """
    statement, values, lean = insert_statement(params, notify=notify, ns=ns)
    with translate(f"insert job kind {params.kind!r}"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(statement, values)
        return inserted_row(params, cur.fetchone(), lean=lean)


def insert_statement(
    params: JobInsertParams, *, notify: bool, ns: Namespace = DEFAULT
) -> tuple[LiteralString, tuple[Any, ...], bool]:
    """``(statement, values, lean)`` inserting one job; shared by sync and async.

    ``lean``: the short ``job_insert_now`` (no time, key, tags or metadata).
    """
    if (
        params.scheduled_at is None
        and params.unique_key is None
        and not params.tags
        and params.meta is None
    ):
        values: tuple[Any, ...] = (
            params.kind,
            params.queue,
            params.args_json,
            params.max_attempts,
            params.priority,
            notify,
        )
        return query("job_insert_now", ns), values, True
    values = (
        params.scheduled_at,
        params.kind,
        params.queue,
        params.args_json,
        params.max_attempts,
        params.unique_key,
        params.priority,
        list(params.tags),
        params.meta,
        notify,
    )
    return query("job_insert", ns), values, False


def inserted_row(params: JobInsertParams, row: tuple[Any, ...] | None, *, lean: bool) -> JobRow:
    """The ``JobRow`` of ``insert_statement``'s answer; ``DuplicateJob`` if its key was taken."""
    if lean:
        assert row is not None
        id_, created_at, _ = row
        return new_row(params, id_, created_at)
    if row is None:
        raise duplicate_error(params)
    id_, created_at, state, scheduled_at, _ = row
    return new_row(params, id_, created_at, JobState(state), scheduled_at)
