"""The registry of live clients (``clients.sql``): register, refresh, reap, unregister, list;
and the health samples the clients write once a minute (ADR 0060)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.rows import tuple_row

from drover._db import Connection
from drover._db.errors import translate
from drover._db.floors import ClaimTimes
from drover._db.namespace import DEFAULT, Namespace
from drover._db.queries import query
from drover._records import WorkerInfo
from drover.health import HealthSample

__all__ = [
    "ClaimWindow",
    "ClientEntry",
    "client_list",
    "client_refresh",
    "client_unregister",
    "health_sample",
    "health_samples_since",
]


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
    kinds: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ClaimWindow:
    """A client's claims since its last refresh, as its registry row keeps them (ADR 0060).

    Seconds; the durations are ``None`` with no claim (``walk_max_seconds``
    with no walk).
    """

    claims: int = 0
    claim_p50_seconds: float | None = None
    claim_p99_seconds: float | None = None
    claim_max_seconds: float | None = None
    walk_max_seconds: float | None = None

    @classmethod
    def of(cls, times: ClaimTimes) -> ClaimWindow:
        """The window ``times`` counted: its median, 99th percentile and maxima."""
        return cls(
            claims=times.claims,
            claim_p50_seconds=times.quantile(0.5),
            claim_p99_seconds=times.quantile(0.99),
            claim_max_seconds=times.max_seconds if times.claims else None,
            walk_max_seconds=times.walk_max_seconds if times.walks else None,
        )

    def params(self) -> dict[str, Any]:
        """The window as ``client_refresh``'s parameters."""
        return {
            "claims": self.claims,
            "claim_p50_seconds": self.claim_p50_seconds,
            "claim_p99_seconds": self.claim_p99_seconds,
            "claim_max_seconds": self.claim_max_seconds,
            "walk_max_seconds": self.walk_max_seconds,
        }


def client_refresh(
    conn: Connection,
    entry: ClientEntry,
    *,
    running: int,
    ttl_seconds: float,
    started_at: datetime | None,
    window: ClaimWindow | None = None,
    ns: Namespace = DEFAULT,
) -> tuple[datetime, int]:
    """Upsert ``entry``'s row, with its claims' ``window``, and delete other clients'
    expired rows.

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
                "kinds": sorted(entry.kinds),
                "running": running,
                "started_at": started_at,
                "ttl_seconds": ttl_seconds,
                **(window or ClaimWindow()).params(),
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
            claims=None if claims is None else int(claims),
            claim_p50_seconds=_seconds(p50),
            claim_p99_seconds=_seconds(p99),
            claim_max_seconds=_seconds(top),
            walk_max_seconds=_seconds(walk),
            kinds=None if kinds is None else tuple(kinds),
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
            claims,
            p50,
            p99,
            top,
            walk,
            kinds,
        ) in rows
    ]


def _seconds(value: Any) -> float | None:
    return None if value is None else float(value)


def health_sample(conn: Connection, keep_seconds: float, *, ns: Namespace = DEFAULT) -> bool:
    """Write this minute's health sample unless a client already has, and then delete
    the samples older than ``keep_seconds``; True when this call wrote it."""
    with translate("write the health sample"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("health_sample", ns), {"keep_seconds": keep_seconds})
        row = cur.fetchone()
    assert row is not None
    return bool(row[0])


def health_samples_since(
    conn: Connection, since: datetime, *, ns: Namespace = DEFAULT
) -> list[HealthSample]:
    """The health samples from ``since`` on, oldest first."""
    with translate("read the health samples"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("health_samples_since", ns), {"since": since})
        rows = cur.fetchall()
    return [
        HealthSample(
            sampled_at=at,
            live_tuples=None if live is None else int(live),
            dead_tuples=None if dead is None else int(dead),
            total_bytes=None if size is None else int(size),
            claims=int(claims),
            claim_p50_seconds=_seconds(p50),
            claim_p99_seconds=_seconds(p99),
            claim_max_seconds=_seconds(top),
            walk_max_seconds=_seconds(walk),
            horizon_xids=None if xids is None else int(xids),
        )
        for at, live, dead, size, claims, p50, p99, top, walk, xids in rows
    ]
