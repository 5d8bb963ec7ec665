"""Plugins: the background services a started client runs, each with its own options.

``Config(plugins=[...])`` takes them (ADR 0046). drover ships four:

- ``QueueStats`` (named ``"refresher"``): reads queue depth and oldest age for
  the gauges and ``/readyz`` every 15 s. On by default.
- ``Pruner`` (``"pruner"``): deletes finished jobs past their ``Retention``
  every 60 s. On by default, with ``Retention()``'s 24 hours / 7 days.
- ``HealthProbe`` (``"health"``): runs the queue doctor every 60 s and
  publishes its findings. On by default.
- ``Periodic`` (``"periodic"``): inserts ``drover.PeriodicJob`` entries on
  their schedules from one leading client. Runs only when given jobs.

Your list is merged with the defaults **by name**: a plugin named like a
default replaces it, any other is added. An empty list keeps the defaults;
nothing is lost by listing only what you add. ``Pruner(retention=None)`` turns
pruning off and ``HealthProbe(interval=0)`` the probe; ``QueueStats`` cannot
be turned off (``/readyz`` reads it).

A plugin of your own subclasses ``Plugin``: a ``name``, options checked in
its ``__init__`` (which calls ``super().__init__(interval=...)``), and a
``run_once(context)`` that a started client calls every interval on a thread
of the plugin's own, with a ``PluginContext`` (the client's id, logger,
schema and queues, a connection borrowed from the client's pool, and whether
the client is stopping). Optionally ``not_ready(status)`` feeds ``/readyz``.

Plugins are configuration: immutable values, checked when built, holding no
connection and starting nothing. The same plugin may serve several clients;
each started client runs its own thread for it.
"""

from __future__ import annotations

import inspect
import logging
import re
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar, Self, final

import psycopg

from drover._durations import MAX_DURATION, Duration, to_seconds
from drover._hints import did_you_mean
from drover.errors import ConfigError
from drover.health import HealthThresholds
from drover.periodic import PeriodicJob
from drover.retention import Retention

__all__ = [
    "DEFAULT_PLUGINS",
    "RESERVED_NAMES",
    "HealthProbe",
    "Periodic",
    "Plugin",
    "PluginContext",
    "PluginStatus",
    "Pruner",
    "QueueStats",
]

_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")

RESERVED_NAMES = frozenset(
    {
        "completer", "progress", "heartbeat", "rescuer", "listener", "registry", "fetcher",
        "notifier", "eventloop", "loopwatch", "awaiter", "service", "job", "scheduler", "worker",
    }
)  # fmt: skip
"""The names of drover's own engine services and threads: a plugin may not take one
(a plugin's name is its thread's, its ``/readyz`` reason's and its metrics' label)."""


@dataclass(frozen=True, slots=True)
class PluginStatus:
    """What a started client knows of one plugin, handed to ``Plugin.not_ready``.

    ``running_for``: seconds since the client started. ``since_success``:
    seconds since the plugin's last successful run (``run_once`` returned),
    ``None`` before the first. Read on the thread calling ``Client.ready``.
    """

    running_for: float
    since_success: float | None


class PluginContext:
    """What a plugin's ``run_once`` receives from the started client it runs in.

    One per plugin per started client, built by the client (not by you).

    - ``client_id``: the client's id (six hex characters, as in its threads' names).
    - ``logger``: the client's logger (``Config.logger``).
    - ``schema``: the PostgreSQL schema of drover's tables (``Config.schema``;
      ``None`` for the default installation, found by the connection's
      ``search_path``).
    - ``queues``: the names of the queues the client works, sorted.
    - ``connection(timeout=None)``: a context manager lending one connection
      of the client's pool for the block, returned at its end (committed on
      success, rolled back on an error, on a pool that is not in autocommit;
      drover's own pool is in autocommit, so use ``conn.transaction()`` for
      statements that must be atomic). It counts against the pool's size:
      hold it briefly. A psycopg error inside the block, or no connection
      within ``timeout`` seconds (the pool's own timeout by default), raises
      ``drover.DatabaseError`` with the psycopg error as its ``__cause__``; a
      transient one (the connection lost, the server's statement timeout)
      makes the client not ready until the plugin's next run succeeds.
    - ``stopped`` and ``wait(seconds)``: whether the client is stopping. A
      ``run_once`` that works in rounds checks ``stopped`` between them and
      returns: the client waits 10 s for the plugin's thread at stop.

    Thread-safe: the context is used from the plugin's own thread.
    """

    __slots__ = ("_lend", "_stopping", "client_id", "logger", "queues", "schema")

    def __init__(
        self,
        *,
        client_id: str,
        logger: logging.Logger,
        schema: str | None,
        queues: Sequence[str],
        lend: Callable[[float | None], AbstractContextManager[psycopg.Connection[Any]]],
        stopping: threading.Event,
    ) -> None:
        self.client_id = client_id
        self.logger = logger
        self.schema = schema
        self.queues = tuple(queues)
        self._lend = lend
        self._stopping = stopping

    def connection(
        self, timeout: Duration | None = None
    ) -> AbstractContextManager[psycopg.Connection[Any]]:
        """Lend one connection of the client's pool for a ``with`` block (see the class)."""
        seconds = None if timeout is None else to_seconds(timeout, "connection timeout")
        return self._lend(seconds)

    @property
    def stopped(self) -> bool:
        """True once the client started stopping: return from ``run_once`` soon."""
        return self._stopping.is_set()

    def wait(self, seconds: Duration) -> bool:
        """Sleep up to ``seconds``, cut short when the client stops; True when it is stopping."""
        return self._stopping.wait(max(0.0, to_seconds(seconds, "wait")))

    def __repr__(self) -> str:
        return f"PluginContext(client_id={self.client_id!r}, schema={self.schema!r})"


