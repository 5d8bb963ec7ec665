"""The queue doctor's reads (``sql/queries/health.sql``): facts, not judgements.

Every statement is read-only and bounded: the horizon questions read the
server's views, the table questions read statistics, and the job questions
use the running and waiting partial indexes. ``drover.health.diagnose``
decides what the facts mean.
"""

from __future__ import annotations

from psycopg.rows import tuple_row

from drover._db import Connection
from drover._db.errors import translate
from drover._db.namespace import DEFAULT, Namespace
from drover._db.queries import query
from drover.health import (
    BackendHolder,
    ClientClaims,
    ExpiredLeases,
    PeriodicFacts,
    PreparedHolder,
    SessionVisibility,
    SlotHolder,
    TableFacts,
    UnservedQueue,
)

__all__ = [
    "client_claims",
    "expired_leases",
    "horizon_backends",
    "horizon_prepared",
    "horizon_slots",
    "periodic_facts",
    "session_visibility",
    "table_facts",
    "unserved_queues",
]


def horizon_backends(
    conn: Connection, min_age_seconds: float, *, ns: Namespace = DEFAULT
) -> list[BackendHolder]:
    """Sessions (other than ours) whose xmin is older than ``min_age_seconds``."""
    with (
        translate("read transactions holding back vacuum"),
        conn.cursor(row_factory=tuple_row) as cur,
    ):
        cur.execute(query("health_horizon_backends", ns), {"min_age_seconds": min_age_seconds})
        return [
            BackendHolder(
                pid=int(pid),
                application=str(app),
                state=str(state),
                backend_type=str(btype),
                user=str(user),
                xact_age_seconds=float(xact_age),
                query_age_seconds=None if query_age is None else float(query_age),
                xmin_age_xids=int(xmin_age),
            )
            for pid, app, state, btype, user, xact_age, query_age, xmin_age in cur.fetchall()
        ]


def session_visibility(conn: Connection, *, ns: Namespace = DEFAULT) -> SessionVisibility:
    """Whether this role sees every session's transaction, and the hidden ones holding an xid."""
    with translate("read which sessions are visible"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("health_session_visibility", ns))
        row = cur.fetchone()
    assert row is not None
    role, sees_all, hidden, holding, oldest = row
    return SessionVisibility(
        role=str(role),
        sees_all=bool(sees_all),
        hidden=int(hidden),
        hidden_holding_xmin=int(holding),
        oldest_hidden_xmin_age_xids=None if oldest is None else int(oldest),
    )


def horizon_slots(conn: Connection, *, ns: Namespace = DEFAULT) -> list[SlotHolder]:
    """Replication slots of this database (logical) or the cluster (physical)."""
    with translate("read replication slots"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("health_horizon_slots", ns))
        return [
            SlotHolder(
                name=str(name),
                slot_type=str(stype),
                database=str(db),
                active=bool(active),
                xmin_age_xids=None if xmin is None else int(xmin),
                catalog_xmin_age_xids=None if cxmin is None else int(cxmin),
                retained_wal_bytes=None if wal is None else int(wal),
            )
            for name, stype, db, active, xmin, cxmin, wal in cur.fetchall()
        ]


def horizon_prepared(
    conn: Connection, min_age_seconds: float, *, ns: Namespace = DEFAULT
) -> list[PreparedHolder]:
    """Prepared transactions of this database older than ``min_age_seconds``."""
    with translate("read prepared transactions"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("health_horizon_prepared", ns), {"min_age_seconds": min_age_seconds})
        return [
            PreparedHolder(gid=str(g), owner=str(o), age_seconds=float(a), xmin_age_xids=int(x))
            for g, o, a, x in cur.fetchall()
        ]


def table_facts(conn: Connection, *, ns: Namespace = DEFAULT) -> list[TableFacts]:
    """Dead tuples, size and last vacuum of every drover table on the search path
    (in ``ns``'s schema when it has one)."""
    with translate("read table statistics"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("health_tables", ns), {"schema": ns.schema})
        return [
            TableFacts(
                table=str(t),
                live_tuples=int(live),
                dead_tuples=int(dead),
                total_bytes=int(size),
                last_vacuum=last,
                autovacuum_count=int(count),
            )
            for t, live, dead, size, last, count in cur.fetchall()
        ]


def expired_leases(
    conn: Connection, grace_seconds: float, *, ns: Namespace = DEFAULT
) -> list[ExpiredLeases]:
    """Per queue, running jobs whose lease passed more than ``grace_seconds`` ago."""
    with translate("read expired leases"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("health_expired_leases", ns), {"grace_seconds": grace_seconds})
        return [
            ExpiredLeases(
                queue=str(q),
                count=int(n),
                oldest_expired_seconds=max(0.0, float(age)),
                sample_ids=tuple(int(i) for i in ids),
            )
            for q, n, age, ids in cur.fetchall()
        ]


def unserved_queues(
    conn: Connection, grace_seconds: float, *, ns: Namespace = DEFAULT
) -> list[UnservedQueue]:
    """Unpaused queues with a job claimable for ``grace_seconds`` and no live client on them."""
    with translate("read unserved queues"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("health_unserved_queues", ns), {"grace_seconds": grace_seconds})
        return [
            UnservedQueue(queue=str(q), waiting=int(n), oldest_age_seconds=max(0.0, float(age)))
            for q, n, age in cur.fetchall()
        ]


def periodic_facts(conn: Connection, *, ns: Namespace = DEFAULT) -> PeriodicFacts:
    """How many periodic entries exist, whether one leads, how overdue the worst tick is."""
    with translate("read periodic leadership"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("health_periodic", ns))
        row = cur.fetchone()
    assert row is not None
    entries, leader, overdue = row
    return PeriodicFacts(
        entries=int(entries),
        leader=bool(leader),
        overdue_seconds=None if overdue is None else max(0.0, float(overdue)),
    )


def client_claims(conn: Connection, *, ns: Namespace = DEFAULT) -> list[ClientClaims]:
    """The live clients' claim times over their last refresh windows, slowest first."""
    with translate("read the clients' claim times"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("health_client_claims", ns))
        return [
            ClientClaims(
                client=str(name),
                claims=int(n),
                claim_p50_seconds=float(p50),
                claim_p99_seconds=float(p99),
                claim_max_seconds=float(top),
                walk_max_seconds=None if walk is None else float(walk),
            )
            for name, n, p50, p99, top, walk in cur.fetchall()
        ]
