"""Client configuration: every field declared once, with its default, and checked when built."""

from __future__ import annotations

import dataclasses
import logging
import warnings
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from datetime import timedelta
from typing import Any, Generic, Self, TypeVar, overload

from prometheus_client import CollectorRegistry

from drover._address import parse_address
from drover._db.conninfo import check_conninfo
from drover._db.namespace import check_schema_name
from drover._durations import MAX_DURATION, Duration, DurationField, to_seconds
from drover._hints import did_you_mean
from drover.errors import ConfigError, InvalidArgument
from drover.health import HealthThresholds
from drover.insert_middleware import InsertMiddleware, is_insert_middleware
from drover.limits import Limit, LimitKey
from drover.middleware import Middleware
from drover.periodic import PeriodicJob
from drover.plugins import (
    DEFAULT_PLUGINS,
    HealthProbe,
    Periodic,
    Plugin,
    Pruner,
    QueueStats,
    check_periodic_jobs,
)
from drover.queues import QueuesField, format_queues
from drover.results import DEFAULT_MAX_RESULT_BYTES, check_max_result_bytes
from drover.retention import Retention
from drover.retry import ExponentialRetryPolicy, RetryPolicy
from drover.worker import Workers

__all__ = ["MAX_DURATION", "Config", "declared_limits", "periodic_jobs_of"]

MIN_LEASE = timedelta(milliseconds=1)


def _default_logger() -> logging.Logger:
    return logging.getLogger("drover")


_G = TypeVar("_G")
_S = TypeVar("_S")


class _Unset:
    def __repr__(self) -> str:
        return "<not given>"


_UNSET: Any = _Unset()
"""A deprecated field's default: not given."""

_QUIET: ContextVar[bool] = ContextVar("drover_config_quiet", default=False)
"""Set while ``Config.replace`` rebuilds: carried-over deprecated fields warned already."""


