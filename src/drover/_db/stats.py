"""Read-only statistics queries."""

from __future__ import annotations

from psycopg.rows import tuple_row

from drover._db.connections import Connection
from drover._db.errors import translate
from drover._db.queries import query

__all__ = ["job_counts_by_state"]


def job_counts_by_state(conn: Connection) -> dict[tuple[str, str], int]:
    """``{(queue, state): count}`` over every job (a sequential scan: not for hot paths)."""
    with translate("count jobs"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("job_counts_by_state"))
        return {(q, s): int(n) for q, s, n in cur.fetchall()}
