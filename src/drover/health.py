"""The queue doctor's model: what hurts a PostgreSQL queue, with evidence and a remedy.

``drover.Inspector.health`` gathers facts from the server (see
``drover._db.health``) and ``diagnose`` turns them into findings against
``HealthThresholds``. Pure data and rules: no I/O, so every rule is a
function of the facts a test can build.

The headline is the xmin horizon: a session idle in transaction, a long
query, a replication slot or a forgotten prepared transaction keeps every
row version deleted after it began, so the completed and deleted jobs of a
busy queue pile up as dead tuples that no vacuum can reclaim, and every
claim scans past them. The doctor names the holder (pid, application,
state, age) and how to release it; and when the live clients report slow
claims (``CLAIMS_SLOWED``, ADR 0060), whether a pin is the likely cause.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from drover._durations import Duration, to_seconds
from drover.errors import ConfigError

__all__ = [
    "CODES",
    "BackendHolder",
    "ClientClaims",
    "ExpiredLeases",
    "HealthFacts",
    "HealthFinding",
    "HealthReport",
    "HealthSample",
    "HealthThresholds",
    "PeriodicFacts",
    "PreparedHolder",
    "SessionVisibility",
    "Severity",
    "SlotHolder",
    "TableFacts",
    "UnservedQueue",
    "diagnose",
]


CODES = (
    "SCHEMA_MISSING", "SCHEMA_BEHIND", "XMIN_IDLE_IN_TRANSACTION", "XMIN_LONG_QUERY",
    "XMIN_OLD_SNAPSHOT", "XMIN_REPLICATION_SLOT", "REPLICATION_SLOT_INACTIVE",
    "XMIN_PREPARED_TRANSACTION", "DEAD_TUPLES", "LEASE_EXPIRED", "QUEUE_UNSERVED",
    "PERIODIC_NO_LEADER", "CANNOT_SEE_SESSIONS", "CLAIMS_SLOWED",
)  # fmt: skip
"""Every finding code the doctor can report, stable for alerts and scripts."""


class Severity(StrEnum):
    """How much a finding hurts: ``critical`` needs action now, ``warning`` soon."""

    WARNING = "warning"
    CRITICAL = "critical"


@dataclass(frozen=True, slots=True)
class HealthFinding:
    """One thing that hurts the queue.

    ``code`` is stable (upper snake case, e.g. ``XMIN_IDLE_IN_TRANSACTION``)
    for alerts and scripts; ``summary`` says what and where in one line;
    ``evidence`` holds the numbers it was decided on (JSON-ready values);
    ``remedy`` says what to do.
    """

    code: str
    severity: Severity
    summary: str
    evidence: dict[str, Any]
    remedy: str

    def line(self) -> str:
        """The finding as one line: ``CODE  summary — remedy``."""
        return f"{self.code}  {self.summary} — {self.remedy}"


@dataclass(frozen=True, slots=True)
class HealthReport:
    """Every finding of one examination, most severe first; ``healthy`` when there is none."""

    findings: list[HealthFinding]

    @property
    def healthy(self) -> bool:
        """True when nothing was found."""
        return not self.findings

    def codes(self) -> list[str]:
        """The findings' codes, in report order."""
        return [f.code for f in self.findings]


def _positive(value: Duration, name: str) -> timedelta:
    seconds = to_seconds(value, name)
    if seconds < 0:
        raise ConfigError(f"{name} must not be negative, not {seconds}")
    return timedelta(seconds=seconds)


