"""The registry of live clients (``clients.sql``): register, refresh, reap, unregister, list."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from psycopg.rows import tuple_row

from drover._db import Connection
from drover._db.errors import translate
from drover._db.namespace import DEFAULT, Namespace
from drover._db.queries import query
from drover._records import WorkerInfo

__all__ = ["ClientEntry", "client_list", "client_refresh", "client_unregister"]


@dataclass(frozen=True, slots=True)
class ClientEntry:
    """What a client writes about itself; ``id`` is its registration's key."""

    id: str
    client_id: str
    host: str
    pid: int
    version: str
    queues: tuple[str, ...]
    concurrency: int


def client_refresh(
    conn: Connection,
    entry: ClientEntry,
    *,
    running: int,
    ttl_seconds: float,
    started_at: datetime | None,
    ns: Namespace = DEFAULT,
) -> tuple[datetime, int]:
    """Upsert ``entry``'s row and delete other clients' expired rows.

    Returns ``(the row's start time, how many expired rows were deleted)``.
    """
    with translate("refresh the client registry"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(
            query("client_refresh", ns),
            {
                "id": entry.id,
                "client_id": entry.client_id,
                "host": entry.host,
                "pid": entry.pid,
                "version": entry.version,
                "queues": list(entry.queues),
                "concurrency": entry.concurrency,
                "running": running,
                "started_at": started_at,
                "ttl_seconds": ttl_seconds,
            },
        )
        row = cur.fetchone()
    assert row is not None
    return row[0], int(row[1])


def client_unregister(conn: Connection, registration_id: str, *, ns: Namespace = DEFAULT) -> bool:
    """Delete the row; False when it was already gone (reaped, or never written)."""
    with translate("unregister the client"), conn.cursor() as cur:
        cur.execute(query("client_unregister", ns), {"id": registration_id})
        return cur.rowcount == 1


def client_list(conn: Connection, *, ns: Namespace = DEFAULT) -> list[WorkerInfo]:
    """Every live (unexpired) client, oldest first."""
    with translate("list live clients"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("client_list", ns))
        rows = cur.fetchall()
    return [
        WorkerInfo(
            client_id=client_id,
            host=host,
            pid=int(pid),
            version=version,
            queues=tuple(queues),
            concurrency=int(concurrency),
            running=int(running),
            started_at=started_at,
            heartbeat_at=heartbeat_at,
            expires_at=expires_at,
            heartbeat_age_seconds=max(0.0, float(age)),
        )
        for (
            client_id,
            host,
            pid,
            version,
            queues,
            concurrency,
            running,
            started_at,
            heartbeat_at,
            expires_at,
            age,
        ) in rows
    ]