class _Moved(Generic[_G, _S]):
    """A Config field that moved into a plugin's options (ADR 0046).

    Still accepted, with a ``DeprecationWarning`` naming the replacement,
    and folded into that plugin when the Config is built; read back, it
    warns too and answers from the effective plugin. What was given is kept
    apart, so ``replace`` carries it over unchanged.
    """

    def __init__(self, plugin: type[Plugin], option: str, read: Callable[[Config], _G]) -> None:
        self.plugin_class = plugin.__name__
        self.plugin_name = plugin.name
        self.option = option
        self._read = read
        self.field = "?"
        self._attr = "_given_?"

    def __set_name__(self, owner: type, name: str) -> None:
        self.field = name
        self._attr = f"_given_{name}"

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Any: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> _G: ...
    def __get__(self, obj: object | None, owner: type | None = None) -> Any:
        if obj is None:
            return _UNSET  # what dataclasses reads as the field's default
        warnings.warn(
            f"Config.{self.field} is deprecated: read "
            f"Config.plugin({self.plugin_name!r}).{self.option}",
            DeprecationWarning,
            stacklevel=2,
        )
        assert isinstance(obj, Config)
        return self._read(obj)

    def __set__(self, obj: object, value: _S) -> None:
        # Reached through object.__setattr__ in the frozen dataclass's __init__.
        obj.__dict__[self._attr] = value

    def given(self, obj: object) -> object:
        """What the caller passed for this field, or ``_UNSET``."""
        return obj.__dict__.get(self._attr, _UNSET)

    def warn(self, *, stacklevel: int) -> None:
        example = "[...]" if self.option == "jobs" else "..."
        warnings.warn(
            f"Config.{self.field} is deprecated: use Config(plugins=[drover.plugins."
            f"{self.plugin_class}({self.option}={example})])",
            DeprecationWarning,
            stacklevel=stacklevel + 1,
        )


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

    log_tracebacks: bool = True
    """The record that ends a failed execution (a retry scheduled, a dead
    job) carries the handler's traceback as ``exc_info``: printed under the
    line in text logs, the ``exc_info`` key in JSON. ``False`` keeps those
    records to their one line (the traceback is still stored in the job's
    ``errors``, as ``drover jobs get ID`` prints it)."""

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

    stats_interval: _Moved[timedelta, Duration] = _Moved(
        QueueStats, "interval", lambda c: _interval_of(c, QueueStats.name)
    )
    """Deprecated: ``plugins=[drover.plugins.QueueStats(interval=...)]``."""

    health_interval: _Moved[timedelta, Duration] = _Moved(
        HealthProbe, "interval", lambda c: _interval_of(c, HealthProbe.name)
    )
    """Deprecated: ``plugins=[drover.plugins.HealthProbe(interval=...)]``."""

    health_thresholds: _Moved[HealthThresholds, HealthThresholds] = _Moved(
        HealthProbe, "thresholds", lambda c: _health(c).thresholds
    )
    """Deprecated: ``plugins=[drover.plugins.HealthProbe(thresholds=...)]``."""

    metrics_registry: CollectorRegistry | None = None
    """The ``prometheus_client.CollectorRegistry`` this client records on
    (``None``: a private one, so clients never collide). Two clients cannot
    share one."""

    ops_addr: str = ""
    """``host:port`` for ``/metrics``, ``/healthz`` and ``/readyz``, bound at
    ``start()``; empty means no listener and no thread."""

    retention: _Moved[Retention | None, Retention | None] = _Moved(
        Pruner, "retention", lambda c: _pruner(c).retention
    )
    """Deprecated: ``plugins=[drover.plugins.Pruner(retention=...)]``."""

    prune_interval: _Moved[timedelta, Duration] = _Moved(
        Pruner, "interval", lambda c: _interval_of(c, Pruner.name)
    )
    """Deprecated: ``plugins=[drover.plugins.Pruner(interval=...)]``."""

    periodic_jobs: _Moved[tuple[PeriodicJob, ...], Sequence[PeriodicJob]] = _Moved(
        Periodic, "jobs", lambda c: periodic_jobs_of(c)
    )
    """Deprecated: ``plugins=[drover.plugins.Periodic(jobs=[...])]``."""

    plugins: Sequence[Plugin] = ()
    """The background services a started client runs beside the engine, each
    with its own options (``drover.plugins``, ADR 0046). Merged with the
    defaults **by name**: ``QueueStats()`` (``"refresher"``, every 15 s),
    ``Pruner()`` (``"pruner"``: completed and cancelled jobs kept 24 h, dead
    7 days, pruned every 60 s) and ``HealthProbe()`` (``"health"``, every
    60 s). A plugin named like a default replaces it; any other is added,
    in the order given. So the empty list, the default, runs the three, and
    listing only ``Periodic(jobs=[...])`` keeps them.
    ``Pruner(retention=None)`` keeps every row (no thread) and
    ``HealthProbe(interval=0)`` turns the probe off. Two plugins of one name
    are refused. Read back as given (a tuple); ``effective_plugins`` lists
    what a started client runs."""

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
            named = []
            for key in sorted(unknown):
                named.append(key + did_you_mean(key, _FIELD_NAMES))
            raise ConfigError(f"unknown Config field(s): {', '.join(named)}")
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
        if not isinstance(self.log_tracebacks, bool):
            raise ConfigError(
                f"Config.log_tracebacks must be True or False, not {self.log_tracebacks!r}"
            )
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
        try:
            check_max_result_bytes(self.max_result_bytes, "Config.max_result_bytes")
        except InvalidArgument as exc:
            raise ConfigError(str(exc)) from None
        self._check_pooler()
        if self.schema is not None:
            check_schema_name("Config.schema", self.schema, ConfigError)
        self._resolve_plugins()

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
        for name in ("poll_interval", "rescue_interval"):
            value: timedelta = getattr(self, name)
            if value <= timedelta(0):
                raise ConfigError(f"Config.{name} must be positive, not {_s(value)}")
        for name in (
            "lease_duration", "heartbeat_interval", "poll_interval", "rescue_interval",
            "shutdown_timeout",
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

    def _resolve_plugins(self) -> None:
        """Check ``plugins``, fold the deprecated fields in, and merge with the defaults."""
        given = _plugins(self.plugins)
        object.__setattr__(self, "plugins", given)
        names = {p.name for p in given}
        moved: dict[str, Plugin] = {}
        for plugin_name, build in _MOVED_GROUPS:
            values = {
                name: moved.given(self)
                for name, moved in _MOVED.items()
                if moved.plugin_name == plugin_name and moved.given(self) is not _UNSET
            }
            if not values:
                continue
            if not _QUIET.get():
                for field_name in values:
                    # Frames: warn, here, __post_init__, the generated __init__, the caller.
                    _MOVED[field_name].warn(stacklevel=4)
            if plugin_name in names:
                fields = " and ".join(f"Config.{f}" for f in values)
                raise ConfigError(
                    f"{fields} (deprecated) and the plugin {plugin_name!r} in Config.plugins "
                    f"both configure it; drop {fields} and set it on the plugin"
                )
            moved[plugin_name] = build(values)
        effective: list[Plugin] = []
        by_name = {p.name: p for p in given}
        for default in DEFAULT_PLUGINS:
            name = default.name
            effective.append(by_name[name] if name in by_name else moved.pop(name, default))
        effective.extend(moved.values())
        defaults = {d.name for d in DEFAULT_PLUGINS}
        effective.extend(p for p in given if p.name not in defaults)
        object.__setattr__(self, "_effective", tuple(effective))

    @property
    def effective_plugins(self) -> tuple[Plugin, ...]:
        """The plugins a started client runs, in start order: the defaults (``QueueStats``,
        ``Pruner``, ``HealthProbe``), each replaced by a plugin of ``plugins`` of the same
        name, then the other plugins in the order given."""
        effective: tuple[Plugin, ...] = self.__dict__["_effective"]
        return effective

    def plugin(self, name: str) -> Plugin | None:
        """The effective plugin named ``name`` (``"pruner"``, ``"periodic"``...), or ``None``."""
        return next((p for p in self.effective_plugins if p.name == name), None)

    def replace(self, **changes: Any) -> Config:
        """A new Config with ``changes`` applied and everything checked again.

        Unknown field names raise ``drover.ConfigError``, as in the constructor.
        A deprecated field among ``changes`` warns; one carried over from this
        Config does not warn again.
        """
        for name in changes:
            if name in _MOVED:
                _MOVED[name].warn(stacklevel=2)
        fields: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            moved = _MOVED.get(f.name)
            fields[f.name] = moved.given(self) if moved is not None else getattr(self, f.name)
        fields.update(changes)
        token = _QUIET.set(True)
        try:
            return Config(**fields)
        finally:
            _QUIET.reset(token)

    def __replace__(self, **changes: Any) -> Config:
        # copy.replace (Python 3.13) goes through replace: a generated one would
        # read the deprecated fields back (warning) and pass them on as given.
        return self.replace(**changes)

    def __repr__(self) -> str:
        return (
            f"Config(concurrency={self.concurrency}, queues={format_queues(self.queues)}, "
            f"poll_interval={self.poll_interval.total_seconds()}s, "
            f"lease_duration={self.lease_duration.total_seconds()}s, "
            f"heartbeat_interval={self.heartbeat_interval.total_seconds()}s, "
            f"rescue_interval={self.rescue_interval.total_seconds()}s, "
            f"workers={self.workers.kinds()}, "
            f"plugins={[p.name for p in self.effective_plugins]})"
        )


_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(Config))
_MOVED: dict[str, _Moved[Any, Any]] = {
    name: value for name, value in vars(Config).items() if isinstance(value, _Moved)
}


