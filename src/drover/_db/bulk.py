"""Operator actions on many jobs at once, one statement each (``inspect.sql``)."""

from __future__ import annotations

from collections.abc import Sequence

from psycopg.rows import tuple_row

from drover._db import Connection
from drover._db.errors import translate
from drover._db.namespace import DEFAULT, Namespace
from drover._db.queries import query

__all__ = ["job_cancel_many", "job_retry_many"]


def job_cancel_many(conn: Connection, ids: Sequence[int], *, ns: Namespace = DEFAULT) -> list[int]:
    """Cancel every listed job that is waiting or dead; return the ids cancelled, ascending."""
    with translate(f"cancel {len(ids)} jobs"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("job_cancel_many", ns), {"ids": list(ids)})
        return sorted(int(r[0]) for r in cur.fetchall())


def job_retry_many(conn: Connection, ids: Sequence[int], *, ns: Namespace = DEFAULT) -> list[int]:
    """Redrive every listed dead or cancelled job (see the query); return the ids, ascending."""
    with translate(f"retry {len(ids)} jobs"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("job_retry_many", ns), {"ids": list(ids)})
        row = cur.fetchone()
    assert row is not None
    return [int(i) for i in row[0]]
