"""The statements behind ``drover.testing`` (``sql/queries/testing.sql``)."""

from __future__ import annotations

from collections.abc import Sequence

from psycopg.rows import tuple_row

from drover._db import Connection
from drover._db.errors import translate
from drover._db.namespace import DEFAULT, Namespace
from drover._db.queries import query
from drover._db.rows import row_from_db
from drover.job import JobRow

__all__ = ["job_claim_after", "job_list_after", "job_max_id"]


def job_max_id(conn: Connection, *, ns: Namespace = DEFAULT) -> int:
    """The highest job id so far (0 on an empty table): a test's watermark."""
    with translate("read the newest job id"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("job_max_id", ns))
        row = cur.fetchone()
    assert row is not None
    return int(row[0])


def job_list_after(conn: Connection, after: int, *, ns: Namespace = DEFAULT) -> list[JobRow]:
    """Every job with an id above ``after``, oldest first."""
    with translate("list jobs"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("job_list_after", ns), {"after": after})
        return [row_from_db(r) for r in cur.fetchall()]


def job_claim_after(
    conn: Connection,
    after: int,
    queues: Sequence[str] | None,
    limit: int,
    lease_seconds: float,
    *,
    ns: Namespace = DEFAULT,
) -> list[JobRow]:
    """Claim due jobs with ids above ``after`` (of ``queues`` if given), oldest due first."""
    with translate("claim jobs"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(
            query("job_claim_after", ns),
            {
                "after": after,
                "queues": None if queues is None else list(queues),
                "limit": limit,
                "lease_seconds": lease_seconds,
            },
        )
        return [row_from_db(r) for r in cur.fetchall()]
