"""Periodic jobs' ticks and leadership: the Python side of ``sql/queries/periodic.sql``.

``Leadership`` runs on the ticker's dedicated connection (autocommit),
which holds the leadership lock; ``LeasedLeadership`` holds a lease row
instead, on pooled connections, for a client behind a transaction pooler
without a session (ADR 0040); ``periodic_list`` and ``lock_holders`` run
on any connection.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.rows import tuple_row
from psycopg_pool import ConnectionPool

from drover._db import Connection
from drover._db.errors import translate
from drover._db.insert import job_insert
from drover._db.namespace import DEFAULT, Namespace
from drover._db.pool import borrow
from drover._db.queries import query
from drover._records import JobInsertParams, PeriodicInfo
from drover.errors import DatabaseError, DuplicateJob
from drover.job import JobRow

__all__ = [
    "Leadership",
    "LeasedLeadership",
    "Tick",
    "db_now",
    "define",
    "fire_tick",
    "lock_holders",
    "periodic_list",
    "record_leader",
    "record_next",
    "try_lock",
]


def _one(
    conn: Connection, name: str, params: dict[str, object] | None = None, *, ns: Namespace = DEFAULT
) -> tuple[object, ...]:
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query(name, ns), params)
        row = cur.fetchone()
    assert row is not None
    return row


def try_lock(conn: Connection, *, ns: Namespace = DEFAULT) -> bool:
    """Try to take leadership (a session lock on ``conn``); True when this session holds it."""
    with translate("acquire the periodic scheduler lock"):
        return bool(_one(conn, "periodic_try_lock", ns=ns)[0])


def db_now(conn: Connection, *, ns: Namespace = DEFAULT) -> datetime:
    """The database clock; also proves the leader's session (and so its lock) is alive."""
    with translate("read the database clock"):
        moment = _one(conn, "periodic_now", ns=ns)[0]
    assert isinstance(moment, datetime)
    return moment


def record_leader(
    conn: Connection, client_id: str, host: str, pid: int, *, ns: Namespace = DEFAULT
) -> None:
    """Name this client (and its backend) as the leader, for operators."""
    with translate("record the periodic scheduler leader"), conn.cursor() as cur:
        cur.execute(
            query("periodic_leader_record", ns), {"client_id": client_id, "host": host, "pid": pid}
        )


def define(
    conn: Connection,
    *,
    periodic_id: str,
    schedule: str,
    timezone: str,
    kind: str,
    queue: str,
    client_id: str,
    ns: Namespace = DEFAULT,
) -> datetime:
    """Register an entry; return its watermark (now for a new id)."""
    with translate(f"register periodic job {periodic_id!r}"):
        row = _one(
            conn,
            "periodic_define",
            {
                "id": periodic_id,
                "schedule": schedule,
                "timezone": timezone,
                "kind": kind,
                "queue": queue,
                "client_id": client_id,
            },
            ns=ns,
        )
    fired_through = row[0]
    assert isinstance(fired_through, datetime)
    return fired_through


@dataclass(frozen=True, slots=True)
class Tick:
    """What one attempt to fire a tick did."""

    claimed: bool
    """The watermark moved: this call accounted for the fire time."""
    row: JobRow | None
    """The job inserted, or None (not claimed, or a waiting job already held the key)."""
    fired_through: datetime
    """The watermark after the call."""


def fire_tick(
    conn: Connection,
    params: JobInsertParams,
    *,
    periodic_id: str,
    fire: datetime,
    upto: datetime,
    next_fire: datetime | None,
    ns: Namespace = DEFAULT,
) -> Tick:
    """In one transaction: move the watermark past ``fire`` and insert the tick's job.

    Nothing is inserted when the watermark already covers ``fire``. A waiting
    or running job holding the tick's unique key (inserted by hand, or by a
    leader before the watermark existed) absorbs the insert: the fire time is
    still accounted for.
    """
    with translate(f"enqueue periodic job {periodic_id!r}"), conn.transaction():
        claimed, fired_through = _one(
            conn, "periodic_tick_claim", {"id": periodic_id, "fire": fire, "upto": upto}, ns=ns
        )
        assert isinstance(fired_through, datetime)
        if not claimed:
            return Tick(False, None, fired_through)
        try:
            row: JobRow | None = job_insert(conn, params, notify=True, ns=ns)
        except DuplicateJob:
            row = None
        with conn.cursor() as cur:
            cur.execute(
                query("periodic_tick_record", ns),
                {
                    "id": periodic_id,
                    "fire": fire,
                    "job_id": None if row is None else row.id,
                    "next_fire": next_fire,
                },
            )
        return Tick(True, row, fired_through)