@dataclass(frozen=True, slots=True, init=False)
class HealthThresholds:
    """When a fact becomes a finding. Durations take a ``timedelta`` or seconds.

    ``xmin_age``: a transaction (or prepared transaction) open longer than
    this is named as holding back vacuum (default 5 minutes).
    ``lease_grace``: a running job whose lease passed longer ago than this
    was not rescued (default 1 minute; the rescuer sweeps every few seconds).
    ``unserved_grace``: a queue whose oldest claimable job waits longer than
    this with no live worker on it is named (default 1 minute).
    ``dead_tuples_min`` and ``dead_tuples_ratio``: a drover table with at
    least that many dead tuples, making up at least that fraction of its
    rows, is named (defaults 10,000 and 0.2).
    ``claim_p99``: a live client whose claims' 99th percentile, or slowest
    walk, over its last heartbeat interval took longer than this is named
    (``CLAIMS_SLOWED``, default 250 ms; ADR 0060).

    Raises ``drover.ConfigError`` naming the field for a value of the wrong
    type or out of range.
    """

    xmin_age: timedelta
    lease_grace: timedelta
    unserved_grace: timedelta
    dead_tuples_min: int
    dead_tuples_ratio: float
    claim_p99: timedelta

    def __init__(
        self,
        *,
        xmin_age: Duration = timedelta(minutes=5),
        lease_grace: Duration = timedelta(minutes=1),
        unserved_grace: Duration = timedelta(minutes=1),
        dead_tuples_min: int = 10_000,
        dead_tuples_ratio: float = 0.2,
        claim_p99: Duration = timedelta(milliseconds=250),
    ) -> None:
        if isinstance(dead_tuples_min, bool) or not isinstance(dead_tuples_min, int):
            raise ConfigError("HealthThresholds.dead_tuples_min must be an int")
        if dead_tuples_min < 0:
            raise ConfigError("HealthThresholds.dead_tuples_min must not be negative")
        if isinstance(dead_tuples_ratio, bool) or not isinstance(dead_tuples_ratio, int | float):
            raise ConfigError("HealthThresholds.dead_tuples_ratio must be a number")
        if not 0.0 <= float(dead_tuples_ratio) <= 1.0:
            raise ConfigError("HealthThresholds.dead_tuples_ratio must be between 0 and 1")
        object.__setattr__(self, "xmin_age", _positive(xmin_age, "HealthThresholds.xmin_age"))
        object.__setattr__(
            self, "lease_grace", _positive(lease_grace, "HealthThresholds.lease_grace")
        )
        object.__setattr__(
            self, "unserved_grace", _positive(unserved_grace, "HealthThresholds.unserved_grace")
        )
        object.__setattr__(self, "dead_tuples_min", dead_tuples_min)
        object.__setattr__(self, "dead_tuples_ratio", float(dead_tuples_ratio))
        object.__setattr__(self, "claim_p99", _positive(claim_p99, "HealthThresholds.claim_p99"))


# --- facts, as the database layer reads them ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class BackendHolder:
    """A session whose xmin is older than the threshold."""

    pid: int
    application: str
    state: str
    backend_type: str
    user: str
    xact_age_seconds: float
    query_age_seconds: float | None
    xmin_age_xids: int


@dataclass(frozen=True, slots=True)
class SessionVisibility:
    """Whether the examining role sees other roles' sessions (ADR 0054).

    ``sees_all``: the role has the privileges of ``pg_read_all_stats`` (or
    is a superuser). Without them ``pg_stat_activity`` hides the state and
    the start times of other roles' sessions, so the doctor cannot tell how
    long they have held an xmin: ``hidden`` counts this database's client
    sessions hidden so, ``hidden_holding_xmin`` those of them holding an
    xid or xmin now, the oldest ``oldest_hidden_xmin_age_xids`` transactions
    old.
    """

    role: str
    sees_all: bool
    hidden: int = 0
    hidden_holding_xmin: int = 0
    oldest_hidden_xmin_age_xids: int | None = None


@dataclass(frozen=True, slots=True)
class SlotHolder:
    """A replication slot of this database or the cluster."""

    name: str
    slot_type: str
    database: str
    active: bool
    xmin_age_xids: int | None
    catalog_xmin_age_xids: int | None
    retained_wal_bytes: int | None


@dataclass(frozen=True, slots=True)
class PreparedHolder:
    """A prepared transaction older than the threshold."""

    gid: str
    owner: str
    age_seconds: float
    xmin_age_xids: int


@dataclass(frozen=True, slots=True)
class TableFacts:
    """Statistics of one drover table."""

    table: str
    live_tuples: int
    dead_tuples: int
    total_bytes: int
    last_vacuum: datetime | None
    autovacuum_count: int