def _moved_duration(name: str, value: object, *, zero: bool = False) -> timedelta:
    """A deprecated duration field's value, checked as the field was (same messages)."""
    seconds = to_seconds(value, f"Config.{name}")  # type: ignore[arg-type]
    if seconds < 0 or (seconds == 0 and not zero):
        rule = "must be positive, or zero to turn the probe off," if zero else "must be positive,"
        raise ConfigError(f"Config.{name} {rule} not {seconds:g}s")
    if seconds > MAX_DURATION.total_seconds():
        raise ConfigError(
            f"Config.{name} must be at most {MAX_DURATION.days} days, not {seconds:g}s"
        )
    return timedelta(seconds=seconds)


def _moved_pruner(values: dict[str, object]) -> Plugin:
    retention = values.get("retention", Pruner().retention)
    if retention is not None and not isinstance(retention, Retention):
        raise ConfigError(f"Config.retention must be a drover.Retention or None, not {retention!r}")
    interval = values.get("prune_interval")
    return Pruner(
        retention=retention,
        interval=60 if interval is None else _moved_duration("prune_interval", interval),
    )


def _moved_health(values: dict[str, object]) -> Plugin:
    thresholds = values.get("health_thresholds", HealthThresholds())
    if not isinstance(thresholds, HealthThresholds):
        raise ConfigError(
            f"Config.health_thresholds must be a drover.HealthThresholds, not {thresholds!r}"
        )
    interval = values.get("health_interval")
    seconds = 60 if interval is None else _moved_duration("health_interval", interval, zero=True)
    return HealthProbe(interval=seconds, thresholds=thresholds)


