"""Client configuration: defaults in one place, structural mistakes refused, tuning corrected."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from prometheus_client import CollectorRegistry

from drover._durations import Duration, to_seconds
from drover.errors import ConfigError
from drover.job import MAX_QUEUE_LENGTH
from drover.middleware import Middleware
from drover.ops.server import parse_address
from drover.retention import Retention
from drover.retry import ExponentialRetryPolicy, RetryPolicy
from drover.worker import Workers

__all__ = ["Config"]

_log = logging.getLogger("drover")

DEFAULT_CONCURRENCY = 10
DEFAULT_POLL_INTERVAL = 1.0
DEFAULT_LEASE = 60.0
DEFAULT_SHUTDOWN_TIMEOUT = 30.0
DEFAULT_STATS_INTERVAL = 15.0
DEFAULT_PRUNE_INTERVAL = 60.0
DEFAULT_RETENTION = Retention()
MIN_LEASE = 0.001
MAX_QUEUE_WEIGHT = 100_000


class Config:
    """How a :class:`drover.Client` runs jobs. Immutable once built.

    Every duration accepts a ``timedelta`` or seconds. Structural mistakes (an
    empty queue name, a middleware that is not callable, an unknown keyword)
    raise :class:`drover.ConfigError`. Out-of-range tuning values are corrected
    with a WARNING on the ``drover`` logger, so a typo in a number never stops a
    deploy:

    - ``workers``: the :class:`drover.Workers` registry. A started client
      claims jobs of every kind on its queues; a kind with no worker fails (and
      retries) so rolling deploys heal. Processes that only insert should not
      start a client.
    - ``concurrency`` (10): pool threads, i.e. jobs run at once. ``<= 0`` → 10.
    - ``queues`` (``{"default": 1}``): queue name → weight in 1..100 000. All
      queues share the one pool; weight decides which queue is tried first.
    - ``poll_interval`` (1 s): wait after a round that claimed nothing. ``<= 0`` → 1 s.
    - ``lease_duration`` (60 s): how long a claim is held without a heartbeat.
      Below 1 ms → 60 s.
    - ``heartbeat_interval`` (lease / 3): how often held leases are renewed.
      ``<= 0`` or ``None`` → lease / 3; ``>= lease`` → lease / 3 with a warning.
    - ``rescue_interval`` (= lease): how often expired leases are swept.
    - ``retry_policy`` (:class:`drover.ExponentialRetryPolicy`).
    - ``middleware``: wraps every execution, outermost first; composed once.
    - ``logger``: where drover logs (default: the ``drover`` logger).
    - ``shutdown_timeout`` (30 s): the drain budget :meth:`Client.run` gives
      :meth:`Client.stop` after SIGINT/SIGTERM.
    - ``notify`` (True): inserts send a LISTEN/NOTIFY wake-up for their queue
      and a started client keeps one dedicated connection listening, so an
      idle queue starts new work in milliseconds instead of up to
      ``poll_interval``. Polling stays the source of truth. ``insert`` and
      ``insert_many`` send it after their commit from a background thread,
      coalesced (at most one round every 10 ms); ``insert_tx`` and
      ``insert_many_tx`` queue it inside the caller's transaction, delivered
      at commit. Turn it off behind PgBouncer in transaction mode (LISTEN
      cannot work there) or when hundreds of processes insert with
      ``insert_tx`` at once (a NOTIFY inside a transaction serialises the
      commits of notifying transactions).
    - ``stats_interval`` (15 s): how often queue depth and oldest age are read
      for the gauges. 0 → default; negative → default with a warning.
    - ``metrics_registry``: the ``prometheus_client.CollectorRegistry`` this
      client records on (default: a private one, so clients never collide).
      Two clients cannot share one: that is a :class:`drover.ConfigError`.
    - ``ops_addr`` (``""``): ``host:port`` for ``/metrics``, ``/healthz`` and
      ``/readyz``, bound at ``start()``; empty means no listener and no thread.
    - ``retention`` (:class:`drover.Retention`: completed and cancelled 24 h,
      dead 7 days): finished jobs older than this are deleted in the
      background by started clients, one at a time; ``None`` keeps every row.
    - ``prune_interval`` (60 s): how often a started client prunes.
    """

    __module__ = "drover"

    __slots__ = (
        "concurrency",
        "heartbeat_interval",
        "lease_duration",
        "logger",
        "metrics_registry",
        "middleware",
        "notify",
        "ops_addr",
        "poll_interval",
        "prune_interval",
        "queues",
        "rescue_interval",
        "retention",
        "retry_policy",
        "shutdown_timeout",
        "stats_interval",
        "workers",
    )

    workers: Workers
    concurrency: int
    queues: Mapping[str, int]
    poll_interval: timedelta
    lease_duration: timedelta
    heartbeat_interval: timedelta
    rescue_interval: timedelta
    retry_policy: RetryPolicy
    middleware: tuple[Middleware, ...]
    notify: bool
    stats_interval: timedelta
    metrics_registry: CollectorRegistry | None
    ops_addr: str
    retention: Retention | None
    prune_interval: timedelta
    logger: logging.Logger
    shutdown_timeout: timedelta

    def __init__(
        self,
        *,
        workers: Workers | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        queues: Mapping[str, int] | None = None,
        poll_interval: Duration = DEFAULT_POLL_INTERVAL,
        lease_duration: Duration = DEFAULT_LEASE,
        heartbeat_interval: Duration | None = None,
        rescue_interval: Duration | None = None,
        retry_policy: RetryPolicy | None = None,
        middleware: Sequence[Middleware] = (),
        logger: logging.Logger | None = None,
        shutdown_timeout: Duration = DEFAULT_SHUTDOWN_TIMEOUT,
        notify: bool = True,
        stats_interval: Duration = DEFAULT_STATS_INTERVAL,
        metrics_registry: CollectorRegistry | None = None,
        ops_addr: str = "",
        retention: Retention | None = DEFAULT_RETENTION,
        prune_interval: Duration = DEFAULT_PRUNE_INTERVAL,
        **unknown: Any,
    ) -> None:
        if unknown:
            raise ConfigError(f"unknown Config field(s): {', '.join(sorted(unknown))}")
        log = logger or _log
        if not isinstance(log, logging.Logger):
            raise ConfigError(f"Config.logger must be a logging.Logger, not {type(log).__name__}")
        set_ = object.__setattr__
        set_(self, "logger", log)
        set_(self, "workers", _workers(workers))
        set_(self, "concurrency", _concurrency(concurrency, log))
        set_(self, "queues", _queues(queues, log))
        poll = _duration(poll_interval, "poll_interval")
        if poll <= 0:
            poll = DEFAULT_POLL_INTERVAL
        set_(self, "poll_interval", timedelta(seconds=poll))
        lease = _duration(lease_duration, "lease_duration")
        if lease < MIN_LEASE:
            log.warning(
                "drover: lease_duration must be at least 1 ms; using the default instead",
                extra={"lease_duration": lease, "default": DEFAULT_LEASE},
            )
            lease = DEFAULT_LEASE
        set_(self, "lease_duration", timedelta(seconds=lease))
        heartbeat = _duration(heartbeat_interval, "heartbeat_interval") if heartbeat_interval else 0
        if heartbeat >= lease:
            log.warning(
                "drover: heartbeat interval must be shorter than the lease; "
                "using the default instead",
                extra={"heartbeat_interval": heartbeat, "lease_duration": lease},
            )
        if heartbeat <= 0 or heartbeat >= lease:
            heartbeat = lease / 3
        set_(self, "heartbeat_interval", timedelta(seconds=heartbeat))
        rescue = _duration(rescue_interval, "rescue_interval") if rescue_interval else 0
        set_(self, "rescue_interval", timedelta(seconds=rescue if rescue > 0 else lease))
        if retry_policy is None:
            retry_policy = ExponentialRetryPolicy()
        elif not callable(getattr(retry_policy, "next_retry", None)):
            raise ConfigError(
                "Config.retry_policy needs a next_retry(job) method; "
                f"got {type(retry_policy).__name__}"
            )
        set_(self, "retry_policy", retry_policy)
        set_(self, "middleware", _middleware(middleware))
        budget = _duration(shutdown_timeout, "shutdown_timeout")
        set_(self, "shutdown_timeout", timedelta(seconds=max(0.0, budget)))
        if not isinstance(notify, bool):
            raise ConfigError(f"Config.notify must be True or False, not {notify!r}")
        set_(self, "notify", notify)
        stats = _duration(stats_interval, "stats_interval")
        if stats < 0:
            log.warning(
                "drover: stats interval must be positive; using the default instead",
                extra={"stats_interval": stats, "default": DEFAULT_STATS_INTERVAL},
            )
        set_(
            self,
            "stats_interval",
            timedelta(seconds=stats if stats > 0 else DEFAULT_STATS_INTERVAL),
        )
        if metrics_registry is not None and not isinstance(metrics_registry, CollectorRegistry):
            raise ConfigError(
                "Config.metrics_registry must be a prometheus_client.CollectorRegistry, "
                f"not {type(metrics_registry).__name__}"
            )
        set_(self, "metrics_registry", metrics_registry)
        if not isinstance(ops_addr, str):
            raise ConfigError(f"Config.ops_addr must be a 'host:port' string, not {ops_addr!r}")
        if ops_addr:
            parse_address(ops_addr)
        set_(self, "ops_addr", ops_addr)
        if retention is not None and not isinstance(retention, Retention):
            raise ConfigError(
                f"Config.retention must be a drover.Retention or None, not {retention!r}"
            )
        set_(self, "retention", retention)
        prune = _duration(prune_interval, "prune_interval")
        set_(
            self,
            "prune_interval",
            timedelta(seconds=prune if prune > 0 else DEFAULT_PRUNE_INTERVAL),
        )

    def replace(self, **changes: Any) -> Config:
        """A new Config with ``changes`` applied and everything re-validated.

        Unknown field names raise :class:`drover.ConfigError`, as in the constructor.
        """
        fields = {name: getattr(self, name) for name in self.__slots__}
        fields.update(changes)
        return Config(**fields)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Config is immutable; build a new one instead of setting {name}")

    def __repr__(self) -> str:
        queues = ",".join(f"{q}={w}" for q, w in self.queues.items())
        return (
            f"Config(concurrency={self.concurrency}, queues={queues}, "
            f"poll_interval={self.poll_interval.total_seconds()}s, "
            f"lease_duration={self.lease_duration.total_seconds()}s, "
            f"heartbeat_interval={self.heartbeat_interval.total_seconds()}s, "
            f"rescue_interval={self.rescue_interval.total_seconds()}s, "
            f"workers={self.workers.kinds()})"
        )


def _duration(value: Duration, name: str) -> float:
    try:
        return to_seconds(value, f"Config.{name}")
    except (TypeError, ValueError) as exc:
        raise ConfigError(str(exc)) from None


def _workers(workers: Workers | None) -> Workers:
    if workers is None:
        return Workers()
    if not isinstance(workers, Workers):
        raise ConfigError(f"Config.workers must be a drover.Workers, not {type(workers).__name__}")
    return workers


def _concurrency(value: int, log: logging.Logger) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"Config.concurrency must be an int, not {type(value).__name__}")
    if value <= 0:
        log.warning(
            "drover: concurrency must be at least one; using the default instead",
            extra={"concurrency": value, "default": DEFAULT_CONCURRENCY},
        )
        return DEFAULT_CONCURRENCY
    return value


def _queues(queues: Mapping[str, int] | None, log: logging.Logger) -> Mapping[str, int]:
    if queues is None:
        return {"default": 1}
    if not isinstance(queues, Mapping):
        raise ConfigError(
            f"Config.queues must map queue names to weights, not {type(queues).__name__}"
        )
    if not queues:
        return {"default": 1}
    result: dict[str, int] = {}
    for name in sorted(queues, key=str):
        weight = queues[name]
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"Config.queues contains an empty or non-text queue name: {name!r}")
        if len(name) > MAX_QUEUE_LENGTH or "\x00" in name:
            raise ConfigError(f"Config.queues: queue name {name[:40]!r}... is not valid")
        if isinstance(weight, bool) or not isinstance(weight, int):
            raise ConfigError(f"Config.queues[{name!r}] must be an int weight, not {weight!r}")
        if weight < 1:
            log.warning(
                "drover: queue weight must be at least one; using one instead",
                extra={"queue": name, "weight": weight},
            )
            weight = 1
        elif weight > MAX_QUEUE_WEIGHT:
            log.warning(
                "drover: queue weight is above the maximum; using the maximum instead",
                extra={"queue": name, "weight": weight, "maximum": MAX_QUEUE_WEIGHT},
            )
            weight = MAX_QUEUE_WEIGHT
        result[name] = weight
    return result


def _middleware(middleware: Sequence[Middleware]) -> tuple[Middleware, ...]:
    if isinstance(middleware, str) or not isinstance(middleware, Sequence):
        raise ConfigError(
            f"Config.middleware must be a list of middleware, not {type(middleware).__name__}"
        )
    # Copy now: later changes to the caller's list must not change the chain.
    chain = tuple(middleware)
    for index, item in enumerate(chain):
        if item is None or not callable(item):
            raise ConfigError(f"Config.middleware[{index}] is {item!r}, not a callable")
    return chain