def _options_of(cls: type) -> tuple[set[str], bool]:
    """The keyword options ``cls.__init__`` takes, and whether it takes ``**anything``."""
    init = cls.__init__  # type: ignore[misc]  # the class's own, read off the class
    params = inspect.signature(init).parameters.values()
    named = {
        p.name
        for p in params
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"
    }
    return named, any(p.kind is p.VAR_KEYWORD for p in params)


class Plugin:
    """A background service a started client runs, with options of its own (ADR 0046).

    Subclass it for a plugin of your own:

    ```python
    class Audit(drover.Plugin):
        name = "audit"

        def __init__(self, *, interval=300, keep=100):
            super().__init__(interval=interval)
            if not isinstance(keep, int) or keep < 1:
                raise self.option_error("keep", f"must be a positive int, not {keep!r}")
            self.keep = keep

        def run_once(self, context):
            with context.connection() as conn:
                ...
    ```

    - ``name`` (a class attribute): lowercase letters, digits, ``-`` and
      ``_``, at most 40, not one of drover's engine services
      (``RESERVED_NAMES``). It names the plugin's thread
      (``drover-<name>-<client id>``), its ``/readyz`` reason, its logs and
      ``drover_service_deaths_total{service}``; a plugin named like one of
      drover's defaults (``"pruner"``, ``"health"``, ``"refresher"``,
      ``"periodic"``) replaces it.
    - ``__init__`` checks the options and raises ``drover.ConfigError``
      naming the plugin and the option (``option_error``, ``duration``); a
      misspelt option is one too. ``interval`` (a ``timedelta`` or seconds,
      positive) is how often ``run_once`` runs.
    - ``run_once(context)``: one round, on the plugin's own thread, first
      one interval after the client starts (at once with ``run_at_start``),
      then every interval until the client stops. An exception is logged
      (a transient database failure once per episode, and the client is
      not ready until a run succeeds) and the next interval tries again;
      the thread never dies of an ``Exception``.
    - ``not_ready(status)`` (optional): a reason the client is not ready, or
      ``None``; see ``PluginStatus``. Called by ``Client.ready`` (so by
      every ``/readyz``) on the caller's thread: keep it a memory read.

    A plugin is configuration: it may serve several clients at once, so keep
    per-client state out of it (the context is per client).
    """

    name: ClassVar[str] = ""
    """The plugin's name (see the class docstring)."""
    run_at_start: ClassVar[bool] = False
    """Run ``run_once`` once as the client starts, before the first interval."""

    def __new__(cls, *args: Any, **options: Any) -> Self:
        # Before __init__: a misspelt option is a ConfigError naming the
        # plugin, with a suggestion, not a bare TypeError.
        label = f"plugin {cls.name!r}" if cls.name else f"plugin {cls.__qualname__}"
        if not isinstance(cls.name, str) or not _NAME.match(cls.name):
            raise ConfigError(
                f"{label} ({cls.__qualname__}) needs a class attribute name of 1 to 40 "
                "lowercase letters, digits, - and _, starting with a letter"
            )
        if cls.name in RESERVED_NAMES:
            raise ConfigError(
                f"{label} ({cls.__qualname__}) takes the name of one of drover's own "
                "services; choose another"
            )
        known, any_name = _options_of(cls)
        unknown = sorted(set(options) - known)
        if unknown and not any_name:
            hints = []
            for key in unknown:
                hints.append(repr(key) + did_you_mean(key, known))
            raise ConfigError(f"{label} has no option {', '.join(hints)}")
        return super().__new__(cls)

    def __init__(self, *, interval: Duration) -> None:
        self._interval: timedelta | None = self.duration("interval", interval)

    @property
    def interval(self) -> timedelta | None:
        """How often ``run_once`` runs; ``None`` for a plugin that keeps its own pace
        (``Periodic``, whose turns follow ``Config.poll_interval``)."""
        return getattr(self, "_interval", None)

    def run_once(self, context: PluginContext) -> object:
        """One round of the plugin's work (see the class docstring); returns anything."""
        raise NotImplementedError(f"plugin {self.name!r} defines no run_once")

    def not_ready(self, status: PluginStatus) -> str | None:
        """A reason the client is not ready, or ``None`` (the default: never in the way)."""
        return None

    def option_error(self, option: str, problem: str) -> ConfigError:
        """A ``drover.ConfigError`` saying ``plugin '<name>': <option> <problem>``, to raise."""
        return ConfigError(f"plugin {self.name!r}: {option} {problem}")

    def duration(self, option: str, value: Duration, *, zero: bool = False) -> timedelta:
        """``value`` (a ``timedelta`` or seconds) as a ``timedelta``, checked: positive (or
        zero with ``zero=True``) and at most ten years; else ``option_error``."""
        seconds = to_seconds(value, f"plugin {self.name!r}: {option}")
        if seconds < 0 or (seconds == 0 and not zero):
            rule = "must not be negative" if zero else "must be positive"
            raise self.option_error(option, f"{rule}, not {seconds:g}s")
        if seconds > MAX_DURATION.total_seconds():
            raise self.option_error(
                option, f"must be at most {MAX_DURATION.days} days, not {seconds:g}s"
            )
        return timedelta(seconds=seconds)

    def __repr__(self) -> str:
        interval = self.interval
        shown = "" if interval is None else f"interval={interval.total_seconds():g}s"
        return f"{type(self).__qualname__}({shown})"


