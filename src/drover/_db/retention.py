"""Deleting finished jobs past their retention."""

from __future__ import annotations

from psycopg.rows import tuple_row

from drover._db import Connection
from drover._db.errors import translate
from drover._db.namespace import DEFAULT, Namespace
from drover._db.queries import query

__all__ = ["PRUNE_LOCK", "job_prune_batch"]

PRUNE_LOCK = 7237970105436602371
"""The pruners' advisory-lock key in the default schema: "drover" then 0x0003."""


def job_prune_batch(
    conn: Connection, state: str, older_than: float, limit: int, *, ns: Namespace = DEFAULT
) -> int | None:
    """Delete up to ``limit`` ``state`` rows finished more than ``older_than`` seconds ago.

    Runs in its own transaction holding the pruning try-lock; returns the
    number deleted, or ``None`` when another client holds the lock.
    """
    with (
        translate(f"prune {state} jobs"),
        conn.transaction(),
        conn.cursor(row_factory=tuple_row) as cur,
    ):
        cur.execute(query("prune_lock", ns), {"key": ns.lock_key(PRUNE_LOCK)})
        row = cur.fetchone()
        if row is None or not row[0]:
            return None
        cur.execute(
            query("job_prune", ns), {"state": state, "older_than": older_than, "limit": limit}
        )
        return cur.rowcount