@dataclass(frozen=True, slots=True)
class ExpiredLeases:
    """Running jobs of one queue whose lease passed beyond the grace."""

    queue: str
    count: int
    oldest_expired_seconds: float
    sample_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class UnservedQueue:
    """A queue with claimable jobs and no live worker claiming from it."""

    queue: str
    waiting: int
    oldest_age_seconds: float


@dataclass(frozen=True, slots=True)
class PeriodicFacts:
    """Periodic entries, whether a leader holds the lock, the most overdue fire."""

    entries: int
    leader: bool
    overdue_seconds: float | None


@dataclass(frozen=True, slots=True)
class ClientClaims:
    """One live client's claims over its last refresh window (its registry row, ADR 0060).

    Durations in seconds; the percentiles are to a histogram bucket's top
    (at most 19% high); ``walk_max_seconds`` is ``None`` with no walk.
    """

    client: str
    """How a job's lease holder names the client: ``"<id> (pid <pid> on <host>)"``."""
    claims: int
    claim_p50_seconds: float
    claim_p99_seconds: float
    claim_max_seconds: float
    walk_max_seconds: float | None


@dataclass(frozen=True, slots=True)
class HealthSample:
    """One minute of the health history (``drover.Inspector.health_samples``, ADR 0060).

    Written once a minute by whichever live client refreshes first.
    ``live_tuples``, ``dead_tuples`` and ``total_bytes`` (with indexes and
    TOAST) are ``drover_jobs`` as PostgreSQL's statistics last saw it
    (``None`` before its first statistics). The claim figures sum or combine
    the live clients' last refresh windows: ``claims`` summed, the median a
    claims-weighted mean of theirs, the 99th percentile and the maxima the
    highest of theirs (``None`` with no claim). ``horizon_xids`` is the age,
    in transactions, of the oldest xmin held in the database (a session, a
    replication slot or a prepared transaction; ``None`` when none is).
    """

    sampled_at: datetime
    """The minute's start (database clock)."""
    live_tuples: int | None
    dead_tuples: int | None
    total_bytes: int | None
    claims: int
    claim_p50_seconds: float | None
    claim_p99_seconds: float | None
    claim_max_seconds: float | None
    walk_max_seconds: float | None
    horizon_xids: int | None


@dataclass(frozen=True, slots=True)
class HealthFacts:
    """Everything one examination read. ``schema_pending`` lists migrations not applied;
    when the schema is missing or behind, the drover-table facts are empty (not read).
    ``sessions`` says whether the examining role saw every session (``None``: not asked)."""

    schema_current: int
    schema_latest: int
    sessions: SessionVisibility | None = None
    backends: list[BackendHolder] = field(default_factory=list)
    slots: list[SlotHolder] = field(default_factory=list)
    prepared: list[PreparedHolder] = field(default_factory=list)
    tables: list[TableFacts] = field(default_factory=list)
    expired: list[ExpiredLeases] = field(default_factory=list)
    unserved: list[UnservedQueue] = field(default_factory=list)
    periodic: PeriodicFacts | None = None
    claims: list[ClientClaims] = field(default_factory=list)


# --- rules ----------------------------------------------------------------------------------------


def _age(seconds: float) -> str:
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    value = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1024:
            return f"{value:.0f}{unit}"
        value /= 1024
    return f"{value:.1f}TB"