def _moved_stats(values: dict[str, object]) -> Plugin:
    return QueueStats(interval=_moved_duration("stats_interval", values["stats_interval"]))


def _moved_periodic(values: dict[str, object]) -> Plugin:
    return Periodic(jobs=check_periodic_jobs(values["periodic_jobs"], "Config.periodic_jobs"))


_MOVED_GROUPS: tuple[tuple[str, Callable[[dict[str, object]], Plugin]], ...] = (
    (QueueStats.name, _moved_stats),
    (Pruner.name, _moved_pruner),
    (HealthProbe.name, _moved_health),
    (Periodic.name, _moved_periodic),
)


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


def _plugins(plugins: object) -> tuple[Plugin, ...]:
    if isinstance(plugins, str) or not isinstance(plugins, Sequence):
        raise ConfigError(
            f"Config.plugins must be a list of drover.Plugin, not {type(plugins).__name__}"
        )
    checked = tuple(plugins)
    seen: dict[str, int] = {}
    for index, plugin in enumerate(checked):
        if not isinstance(plugin, Plugin):
            hint = " (build it: Pruner(), not Pruner)" if isinstance(plugin, type) else ""
            raise ConfigError(
                f"Config.plugins[{index}] must be a drover.Plugin, not {plugin!r}{hint}"
            )
        name = plugin.name
        if name in seen:
            raise ConfigError(
                f"Config.plugins[{index}] and Config.plugins[{seen[name]}] are both named "
                f"{name!r}; give each plugin once"
            )
        seen[name] = index
        if type(plugin).__module__ == "drover.plugins":
            continue  # drover's own, run by the engine
        if type(plugin).run_once is Plugin.run_once:
            raise ConfigError(f"Config.plugins[{index}]: plugin {name!r} defines no run_once")
        if "_interval" not in vars(plugin):
            raise ConfigError(
                f"Config.plugins[{index}]: plugin {name!r} has no interval; its __init__ "
                "must call super().__init__(interval=...)"
            )
    return checked


def periodic_jobs_of(config: Config) -> tuple[PeriodicJob, ...]:
    """The periodic entries a started client with ``config`` schedules (its ``Periodic``'s)."""
    periodic = config.plugin(Periodic.name)
    return periodic.jobs if isinstance(periodic, Periodic) else ()


def _pruner(config: Config) -> Pruner:
    found = config.plugin(Pruner.name)
    return found if isinstance(found, Pruner) else Pruner(retention=None)


def _health(config: Config) -> HealthProbe:
    found = config.plugin(HealthProbe.name)
    return found if isinstance(found, HealthProbe) else HealthProbe(interval=0)


def _interval_of(config: Config, name: str) -> timedelta:
    found = config.plugin(name)
    interval = None if found is None else found.interval
    return timedelta(0) if interval is None else interval


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
