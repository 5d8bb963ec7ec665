"""drover's metric families on a per-client registry."""

from __future__ import annotations

import time
from collections.abc import Collection, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from drover import job
from drover.context import JobContext
from drover.errors import ConfigError
from drover.health import CODES
from drover.job import JobRow
from drover.middleware import AsyncHandler, Handler
from drover.ops.executions import Executions

__all__ = [
    "DURATION_BUCKETS",
    "PUBLISHED_STATES",
    "RERUN_REASONS",
    "SERVICES",
    "STALE_WRITES",
    "TICK_OUTCOMES",
    "Metrics",
]

DURATION_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600,
)  # fmt: skip
PUBLISHED_STATES = tuple(state.value for state in job.PUBLISHED_STATES)
SERVICES = (
    "completer", "heartbeat", "rescuer", "refresher", "pruner", "listener", "periodic", "fetcher",
    "notifier", "eventloop", "loopwatch", "health",
)  # fmt: skip
LOOP_LAG_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
TICK_OUTCOMES = ("enqueued", "duplicate", "failed")
# The duplicate ledger's counters (ADR 0037): why a job was sent to run again,
# and which stale writes the fence refused.
RERUN_REASONS = ("lease_expired", "handed_back")
STALE_WRITES = ("complete", "fail", "snooze", "cancel", "heartbeat", "progress")
REFUSALS = ("not running", "lease lost", "not found")


class _QueueGauges(Collector):
    """Depth and age from the latest refresh: a scrape reads memory, never the database.

    The snapshot is replaced in one assignment, so a scrape sees either the
    old or the new set of series, never a live series missing in between.
    """

    def __init__(self, configured: Collection[str]) -> None:
        self._configured = tuple(configured)
        zero_depth = {(q, s): 0 for q in self._configured for s in PUBLISHED_STATES}
        self._snapshot: tuple[dict[tuple[str, str], int], dict[str, float]] = (
            zero_depth,
            dict.fromkeys(self._configured, 0.0),
        )

    def publish(self, depth: dict[tuple[str, str], int], ages: dict[str, float]) -> None:
        queues = set(self._configured) | {q for q, _ in depth} | set(ages)
        full_depth = {(q, s): depth.get((q, s), 0) for q in queues for s in PUBLISHED_STATES}
        full_ages = {q: ages.get(q, 0.0) for q in queues}
        self._snapshot = (full_depth, full_ages)

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily("drover_queue_depth", "", labels=["queue", "state"])
        yield GaugeMetricFamily("drover_oldest_job_age_seconds", "", labels=["queue"])

    def collect(self) -> Iterator[GaugeMetricFamily]:
        depth, ages = self._snapshot
        depth_family = GaugeMetricFamily(
            "drover_queue_depth",
            "Jobs per queue in one state (completed and cancelled are not counted).",
            labels=["queue", "state"],
        )
        for (queue, state), value in sorted(depth.items()):
            depth_family.add_metric([queue, state], value)
        yield depth_family
        age_family = GaugeMetricFamily(
            "drover_oldest_job_age_seconds",
            "Age of the oldest job claimable now; 0 when none is waiting.",
            labels=["queue"],
        )
        for queue, age in sorted(ages.items()):
            age_family.add_metric([queue], age)
        yield age_family