def _backend(b: BackendHolder) -> HealthFinding:
    who = f"pid {b.pid}" + (f" ({b.application})" if b.application else "")
    evidence = {
        "pid": b.pid,
        "application": b.application,
        "state": b.state,
        "backend_type": b.backend_type,
        "user": b.user,
        "xact_age_seconds": round(b.xact_age_seconds, 1),
        "query_age_seconds": None if b.query_age_seconds is None else round(b.query_age_seconds, 1),
        "xmin_age_xids": b.xmin_age_xids,
    }
    if b.state.startswith("idle in transaction"):
        return HealthFinding(
            "XMIN_IDLE_IN_TRANSACTION",
            Severity.CRITICAL,
            f"{who} is {b.state} for {_age(b.xact_age_seconds)}, holding back vacuum",
            evidence,
            f"end that transaction in the application, or SELECT pg_terminate_backend({b.pid}); "
            "set idle_in_transaction_session_timeout",
        )
    if b.state == "active":
        return HealthFinding(
            "XMIN_LONG_QUERY",
            Severity.CRITICAL,
            f"{who} has run a transaction for {_age(b.xact_age_seconds)}, holding back vacuum",
            evidence,
            f"let it finish or SELECT pg_cancel_backend({b.pid}); set statement_timeout "
            "or move long reports to a replica",
        )
    return HealthFinding(
        "XMIN_OLD_SNAPSHOT",
        Severity.WARNING,
        f"{who} ({b.backend_type or b.state}) holds an xmin {_age(b.xact_age_seconds)} old",
        evidence,
        f"find what pid {b.pid} is doing (pg_stat_activity); a standby's hot_standby_feedback "
        "holds it while its queries run",
    )


def _blind(v: SessionVisibility) -> HealthFinding:
    held = (
        f", {v.hidden_holding_xmin} of them holding an xmin, the oldest "
        f"{v.oldest_hidden_xmin_age_xids} transactions old"
        if v.hidden_holding_xmin
        else ""
    )
    return HealthFinding(
        "CANNOT_SEE_SESSIONS",
        Severity.WARNING,
        f"role {v.role} cannot see other roles' sessions in pg_stat_activity, so a transaction "
        f"holding back vacuum may go unnamed; {v.hidden} session(s) of this database are "
        f"hidden from it{held}",
        {
            "role": v.role,
            "hidden_sessions": v.hidden,
            "hidden_holding_xmin": v.hidden_holding_xmin,
            "oldest_hidden_xmin_age_xids": v.oldest_hidden_xmin_age_xids,
        },
        f"GRANT pg_read_all_stats TO {v.role} (as a superuser; the worker and reader roles "
        "`drover roles` prints get it), or examine as a role that has it",
    )


def _slot(s: SlotHolder) -> HealthFinding | None:
    evidence = {
        "slot": s.name,
        "slot_type": s.slot_type,
        "database": s.database,
        "active": s.active,
        "xmin_age_xids": s.xmin_age_xids,
        "catalog_xmin_age_xids": s.catalog_xmin_age_xids,
        "retained_wal_bytes": s.retained_wal_bytes,
    }
    drop = f"SELECT pg_drop_replication_slot('{s.name}')"
    if s.xmin_age_xids is not None or s.catalog_xmin_age_xids is not None:
        held = max(x for x in (s.xmin_age_xids, s.catalog_xmin_age_xids) if x is not None)
        state = "active" if s.active else "inactive"
        return HealthFinding(
            "XMIN_REPLICATION_SLOT",
            Severity.CRITICAL if not s.active else Severity.WARNING,
            f"{state} {s.slot_type} slot {s.name} holds an xmin {held} transactions old",
            evidence,
            f"reconnect its consumer, or {drop} if nothing uses it",
        )
    if not s.active:
        return HealthFinding(
            "REPLICATION_SLOT_INACTIVE",
            Severity.WARNING,
            f"inactive {s.slot_type} slot {s.name} retains {_size(s.retained_wal_bytes)} of WAL",
            evidence,
            f"reconnect its consumer, or {drop} if nothing uses it",
        )
    return None


def _prepared(p: PreparedHolder) -> HealthFinding:
    return HealthFinding(
        "XMIN_PREPARED_TRANSACTION",
        Severity.CRITICAL,
        f"prepared transaction {p.gid!r} is {_age(p.age_seconds)} old, holding back vacuum",
        {
            "gid": p.gid,
            "owner": p.owner,
            "age_seconds": round(p.age_seconds, 1),
            "xmin_age_xids": p.xmin_age_xids,
        },
        f"COMMIT PREPARED '{p.gid}' or ROLLBACK PREPARED '{p.gid}' (its coordinator decides)",
    )