def record_next(
    conn: Connection, periodic_id: str, next_fire: datetime | None, *, ns: Namespace = DEFAULT
) -> None:
    """Publish the next fire time the leader computed (for ``drover periodic list``)."""
    with translate(f"record the next fire of {periodic_id!r}"), conn.cursor() as cur:
        cur.execute(query("periodic_next_record", ns), {"id": periodic_id, "next_fire": next_fire})


def periodic_list(conn: Connection, *, ns: Namespace = DEFAULT) -> list[PeriodicInfo]:
    """Every registered entry, by id, with the leader holding the lock now."""
    with translate("list periodic jobs"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("periodic_list", ns))
        rows = cur.fetchall()
    found = []
    for (id_, schedule, timezone, kind, queue, fired_through, last_fire, last_job_id,
         next_fire, defined_by, leader_id, host, pid) in rows:  # fmt: skip
        leader = None if leader_id is None else f"{leader_id} (pid {pid} on {host})"
        found.append(
            PeriodicInfo(
                id=id_,
                schedule=schedule,
                timezone=timezone,
                kind=kind,
                queue=queue,
                fired_through=fired_through,
                last_fire=last_fire,
                last_job_id=last_job_id,
                next_fire=next_fire,
                defined_by=defined_by,
                leader=leader,
                current=leader_id is not None and leader_id == defined_by,
            )
        )
    return found


def lock_holders(conn: Connection, *, ns: Namespace = DEFAULT) -> list[int]:
    """Backend pids holding the leadership lock (0 or 1 of them)."""
    with translate("read periodic lock holders"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("periodic_lock_holders", ns))
        return [int(r[0]) for r in cur.fetchall()]


class Leadership:
    """The ticker's own connection, on which it competes for and holds leadership.

    A session advisory lock lives on it, so it is opened with the pool's
    settings but kept out of the pool, and closing it releases the lock.
    Every method is one of this module's functions on that connection. Owned
    by one thread.
    """

    def __init__(self, connect: Callable[[str, str], Connection], ns: Namespace = DEFAULT) -> None:
        # connect(action, role): a session of its own (Store._session_connect).
        self._conn = connect("connect for the periodic scheduler lock", "scheduler")
        # The lock's key is drawn from the oid of ns's drover_periodic_ticks,
        # so each schema has its own leader (ADR 0043).
        self._ns = ns

    @property
    def broken(self) -> bool:
        """True once the connection is closed or broken: leadership is gone with it."""
        return self._conn.broken or self._conn.closed

    def try_lock(self) -> bool:
        """Try to take leadership; True when this session holds it."""
        return try_lock(self._conn, ns=self._ns)

    def now(self) -> datetime:
        """The database clock; also proves this session (and so its lock) is alive."""
        return db_now(self._conn, ns=self._ns)

    def record_leader(self, client_id: str, host: str, pid: int) -> None:
        """Name this client as the leader, for operators."""
        record_leader(self._conn, client_id, host, pid, ns=self._ns)

    def define(self, **entry: str) -> datetime:
        """Register an entry (see ``define``); return its watermark."""
        return define(self._conn, ns=self._ns, **entry)

    def fire_tick(
        self,
        params: JobInsertParams,
        *,
        periodic_id: str,
        fire: datetime,
        upto: datetime,
        next_fire: datetime | None,
    ) -> Tick:
        """Move the watermark past ``fire`` and insert the tick's job, in one transaction."""
        return fire_tick(
            self._conn,
            params,
            periodic_id=periodic_id,
            fire=fire,
            upto=upto,
            next_fire=next_fire,
            ns=self._ns,
        )

    def record_next(self, periodic_id: str, next_fire: datetime | None) -> None:
        """Publish the next fire time this leader computed."""
        record_next(self._conn, periodic_id, next_fire, ns=self._ns)

    def close(self) -> None:
        """Close the connection, which releases the lock."""
        self._conn.close()