class _BuiltIn(Plugin):
    """drover's own plugins: immutable values, compared by their options, run by the engine."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__module__ != __name__:
            raise TypeError(
                f"drover.plugins.{cls.__mro__[1].__qualname__} cannot be subclassed; write a "
                f"drover.Plugin named {cls.name!r} to replace it"
            )

    def _set(self, **values: object) -> None:
        for key, value in values.items():
            object.__setattr__(self, f"_{key}", value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"drover.plugins.{type(self).__qualname__} is immutable")

    def _options(self) -> tuple[tuple[str, object], ...]:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, _BuiltIn)
        return self._options() == other._options()

    def __hash__(self) -> int:
        return hash((type(self), tuple(k for k, _ in self._options())))

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={_show(v)}" for k, v in self._options())
        return f"{type(self).__qualname__}({shown})"


def _show(value: object) -> str:
    if isinstance(value, timedelta):
        return f"{value.total_seconds():g}s"
    if isinstance(value, tuple):
        return "[" + ", ".join(repr(v) for v in value) + "]"
    return repr(value)


_KEEP_DEFAULT = Retention()


@final
class Pruner(_BuiltIn):
    """Deletes finished jobs past their retention, in the background, one client at a time.

    ``retention``: a ``drover.Retention`` (default: completed and cancelled
    24 h, dead 7 days) or ``None`` to keep every row (no thread).
    ``interval``: how often a started client prunes (positive, default
    60 s). Each batch is its own short transaction under a try-lock, so one
    client prunes while the others skip (ADR 0007). On by default; named
    ``"pruner"``.
    """

    name = "pruner"
    _retention: Retention | None

    def __init__(self, *, retention: Retention | None = _KEEP_DEFAULT, interval: Duration = 60):
        if retention is not None and not isinstance(retention, Retention):
            raise self.option_error(
                "retention", f"must be a drover.Retention or None, not {retention!r}"
            )
        self._set(retention=retention, interval=self.duration("interval", interval))

    @property
    def retention(self) -> Retention | None:
        """How long finished jobs are kept; ``None`` keeps them all."""
        return self._retention

    def _options(self) -> tuple[tuple[str, object], ...]:
        return (("retention", self.retention), ("interval", self.interval))


@final
class HealthProbe(_BuiltIn):
    """Runs the queue doctor on an interval and publishes ``drover_health_findings{code}``.

    ``interval``: how often (default 60 s; zero turns the probe off, no
    thread); the first examination runs one interval after start.
    ``thresholds``: when a fact becomes a finding (``drover.HealthThresholds``,
    the doctor's defaults). A few reads of the server's statistics views on
    one pooled connection, never a lock (ADR 0035). On by default; named
    ``"health"``.
    """

    name = "health"
    _thresholds: HealthThresholds

    def __init__(
        self, *, interval: Duration = 60, thresholds: HealthThresholds | None = None
    ) -> None:
        if thresholds is None:
            thresholds = HealthThresholds()
        elif not isinstance(thresholds, HealthThresholds):
            raise self.option_error(
                "thresholds", f"must be a drover.HealthThresholds, not {thresholds!r}"
            )
        self._set(interval=self.duration("interval", interval, zero=True), thresholds=thresholds)

    @property
    def thresholds(self) -> HealthThresholds:
        """When the probe's facts become findings."""
        return self._thresholds

    def _options(self) -> tuple[tuple[str, object], ...]:
        return (("interval", self.interval), ("thresholds", self.thresholds))


@final
class QueueStats(_BuiltIn):
    """Reads queue depth and oldest age for the gauges and ``/readyz``.

    The gauges are ``drover_queue_depth`` and ``drover_oldest_job_age_seconds``.
    ``interval``: how often (positive, default 15 s); the first read runs
    as the client starts. Scrapes read the last snapshot, never the
    database. The client is not ready (``queue stats stale``) until the
    first read succeeds and again once two intervals pass without one, which
    is how an unreachable database shows. Always on (replace it with a
    plugin named ``"refresher"`` to change what it does); named
    ``"refresher"``, its thread's name since before plugins.
    """

    name = "refresher"
    run_at_start = True

    def __init__(self, *, interval: Duration = 15) -> None:
        self._set(interval=self.duration("interval", interval))

    def not_ready(self, status: PluginStatus) -> str | None:
        """``"queue stats stale"`` until the first read and after two intervals without one."""
        interval = self.interval
        assert interval is not None
        since = status.since_success
        if since is None or since > 2 * interval.total_seconds():
            return "queue stats stale"
        return None

    def _options(self) -> tuple[tuple[str, object], ...]:
        return (("interval", self.interval),)


@final
class Periodic(_BuiltIn):
    """Inserts ``drover.PeriodicJob`` entries on their schedules, from one leading client.

    ``jobs``: the entries (ids unique). Every started client with entries
    competes to lead (a PostgreSQL advisory lock per database; a lease row
    behind a transaction pooler without ``Config.session_url``); the leader
    inserts the ticks, the others stand by and take over within one
    ``Config.poll_interval`` of losing it (ADR 0011). Without entries: no
    thread, no lock attempts. Off by default; named ``"periodic"``.
    """

    name = "periodic"
    _jobs: tuple[PeriodicJob, ...]

    def __init__(self, *, jobs: Sequence[PeriodicJob] = ()) -> None:
        self._set(jobs=check_periodic_jobs(jobs, "plugin 'periodic': jobs", "jobs"), interval=None)

    @property
    def jobs(self) -> tuple[PeriodicJob, ...]:
        """The entries, in the order given."""
        return self._jobs

    def _options(self) -> tuple[tuple[str, object], ...]:
        return (("jobs", self.jobs),)


def check_periodic_jobs(
    entries: object, label: str, short: str | None = None
) -> tuple[PeriodicJob, ...]:
    """``entries`` as a tuple of ``PeriodicJob`` with unique ids, or a ``ConfigError`` naming
    ``label`` (``Config.periodic_jobs`` or the ``Periodic`` plugin's ``jobs``; ``short``
    names the earlier entry of a duplicate, ``label`` by default)."""
    if isinstance(entries, str) or not isinstance(entries, Sequence):
        raise ConfigError(
            f"{label} must be a list of drover.PeriodicJob, not {type(entries).__name__}"
        )
    seen: dict[str, int] = {}
    for index, entry in enumerate(entries):
        if not isinstance(entry, PeriodicJob):
            raise ConfigError(f"{label}[{index}] must be a drover.PeriodicJob, not {entry!r}")
        if entry.id in seen:
            raise ConfigError(
                f"{label}[{index}] duplicates id {entry.id!r} of {short or label}[{seen[entry.id]}]"
            )
        seen[entry.id] = index
    return tuple(entries)


DEFAULT_PLUGINS: tuple[Plugin, ...] = (QueueStats(), Pruner(), HealthProbe())
"""What a started client runs when ``Config.plugins`` names none of them, in start order."""