def _table(t: TableFacts, th: HealthThresholds, pinned: bool) -> HealthFinding | None:
    total = t.live_tuples + t.dead_tuples
    ratio = t.dead_tuples / total if total else 0.0
    if t.dead_tuples < th.dead_tuples_min or ratio < th.dead_tuples_ratio:
        return None
    last = (
        "never vacuumed"
        if t.last_vacuum is None
        else f"last vacuumed {t.last_vacuum:%Y-%m-%d %H:%M}"
    )
    remedy = (
        "release the xmin holders named above first; vacuum cannot reclaim what they pin"
        if pinned
        else f"VACUUM {t.table}; tune autovacuum_vacuum_scale_factor for it "
        "(see docs/production.md)"
    )
    return HealthFinding(
        "DEAD_TUPLES",
        Severity.WARNING,
        f"{t.table} has {t.dead_tuples} dead tuples ({ratio:.0%} of rows, "
        f"{_size(t.total_bytes)}), {last}",
        {
            "table": t.table,
            "live_tuples": t.live_tuples,
            "dead_tuples": t.dead_tuples,
            "dead_ratio": round(ratio, 3),
            "total_bytes": t.total_bytes,
            "last_vacuum": None if t.last_vacuum is None else t.last_vacuum.isoformat(),
            "autovacuum_count": t.autovacuum_count,
        },
        remedy,
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def _pins(facts: HealthFacts) -> list[str]:
    """What holds the horizon, as the doctor named it: sessions, slots, prepared ones."""
    pins = [
        f"pid {b.pid}" + (f" ({b.application})" if b.application else "") + f", {b.state}"
        for b in facts.backends
    ]
    pins += [
        f"replication slot {s.name}"
        for s in facts.slots
        if s.xmin_age_xids is not None or s.catalog_xmin_age_xids is not None
    ]
    pins += [f"prepared transaction {p.gid!r}" for p in facts.prepared]
    return pins


def _claims(facts: HealthFacts, th: HealthThresholds) -> HealthFinding | None:
    bound = th.claim_p99.total_seconds()
    slow = [
        c
        for c in facts.claims
        if c.claim_p99_seconds > bound or (c.walk_max_seconds or 0.0) > bound
    ]
    if not slow:
        return None
    p99 = max(c.claim_p99_seconds for c in slow)
    walks = [c.walk_max_seconds for c in slow if c.walk_max_seconds is not None]
    jobs = next((t for t in facts.tables if t.table == "drover_jobs"), None)
    pins = _pins(facts)
    what = (
        f"claims are slow: {len(slow)} of {len(facts.claims)} live client(s) report a claim "
        f"p99 of up to {_ms(p99)}"
        + (f" (walks up to {_ms(max(walks))})" if walks else "")
        + f", over {_ms(bound)}"
    )
    dead = "" if jobs is None else f"; drover_jobs has {jobs.dead_tuples} dead tuples"
    if pins:
        summary = (
            f"{what}; the likely cause: the MVCC horizon is pinned by {'; '.join(pins)}, so "
            f"vacuum cannot remove the claimed jobs' dead index entries{dead}"
        )
        remedy = (
            "release the xmin holder named (see its finding); claims speed up once vacuum "
            "runs after it"
        )
    elif facts.sessions is not None and facts.sessions.hidden_holding_xmin:
        summary = (
            f"{what}; no pin is named, but {facts.sessions.hidden_holding_xmin} session(s) "
            f"hidden from role {facts.sessions.role} hold an xmin{dead}"
        )
        remedy = "examine as a role with pg_read_all_stats to name the session holding the xmin"
    else:
        last = (
            ""
            if jobs is None
            else ", never vacuumed"
            if jobs.last_vacuum is None
            else f", last vacuumed {jobs.last_vacuum:%Y-%m-%d %H:%M}"
        )
        summary = f"{what}, with no pinned horizon named{dead}{last}"
        remedy = (
            "VACUUM drover_jobs if its dead tuples grew since the last vacuum, and tune "
            "autovacuum for it (see docs/production.md); otherwise look at the database "
            "server's load (CPU, I/O, locks) and at a younger pin (drover doctor --xmin-age)"
        )
    return HealthFinding(
        "CLAIMS_SLOWED",
        Severity.WARNING,
        summary,
        {
            "threshold_seconds": bound,
            "clients": [
                {
                    "client": c.client,
                    "claims": c.claims,
                    "claim_p50_seconds": round(c.claim_p50_seconds, 4),
                    "claim_p99_seconds": round(c.claim_p99_seconds, 4),
                    "claim_max_seconds": round(c.claim_max_seconds, 4),
                    "walk_max_seconds": None
                    if c.walk_max_seconds is None
                    else round(c.walk_max_seconds, 4),
                }
                for c in slow
            ],
            "pinned_by": pins,
            "dead_tuples": None if jobs is None else jobs.dead_tuples,
        },
        remedy,
    )


def diagnose(facts: HealthFacts, thresholds: HealthThresholds) -> HealthReport:
    """Turn ``facts`` into findings, critical first, in a stable order within each severity."""
    found: list[HealthFinding] = []
    if facts.schema_current < facts.schema_latest:
        missing = facts.schema_current == 0
        found.append(
            HealthFinding(
                "SCHEMA_MISSING" if missing else "SCHEMA_BEHIND",
                Severity.CRITICAL,
                "drover's schema is missing"
                if missing
                else f"the schema is at version {facts.schema_current}, this drover needs "
                f"{facts.schema_latest}",
                {"current": facts.schema_current, "latest": facts.schema_latest},
                "run `drover migrate` (or drover.migrate) before starting workers",
            )
        )
    if facts.sessions is not None and not facts.sessions.sees_all:
        found.append(_blind(facts.sessions))
    found.extend(_backend(b) for b in facts.backends)
    found.extend(f for f in map(_slot, facts.slots) if f is not None)
    found.extend(_prepared(p) for p in facts.prepared)
    pinned = any(f.code.startswith("XMIN_") for f in found)
    found.extend(f for f in (_table(t, thresholds, pinned) for t in facts.tables) if f is not None)
    slowed = _claims(facts, thresholds)
    if slowed is not None:
        found.append(slowed)
    for e in facts.expired:
        found.append(
            HealthFinding(
                "LEASE_EXPIRED",
                Severity.CRITICAL,
                f"{e.count} running job(s) in queue {e.queue} lost their lease "
                f"{_age(e.oldest_expired_seconds)} ago and were not rescued",
                {
                    "queue": e.queue,
                    "count": e.count,
                    "oldest_expired_seconds": round(e.oldest_expired_seconds, 1),
                    "sample_ids": list(e.sample_ids),
                },
                "start a worker (any started client runs the rescuer); "
                "check that workers reach the database",
            )
        )
    for u in facts.unserved:
        found.append(
            HealthFinding(
                "QUEUE_UNSERVED",
                Severity.CRITICAL,
                f"queue {u.queue} has {u.waiting} waiting job(s), oldest "
                f"{_age(u.oldest_age_seconds)}, and no live worker",
                {
                    "queue": u.queue,
                    "waiting": u.waiting,
                    "oldest_age_seconds": round(u.oldest_age_seconds, 1),
                },
                f"start a worker with --queue {u.queue}, or pause the queue if that is meant",
            )
        )
    p = facts.periodic
    if p is not None and p.entries and not p.leader:
        found.append(
            HealthFinding(
                "PERIODIC_NO_LEADER",
                Severity.WARNING,
                f"{p.entries} periodic job(s) are defined and no client leads them"
                + (f"; a tick is {_age(p.overdue_seconds)} overdue" if p.overdue_seconds else ""),
                {
                    "entries": p.entries,
                    "overdue_seconds": None
                    if p.overdue_seconds is None
                    else round(p.overdue_seconds, 1),
                },
                "start a client with its periodic jobs configured; "
                "ticks due meanwhile fire once when one leads",
            )
        )
    order = {Severity.CRITICAL: 0, Severity.WARNING: 1}
    found.sort(key=lambda f: order[f.severity])
    return HealthReport(found)
