"""Queue pause state: the Python side of ``sql/queries/queues.sql``."""

from __future__ import annotations

from psycopg.rows import tuple_row

from drover._db import Connection
from drover._db.errors import translate
from drover._db.namespace import DEFAULT, Namespace
from drover._db.queries import query
from drover.queues import QueueState

__all__ = ["queue_list", "queue_pause", "queue_resume"]


def queue_pause(conn: Connection, name: str, *, ns: Namespace = DEFAULT) -> QueueState:
    """Pause ``name`` (idempotent: an already paused queue keeps its first pause time)."""
    with translate(f"pause queue {name!r}"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("queue_pause", ns), {"name": name})
        row = cur.fetchone()
    assert row is not None
    return QueueState(*row)


def queue_resume(conn: Connection, name: str, *, ns: Namespace = DEFAULT) -> bool:
    """Resume ``name`` and wake listening clients; False when it was not paused."""
    with translate(f"resume queue {name!r}"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("queue_resume", ns), {"name": name})
        return cur.fetchone() is not None


def queue_list(conn: Connection, *, ns: Namespace = DEFAULT) -> list[QueueState]:
    """Every queue with a pause record, by name."""
    with translate("list queues"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("queue_list", ns))
        return [QueueState(n, p, u) for n, p, u in cur.fetchall()]
