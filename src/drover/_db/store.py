"""Job queries: the Python side of ``sql/queries/jobs.sql``.

Every function takes the connection to run on and returns drover types. None
of them commits, rolls back or changes session settings: the caller (the
client, or the application for ``insert_tx``) owns the transaction.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.rows import tuple_row

from drover._db.connections import Connection
from drover._db.errors import translate
from drover._db.notify import notify_queues
from drover._db.queries import query
from drover.errors import DuplicateJob
from drover.job import JobRow, JobState

__all__ = ["JobInsertParams", "job_get", "job_insert", "job_insert_many", "row_from_db"]


@dataclass(frozen=True, slots=True)
class JobInsertParams:
    """One validated, encoded job ready to be written."""

    kind: str
    queue: str
    args_json: str
    max_attempts: int
    scheduled_at: datetime | None
    unique_key: str | None

    def as_query_params(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "queue": self.queue,
            "args": self.args_json,
            "max_attempts": self.max_attempts,
            "scheduled_at": self.scheduled_at,
            "unique_key": self.unique_key,
        }


def row_from_db(values: Sequence[Any]) -> JobRow:
    """Build a JobRow from the 13 columns every job query starts with, jsonb as text."""
    (
        id_,
        kind,
        queue,
        args,
        state,
        attempt,
        max_attempts,
        errors,
        scheduled_at,
        leased_until,
        created_at,
        finalized_at,
        unique_key,
    ) = values[:13]
    return JobRow(
        id=id_,
        kind=kind,
        queue=queue,
        args=json.loads(args),
        state=JobState(state),
        attempt=attempt,
        max_attempts=max_attempts,
        errors=json.loads(errors),
        scheduled_at=scheduled_at,
        leased_until=leased_until,
        created_at=created_at,
        finalized_at=finalized_at,
        unique_key=unique_key,
    )


def _duplicate(params: JobInsertParams, where: str = "") -> DuplicateJob:
    assert params.unique_key is not None
    return DuplicateJob(
        f"{where}a job of kind {params.kind!r} with unique key {params.unique_key!r} "
        f"is already waiting or running on queue {params.queue!r}",
        queue=params.queue,
        kind=params.kind,
        unique_key=params.unique_key,
    )


def job_insert(conn: Connection, params: JobInsertParams, *, notify: bool) -> JobRow:
    """Insert one job; one statement, one round trip, the wake-up included when ``notify``.

    Raises :class:`DuplicateJob` without aborting the transaction when the
    unique key is taken (the query skips the row instead of raising).
    """
    with translate(f"insert job kind {params.kind!r}"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("job_insert"), {**params.as_query_params(), "notify": notify})
        row = cur.fetchone()
    if row is None:
        raise _duplicate(params)
    return row_from_db(row)


def job_insert_many(
    conn: Connection, batch: Sequence[JobInsertParams], *, caller_tx: bool, notify: bool
) -> list[JobRow]:
    """Insert a batch through COPY into a staging table; rows come back in input order.

    A constant three round trips however large the batch (plus BEGIN/COMMIT
    or a savepoint). The COPY and the insert run in a nested transaction so a
    unique-key collision, with an existing job or within the batch, writes
    nothing; with ``caller_tx`` that is a savepoint inside the caller's
    transaction, which stays usable.
    """
    if not batch:
        return []
    with translate(f"insert {len(batch)} jobs"), conn.cursor(row_factory=tuple_row) as cur:
        if caller_tx:
            # On a non-autocommit connection that has not run a statement yet
            # (the first call inside Django's atomic(), say) psycopg would make
            # conn.transaction() the outermost transaction and COMMIT the
            # caller's work with ours. Executing first opens the caller's
            # transaction, so conn.transaction() below is a savepoint.
            cur.execute(query("job_insert_batch_stage"))
        with conn.transaction():
            if not caller_tx:
                cur.execute(query("job_insert_batch_stage"))
            with cur.copy(query("job_insert_batch_copy")) as copy:
                for ord_, p in enumerate(batch):
                    copy.write_row(
                        (
                            ord_,
                            p.kind,
                            p.queue,
                            p.args_json,
                            p.max_attempts,
                            p.scheduled_at,
                            p.unique_key,
                        )
                    )
            cur.execute(query("job_insert_batch_apply"))
            rows = cur.fetchall()
            if len(rows) != len(batch):
                # Raising rolls the nested transaction back: nothing of the batch stays.
                raise _first_duplicate(conn, batch, {r[0] for r in rows})
            if notify:
                notify_queues(conn, sorted({p.queue for p in batch}))
    return [row_from_db(r) for r in rows]


def _first_duplicate(
    conn: Connection, batch: Sequence[JobInsertParams], inserted: set[int]
) -> DuplicateJob:
    # The staging table maps input positions to the ids they would have had.
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("job_insert_batch_staged_ids"))
        for ord_, id_ in cur.fetchall():
            if id_ not in inserted:
                return _duplicate(batch[ord_], f"item {ord_}: ")
    return _duplicate(next(p for p in batch if p.unique_key is not None))


def job_get(conn: Connection, job_id: int) -> JobRow | None:
    """The job with ``job_id``, or ``None``."""
    with translate(f"get job {job_id}"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("job_get"), {"id": job_id})
        row = cur.fetchone()
    return None if row is None else row_from_db(row)
