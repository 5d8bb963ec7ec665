"""Client configuration: every field declared once, with its default, and checked when built."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, Self

from prometheus_client import CollectorRegistry

from drover._address import parse_address
from drover._db.conninfo import check_conninfo
from drover._db.namespace import check_schema_name
from drover._durations import DurationField
from drover.errors import ConfigError, InvalidArgument
from drover.health import HealthThresholds
from drover.insert_middleware import InsertMiddleware, is_insert_middleware
from drover.limits import Limit, LimitKey
from drover.middleware import Middleware
from drover.periodic import PeriodicJob
from drover.queues import QueuesField, format_queues
from drover.results import DEFAULT_MAX_RESULT_BYTES, check_max_result_bytes
from drover.retention import Retention
from drover.retry import ExponentialRetryPolicy, RetryPolicy
from drover.worker import Workers

__all__ = ["Config", "declared_limits"]

MIN_LEASE = timedelta(milliseconds=1)
MAX_DURATION = timedelta(days=3650)
"""Longest duration a Config field accepts: ten years. Far longer ones overflow
thread waits (``threading.TIMEOUT_MAX``) and PostgreSQL intervals."""


def _default_logger() -> logging.Logger:
    return logging.getLogger("drover")


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class Config:
    """How a ``drover.Client`` runs jobs. Immutable once built.

    Every duration accepts a ``timedelta`` or a number of seconds and reads
    back as a ``timedelta``. Every value is checked when the Config is built:
    an unknown field, a value of the wrong type or one out of range raises
    ``drover.ConfigError`` (a ``drover.InvalidArgument``) naming
    the field, so a deploy mistake stops the process instead of running with
    a value nobody chose. Build variants with ``replace``.

    A Config holds no connections and starts nothing; the same Config may
    serve several clients, except that two clients cannot share one
    ``metrics_registry``.
    """

    workers: Workers = dataclasses.field(default_factory=Workers)
    """The ``drover.Workers`` registry. A started client claims jobs of every
    kind on its queues; a kind with no worker fails (and retries), so rolling
    deploys heal. Processes that only insert should not start a client."""

    concurrency: int = 10
    """Pool threads, i.e. jobs run at once (at least 1)."""

    queues: QueuesField = QueuesField()
    """Queue name → ``drover.Queue`` or an int weight (``n`` means
    ``Queue(weight=n)``); at least one queue, ``{"default": 1}`` by default.
    All queues share the one pool; the weight (1..100 000) decides how often a
    queue is tried first, never whether it is tried, and a queue's
    ``max_workers`` caps its jobs running at once in this client (at most
    ``concurrency``). Read back as a read-only mapping of ``Queue`` values
    sorted by name."""

    poll_interval: DurationField = DurationField(1.0)
    """Wait after a claim round that found nothing (positive)."""

    lease_duration: DurationField = DurationField(60.0)
    """How long a claim is held without a heartbeat (at least 1 ms)."""

    heartbeat_interval: DurationField = DurationField(None)
    """How often held leases are renewed: positive and shorter than the lease;
    ``None`` means a third of the lease."""

    rescue_interval: DurationField = DurationField(None)
    """How often expired leases are swept (positive); ``None`` means the lease."""

    retry_policy: RetryPolicy = dataclasses.field(default_factory=ExponentialRetryPolicy)
    """When a failed attempt runs again (``drover.ExponentialRetryPolicy``)."""

    middleware: Sequence[Middleware | InsertMiddleware] = ()
    """Wraps every execution and every insert, outermost first. An entry is
    an execution middleware (a callable, see ``drover.Middleware``), an
    insert middleware (an object with an ``around_insert`` method, see
    ``drover.InsertMiddleware``: it sees every batch a ``Client``,
    ``AsyncClient`` or the client's periodic scheduler inserts), or both
    (``drover.contrib.otel.TracingMiddleware``). Copied into a tuple when the
    Config is built; each chain is composed once per client."""

    logger: logging.Logger = dataclasses.field(default_factory=_default_logger)
    """Where drover logs (the ``drover`` logger by default)."""

    shutdown_timeout: DurationField = DurationField(30.0)
    """The drain budget ``Client.run`` and ``with client:`` give
    ``Client.stop`` (zero or more)."""

    notify: bool = True
    """Inserts send a LISTEN/NOTIFY wake-up for their queue, and a started
    client keeps one dedicated connection listening, so an idle queue starts
    new work in milliseconds instead of up to ``poll_interval``. Polling stays
    the source of truth. ``insert`` and ``insert_many`` send it after their
    commit from a background thread, coalesced (at most one round every
    10 ms); ``insert_tx`` and ``insert_many_tx`` queue it inside the caller's
    transaction, delivered at commit. Behind PgBouncer in transaction mode
    the LISTEN needs ``session_url`` (without one drover polls, see
    ``pgbouncer``). Turn it off when hundreds of processes
    insert with ``insert_tx`` at once (a NOTIFY inside a transaction
    serialises the commits of notifying transactions)."""

    stats_interval: DurationField = DurationField(15.0)
    """How often queue depth and oldest age are read for the gauges and
    ``/readyz`` (positive)."""

    health_interval: DurationField = DurationField(60.0)
    """How often a started client runs the queue doctor (``drover doctor``'s
    examination: a few reads of the server's statistics views) and publishes
    its findings as ``drover_health_findings{code}``; zero turns it off. The
    first examination runs one interval after start."""

    health_thresholds: HealthThresholds = dataclasses.field(default_factory=HealthThresholds)
    """When the probe's facts become findings (``drover.HealthThresholds``:
    the defaults are the doctor's, e.g. a transaction open 5 minutes)."""

    metrics_registry: CollectorRegistry | None = None
    """The ``prometheus_client.CollectorRegistry`` this client records on
    (``None``: a private one, so clients never collide). Two clients cannot
    share one."""

    ops_addr: str = ""
    """``host:port`` for ``/metrics``, ``/healthz`` and ``/readyz``, bound at
    ``start()``; empty means no listener and no thread."""

    retention: Retention | None = Retention()
    """How long finished jobs are kept (completed and cancelled 24 h, dead
    7 days); pruned in the background by started clients, one at a time.
    ``None`` keeps every row."""

    prune_interval: DurationField = DurationField(60.0)
    """How often a started client prunes (positive)."""

    periodic_jobs: Sequence[PeriodicJob] = ()
    """``drover.PeriodicJob`` entries to insert on their schedules. Every
    started client with entries competes to lead (one PostgreSQL advisory
    lock per database; a lease row behind a transaction pooler without
    ``session_url``, see ``pgbouncer``); the leader inserts the ticks, the others stand by
    and take over within one ``poll_interval`` of losing it. Empty: no
    scheduler thread, no lock attempts. Ids must be unique."""

    pgbouncer: bool | None = None
    """Whether the client's connections go through a transaction pooler
    (PgBouncer with ``pool_mode = transaction``), where a server session
    lasts one transaction. ``None`` (the default) asks the server on the
    first connection: through a pooler the server's process id differs from
    the one the handshake announced. ``True`` or ``False`` skips the question
    (``False`` for PgBouncer in session mode, which keeps sessions).

    Behind one, drover's own connections never prepare statements, and the
    features that need a session (wake-ups over LISTEN, ``Client.result``'s
    LISTEN, the periodic leader's advisory lock) use ``session_url`` when it
    is set. Without it notifications are off (workers poll every
    ``poll_interval``; cancels reach running jobs by the heartbeat) and the
    periodic leader holds a lease row renewed on the database clock instead of
    a lock (ADR 0040). See the "PgBouncer" guide."""

    session_url: str | None = None
    """A conninfo string or URL straight to PostgreSQL (or to a session-mode
    pooler), used only for the connections that need a session: the
    listener, ``Client.result``'s waiter and the periodic leader's lock. Each
    started client opens at most three there. ``None``: those connections
    use the client's own conninfo. Checked when the Config is built (never
    echoed: it may hold a password); ``pgbouncer=False`` with a
    ``session_url`` is refused as a contradiction."""

    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    """The largest result a handler may return, in bytes of JSON (256 KiB by
    default, at most 64 MiB). Results are stored in the jobs table with the
    completion; a larger one fails the attempt with ``drover.InvalidResult``
    (retried like any failure), so store big payloads elsewhere and return a
    reference."""

    schema: str | None = None
    """The PostgreSQL schema holding this installation's tables (migrate it
    with ``drover.migrate(url, schema=...)``): lowercase letters, digits and
    ``_``, at most 63 bytes, not starting with ``pg_``. ``None`` (and
    ``"public"``) is the default installation, run exactly as before schemas
    existed. Clients of different schemas in one database never see each
    other's jobs, wake-ups, periodic leader, limits or locks (docs/schemas.md)."""

    def __new__(cls, *args: Any, **fields: Any) -> Self:
        # Runs before the generated __init__, so a misspelt field is a
        # ConfigError naming it rather than a bare TypeError.
        if args:
            raise ConfigError("Config takes keyword arguments only")
        unknown = set(fields) - _FIELD_NAMES
        if unknown:
            raise ConfigError(f"unknown Config field(s): {', '.join(sorted(unknown))}")
        return super().__new__(cls)

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: only construction may set fields
        if self.logger is None:
            set_(self, "logger", _default_logger())
        if not isinstance(self.logger, logging.Logger):
            raise ConfigError(
                f"Config.logger must be a logging.Logger, not {type(self.logger).__name__}"
            )
        set_(self, "workers", _workers(self.workers))
        set_(self, "concurrency", _concurrency(self.concurrency))
        self._check_queue_caps()
        set_(self, "middleware", _middleware(self.middleware))
        if self.retry_policy is None:
            set_(self, "retry_policy", ExponentialRetryPolicy())
        elif not callable(getattr(self.retry_policy, "next_retry", None)):
            raise ConfigError(
                "Config.retry_policy needs a next_retry(job) method; "
                f"got {type(self.retry_policy).__name__}"
            )
        self._check_durations()
        if not isinstance(self.notify, bool):
            raise ConfigError(f"Config.notify must be True or False, not {self.notify!r}")
        if self.metrics_registry is not None and not isinstance(
            self.metrics_registry, CollectorRegistry
        ):
            raise ConfigError(
                "Config.metrics_registry must be a prometheus_client.CollectorRegistry, "
                f"not {type(self.metrics_registry).__name__}"
            )
        if not isinstance(self.ops_addr, str):
            raise ConfigError(
                f"Config.ops_addr must be a 'host:port' string, not {self.ops_addr!r}"
            )
        if self.ops_addr:
            parse_address(self.ops_addr, "Config.ops_addr")
        set_(self, "periodic_jobs", _periodic_jobs(self.periodic_jobs))
        try:
            check_max_result_bytes(self.max_result_bytes, "Config.max_result_bytes")
        except InvalidArgument as exc:
            raise ConfigError(str(exc)) from None
        self._check_pooler()
        if self.schema is not None:
            check_schema_name("Config.schema", self.schema, ConfigError)
        if self.retention is not None and not isinstance(self.retention, Retention):
            raise ConfigError(
                f"Config.retention must be a drover.Retention or None, not {self.retention!r}"
            )

    def _check_pooler(self) -> None:
        if self.pgbouncer is not None and not isinstance(self.pgbouncer, bool):
            raise ConfigError(
                f"Config.pgbouncer must be True, False or None (detect), not {self.pgbouncer!r}"
            )
        url = self.session_url
        if url is None:
            return
        if not isinstance(url, str):
            raise ConfigError(
                f"Config.session_url must be a conninfo string or URL, not {type(url).__name__}"
            )
        if not url.strip():
            raise ConfigError("Config.session_url is empty; leave it None to use the client's own")
        try:
            check_conninfo(url)
        except ValueError as exc:
            # check_conninfo's messages never quote the text (it may hold a password).
            raise ConfigError(f"Config.session_url: {exc}") from None
        if self.pgbouncer is False:
            raise ConfigError(
                "Config.session_url is set but Config.pgbouncer is False: a session URL is for "
                "clients behind a transaction pooler; drop one of them"
            )

    def _check_queue_caps(self) -> None:
        for name, queue in self.queues.items():
            if queue.max_workers is not None and queue.max_workers > self.concurrency:
                raise ConfigError(
                    f"Config.queues[{name!r}]: max_workers {queue.max_workers} is more than "
                    f"Config.concurrency {self.concurrency}; a queue cannot run more jobs at "
                    "once than the pool has threads"
                )

    def _check_durations(self) -> None:
        lease = self.lease_duration
        if lease < MIN_LEASE:
            raise ConfigError(f"Config.lease_duration must be at least 1 ms, not {_s(lease)}")
        if self.heartbeat_interval is None:
            object.__setattr__(self, "heartbeat_interval", lease / 3)
        elif not timedelta(0) < self.heartbeat_interval < lease:
            raise ConfigError(
                "Config.heartbeat_interval must be positive and shorter than the lease "
                f"({_s(lease)}), not {_s(self.heartbeat_interval)}"
            )
        if self.rescue_interval is None:
            object.__setattr__(self, "rescue_interval", lease)
        for name in ("poll_interval", "rescue_interval", "stats_interval", "prune_interval"):
            value: timedelta = getattr(self, name)
            if value <= timedelta(0):
                raise ConfigError(f"Config.{name} must be positive, not {_s(value)}")
        if not isinstance(self.health_thresholds, HealthThresholds):
            raise ConfigError(
                "Config.health_thresholds must be a drover.HealthThresholds, "
                f"not {self.health_thresholds!r}"
            )
        if self.health_interval < timedelta(0):
            raise ConfigError(
                "Config.health_interval must be positive, or zero to turn the probe off, "
                f"not {_s(self.health_interval)}"
            )
        for name in (
            "lease_duration", "heartbeat_interval", "poll_interval", "rescue_interval",
            "stats_interval", "prune_interval", "shutdown_timeout", "health_interval",
        ):  # fmt: skip
            value = getattr(self, name)
            if value > MAX_DURATION:
                raise ConfigError(
                    f"Config.{name} must be at most {MAX_DURATION.days} days, not {_s(value)}"
                )
        if self.shutdown_timeout < timedelta(0):
            raise ConfigError(
                f"Config.shutdown_timeout must not be negative, not {_s(self.shutdown_timeout)}"
            )

    def replace(self, **changes: Any) -> Config:
        """A new Config with ``changes`` applied and everything checked again.

        Unknown field names raise ``drover.ConfigError``, as in the constructor.
        """
        return dataclasses.replace(self, **changes)

    def __repr__(self) -> str:
        return (
            f"Config(concurrency={self.concurrency}, queues={format_queues(self.queues)}, "
            f"poll_interval={self.poll_interval.total_seconds()}s, "
            f"lease_duration={self.lease_duration.total_seconds()}s, "
            f"heartbeat_interval={self.heartbeat_interval.total_seconds()}s, "
            f"rescue_interval={self.rescue_interval.total_seconds()}s, "
            f"workers={self.workers.kinds()})"
        )


_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(Config))


def _s(value: timedelta) -> str:
    return f"{value.total_seconds():g}s"


def _workers(workers: object) -> Workers:
    if workers is None:
        return Workers()
    if not isinstance(workers, Workers):
        raise ConfigError(f"Config.workers must be a drover.Workers, not {type(workers).__name__}")
    return workers


def _concurrency(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"Config.concurrency must be an int, not {type(value).__name__}")
    if value < 1:
        raise ConfigError(f"Config.concurrency must be at least 1, not {value}")
    return value


def _periodic_jobs(entries: object) -> tuple[PeriodicJob, ...]:
    if isinstance(entries, str) or not isinstance(entries, Sequence):
        raise ConfigError(
            "Config.periodic_jobs must be a list of drover.PeriodicJob, "
            f"not {type(entries).__name__}"
        )
    seen: dict[str, int] = {}
    for index, entry in enumerate(entries):
        if not isinstance(entry, PeriodicJob):
            raise ConfigError(
                f"Config.periodic_jobs[{index}] must be a drover.PeriodicJob, not {entry!r}"
            )
        if entry.id in seen:
            raise ConfigError(
                f"Config.periodic_jobs[{index}] duplicates id {entry.id!r} of "
                f"Config.periodic_jobs[{seen[entry.id]}]"
            )
        seen[entry.id] = index
    return tuple(entries)


def _middleware(middleware: object) -> tuple[Middleware | InsertMiddleware, ...]:
    if isinstance(middleware, str) or not isinstance(middleware, Sequence):
        raise ConfigError(
            f"Config.middleware must be a list of middleware, not {type(middleware).__name__}"
        )
    # Copy now: later changes to the caller's list must not change the chain.
    chain = tuple(middleware)
    for index, item in enumerate(chain):
        if item is None or not (callable(item) or is_insert_middleware(item)):
            raise ConfigError(
                f"Config.middleware[{index}] is {item!r}, neither a callable (an execution "
                "middleware) nor an object with an around_insert method (an insert middleware)"
            )
    return chain


def declared_limits(config: Config) -> list[tuple[LimitKey, Limit]]:
    """Every limit this configuration's code declares: on its queues and its workers' args classes.

    A starting client writes them (``Store.declare_limits``), so the limits
    of the queues it works and of the kinds it runs hold for every client of
    the database.
    """
    found: dict[LimitKey, Limit] = {}
    for name, queue in config.queues.items():
        for limit in queue.limits:
            found[LimitKey("queue", name, limit.partition_by)] = limit
    for kind in config.workers.kinds():
        entry = config.workers.get(kind)
        if entry is None:
            continue
        for limit in entry[0].declared_limits:
            found[LimitKey("kind", kind, limit.partition_by)] = limit
    return list(found.items())
