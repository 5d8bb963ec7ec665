"""Job results: the awaited flag and the read behind ``Client.result`` (``results.sql``)."""

from __future__ import annotations

from typing import Any, NamedTuple

from psycopg.rows import tuple_row

from drover._db import Connection
from drover._db.errors import translate
from drover._db.namespace import DEFAULT, Namespace
from drover._db.queries import query
from drover._db.rows import decode_json

__all__ = ["StoredResult", "job_mark_awaited", "job_result"]


class StoredResult(NamedTuple):
    """A job's state, its result (parsed JSON, ``None`` for none) and last error message."""

    state: str
    result: Any
    error: str | None


def job_mark_awaited(conn: Connection, job_id: int, *, ns: Namespace = DEFAULT) -> None:
    """Flag the job so that the write of its terminal state notifies ``drover_done``."""
    with translate(f"wait for job {job_id}"), conn.cursor() as cur:
        cur.execute(query("job_mark_awaited", ns), {"id": job_id})


def job_result(conn: Connection, job_id: int, *, ns: Namespace = DEFAULT) -> StoredResult | None:
    """The job's state, result and last error; ``None`` when there is no such job."""
    with translate(f"read the result of job {job_id}"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("job_result", ns), {"id": job_id})
        row = cur.fetchone()
    if row is None:
        return None
    state, text, error = row
    return StoredResult(str(state), None if text is None else decode_json(text), error)