class LeasedLeadership:
    """Leadership by a lease row (``drover_periodic_lease``), on pooled connections.

    For a client behind a transaction pooler with no ``Config.session_url``
    (ADR 0040): a session lock would stay on whichever server session ran
    it. ``try_lock`` takes the row if it is free or expired; ``now`` renews
    it (every ticker turn, at most one ``poll_interval`` apart) and raises
    ``drover.DatabaseError`` if another client took it after it expired; ``close``
    deletes it, so a clean stop hands over at once and a crashed holder's
    lease lapses after ``ttl`` seconds on the database clock. Each call
    borrows a pool connection for one statement or one transaction, so it
    survives the pooler or the server restarting (calls fail meanwhile).
    Owned by one thread.
    """

    def __init__(
        self, pool: ConnectionPool[Any], *, holder: str, ttl: float, ns: Namespace = DEFAULT
    ) -> None:
        self._pool = pool
        self._holder = holder
        self._ttl = ttl
        self._ns = ns

    broken = False
    """Never: every call borrows a fresh pool connection."""

    def _hold(self, action: str) -> datetime | None:
        with borrow(self._pool, action) as conn, conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(
                query("periodic_lease_hold", self._ns), {"holder": self._holder, "ttl": self._ttl}
            )
            row = cur.fetchone()
        if row is None:
            return None
        moment = row[0]
        assert isinstance(moment, datetime)
        return moment

    def try_lock(self) -> bool:
        """Take the lease if it is free or expired (or renew it); True when this client holds it."""
        return self._hold("take the periodic scheduler lease") is not None

    def now(self) -> datetime:
        """Renew the lease and return the database clock; ``DatabaseError`` if it was taken over."""
        moment = self._hold("renew the periodic scheduler lease")
        if moment is None:
            raise DatabaseError("the periodic scheduler lease expired and another client took it")
        return moment

    def record_leader(self, client_id: str, host: str, pid: int) -> None:
        """Name this client as the leader, for operators."""
        with borrow(self._pool, "record the periodic scheduler leader") as conn:
            record_leader(conn, client_id, host, pid, ns=self._ns)

    def define(self, **entry: str) -> datetime:
        """Register an entry (see ``define``); return its watermark."""
        with borrow(self._pool, "register a periodic job") as conn:
            return define(conn, ns=self._ns, **entry)

    def fire_tick(
        self,
        params: JobInsertParams,
        *,
        periodic_id: str,
        fire: datetime,
        upto: datetime,
        next_fire: datetime | None,
    ) -> Tick:
        """Move the watermark past ``fire`` and insert the tick's job, in one transaction."""
        with borrow(self._pool, f"enqueue periodic job {periodic_id!r}") as conn:
            return fire_tick(
                conn,
                params,
                periodic_id=periodic_id,
                fire=fire,
                upto=upto,
                next_fire=next_fire,
                ns=self._ns,
            )

    def record_next(self, periodic_id: str, next_fire: datetime | None) -> None:
        """Publish the next fire time this leader computed."""
        with borrow(self._pool, f"record the next fire of {periodic_id!r}") as conn:
            record_next(conn, periodic_id, next_fire, ns=self._ns)

    def close(self) -> None:
        """Delete the lease row if this client holds it (best effort: it expires anyway)."""
        with (
            borrow(self._pool, "release the periodic scheduler lease", timeout=5.0) as conn,
            translate("release the periodic scheduler lease"),
        ):
            conn.execute(query("periodic_lease_release", self._ns), {"holder": self._holder})