class Metrics:
    """The metric families of one client, and the middleware that feeds them.

    Per execution (from the middleware): ``drover_jobs_completed_total`` or
    ``drover_jobs_failed_total`` (exactly one of them; snooze and cancel count
    as failed), one ``drover_job_duration_seconds`` observation, and
    ``drover_jobs_executing`` up then down. From the stats refresher:
    ``drover_queue_depth`` and ``drover_oldest_job_age_seconds``. Constant:
    ``drover_pool_concurrency``. When a background thread dies:
    ``drover_service_deaths_total{service}``. From the periodic scheduler:
    ``drover_periodic_ticks_total{id,outcome}`` and ``drover_periodic_leader``.
    Reliability: ``drover_listener_reconnects_total``,
    ``drover_writes_refused_total{reason}`` (a stale claim's write the fence
    refused), ``drover_leases_lost_total`` and
    ``drover_database_errors_total{service,kind}``. The duplicate ledger (ADR 0037):
    ``drover_reruns_total{reason}`` (jobs this client's rescuer or shutdown
    sent to run again) and ``drover_stale_writes_refused_total{reason,write}``
    (this client's writes of claims that had moved on). With async workers, from the
    loop watch: ``drover_event_loop_lag_seconds``. From the health probe
    (the queue doctor, every ``drover.plugins.HealthProbe`` interval):
    ``drover_health_findings{code}`` (findings of each code, 0 for every code
    not found) and ``drover_health_checked_timestamp_seconds``. Job kind is
    never a label.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        concurrency: int,
        queues: Collection[str],
        periodic_ids: Collection[str] = (),
    ) -> None:
        self.registry = registry
        try:
            self._executions = Executions(queues, DURATION_BUCKETS)
            registry.register(self._executions)
            concurrency_gauge = Gauge(
                "drover_pool_concurrency",
                "Configured pool size; compare with drover_jobs_executing for saturation.",
                registry=registry,
            )
            self._deaths = Counter(
                "drover_service_deaths",
                "Background service threads that ended on their own (the client is not ready).",
                ["service"],
                registry=registry,
            )
            self._ticks = Counter(
                "drover_periodic_ticks",
                "Periodic ticks by outcome: enqueued, duplicate (already fired) or failed.",
                ["id", "outcome"],
                registry=registry,
            )
            self._leader = Gauge(
                "drover_periodic_leader",
                "1 while this client leads the periodic scheduler, else 0.",
                registry=registry,
            )
            self._reconnects = Counter(
                "drover_listener_reconnects",
                "Times the LISTEN connection was lost and re-established.",
                registry=registry,
            )
            self._refused = Counter(
                "drover_writes_refused",
                "Fenced writes the database refused because the claim had moved on "
                "(rescued, re-claimed, cancelled or finished elsewhere).",
                ["reason"],
                registry=registry,
            )
            self._cancels = Counter(
                "drover_cancels_delivered",
                "Operators' requests to cancel a running job that reached this client, by how "
                "it learned of them: notification or heartbeat (ADR 0030).",
                ["via"],
                registry=registry,
            )
            self._loop_lag = Histogram(
                "drover_event_loop_lag_seconds",
                "How late the event loop that runs async handlers ran a probe scheduled on it: "
                "a handler that blocks the loop shows here (docs/async.md).",
                buckets=LOOP_LAG_BUCKETS,
                registry=registry,
            )
            self._lease_lost = Counter(
                "drover_leases_lost",
                "Running jobs whose lease this client learned it no longer holds "
                "(the heartbeat found the claim gone, or the lease ran out unrenewed).",
                registry=registry,
            )
            self._health = Gauge(
                "drover_health_findings",
                "Findings of the last queue-doctor examination by code (0 when not found); "
                "`drover doctor` prints the evidence and the remedy (docs/production.md).",
                ["code"],
                registry=registry,
            )
            self._health_checked = Gauge(
                "drover_health_checked_timestamp_seconds",
                "Unix time of the last successful queue-doctor examination (0 before the first).",
                registry=registry,
            )
            self._reruns = Counter(
                "drover_reruns",
                "Jobs sent to run again while an attempt may still have been running: "
                "rescued after their lease expired (by this client's rescuer) or handed back "
                "at this client's shutdown. Each is an entry in the job's ledger.",
                ["reason"],
                registry=registry,
            )
            self._stale = Counter(
                "drover_stale_writes_refused",
                "This client's writes for a claim that had moved on, refused by the fence, by "
                "why (reason) and what was written (write). Each is an entry in the job's ledger.",
                ["reason", "write"],
                registry=registry,
            )
            self._db_errors = Counter(
                "drover_database_errors",
                "Failed database calls of the background loops, by service and kind: "
                "connection (none could be had), statement_timeout, lock_timeout, conflict "
                "or other (docs/reliability.md, connection exhaustion and server limits).",
                ["service", "kind"],
                registry=registry,
            )
            self._queues = _QueueGauges(queues)
            registry.register(self._queues)
        except ValueError as exc:
            raise ConfigError(
                "Config.metrics_registry already holds drover's metrics: give each client "
                f"its own registry ({exc})"
            ) from None
        concurrency_gauge.set(concurrency)
        for service in SERVICES:
            self._deaths.labels(service)
        for reason in REFUSALS:
            self._refused.labels(reason)
            for write in STALE_WRITES:
                self._stale.labels(reason, write)
        for reason in RERUN_REASONS:
            self._reruns.labels(reason)
        for via in ("notification", "heartbeat"):
            self._cancels.labels(via)
        for code in CODES:
            self._health.labels(code)
        for periodic_id in periodic_ids:
            for outcome in TICK_OUTCOMES:
                self._ticks.labels(periodic_id, outcome)

    def publish_queue_stats(
        self, depth: dict[tuple[str, str], int], ages: dict[str, float]
    ) -> None:
        """Replace the depth and age series with a fresh refresh."""
        self._queues.publish(depth, ages)

    def publish_health(self, codes: Collection[str], checked_at: float) -> None:
        """Replace the findings gauges with one examination's ``codes`` (one entry per finding)."""
        counts = dict.fromkeys(CODES, 0)
        for code in codes:
            counts[code] = counts.get(code, 0) + 1
        for code, count in counts.items():
            self._health.labels(code).set(count)
        self._health_checked.set(checked_at)

    def periodic_tick(self, periodic_id: str, outcome: str) -> None:
        """Count one periodic tick's outcome."""
        self._ticks.labels(periodic_id, outcome).inc()

    def periodic_leading(self, leading: bool) -> None:
        """Set the leader gauge."""
        self._leader.set(1 if leading else 0)

    def listener_reconnected(self) -> None:
        """Count one re-established LISTEN connection."""
        self._reconnects.inc()

    def write_refused(self, reason: str) -> None:
        """Count one fenced write refused (``reason``: not running, lease lost, not found)."""
        self._refused.labels(reason).inc()

    def rerun(self, reason: str) -> None:
        """Count one job sent to run again (``reason``: lease_expired or handed_back)."""
        self._reruns.labels(reason).inc()

    def stale_write_refused(self, reason: str, write: str) -> None:
        """Count one stale write refused (``reason``: why; ``write``: what it tried)."""
        self._stale.labels(reason, write).inc()

    def lease_lost(self) -> None:
        """Count one running job whose lease was lost."""
        self._lease_lost.inc()

    def cancel_delivered(self, via: str) -> None:
        """Count one delivered request to cancel a running job (``via``: how it came)."""
        self._cancels.labels(via).inc()

    def known_service(self, service: str) -> None:
        """Publish ``drover_service_deaths_total{service}`` at 0 for a plugin's service, so an
        alert on its increase sees the first death."""
        self._deaths.labels(service)

    def service_died(self, service: str) -> None:
        """Count a background service whose thread ended on its own."""
        self._deaths.labels(service).inc()

    def database_error(self, service: str, kind: str) -> None:
        """Count one failed database call of a background loop (``kind``: see ``classify``)."""
        self._db_errors.labels(service, kind).inc()

    def loop_lag(self, seconds: float) -> None:
        """Observe one event-loop lag probe (async handlers' loop)."""
        self._loop_lag.observe(seconds)

    def async_middleware(self, next_handler: AsyncHandler) -> AsyncHandler:
        """The async form of ``middleware``, for async handlers on the client's event loop.

        Every task runs on the loop's one thread, so that thread's tally
        counts them all, still without a lock.
        """
        executions = self._executions
        clock = time.perf_counter

        async def handle(ctx: JobContext, row: JobRow) -> None:
            tally = executions.begin()
            started = clock()
            ok = False
            try:
                await next_handler(ctx, row)
                ok = True
            finally:
                executions.end(tally, row.queue, ok, clock() - started)

        return handle

    def middleware(self, next_handler: Handler) -> Handler:
        """Count, time and track every execution (installed by the client, inside Logging).

        The tally is the running thread's own (see ``Executions``): no
        lock is taken per job.
        """
        executions = self._executions
        clock = time.perf_counter

        def handle(ctx: JobContext, row: JobRow) -> None:
            tally = executions.begin()
            started = clock()
            ok = False
            try:
                next_handler(ctx, row)
                ok = True
            finally:
                executions.end(tally, row.queue, ok, clock() - started)

        return handle
