"""A started client's engine: the kernel, with the features a client runs attached at its doors.

The kernel (``drover._kernel.engine.Kernel``) claims, runs, completes,
renews, rescues and hands back, and knows no feature (ADR 0045). This
module builds it from a ``Config`` and attaches what the configuration and
drover's built-in features need:

- services (started after the kernel's own, stopped before them): the
  progress writer, the plugins' services (the stats refresher, the pruner,
  the health probe, the periodic ticker and the application's own, ADR
  0046), the listener (or, without one, the cancel poller), the registry
  and the event loop's lag watch;
- hooks: the progress writer before outcomes are written, the duplicate
  ledger for stale writes, the cancel log for jobs that ended cancelled on
  request, and the wake-up of fetchers when a cluster-wide concurrency
  limit frees capacity;
- what every handler's context can reach: its parents' results
  (workflows) and the progress writer.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from drover._db.store import Store
from drover._kernel.claims import InFlight, Slots
from drover._kernel.engine import Kernel
from drover._kernel.kit import Hooks, Kit, Settings
from drover._kernel.service import ThreadService
from drover._runtime.cancels import CancelPoller, Cancels, HardCancel
from drover._runtime.ledger import stale_writes_hook
from drover._runtime.listener import Listener
from drover._runtime.loopwatch import LoopWatch
from drover._runtime.plugins import build_plugins
from drover._runtime.progress import ProgressWriter
from drover._runtime.registry import Registry
from drover._runtime.wiring import Wiring
from drover.config import Config
from drover.errors import DrainIncomplete
from drover.middleware import AsyncHandler, Handler
from drover.ops.metrics import Metrics
from drover.queues import caps_of, format_queues

__all__ = ["Engine"]

# How long start() waits for the listener's LISTEN before the fetcher starts.
_LISTEN_BEFORE_CLAIMING = 2.0


def settings_of(config: Config) -> Settings:
    """The kernel's numbers from a client's configuration."""
    return Settings(
        concurrency=config.concurrency,
        weights={name: q.weight for name, q in config.queues.items()},
        caps=caps_of(config.queues),
        poll_interval=config.poll_interval.total_seconds(),
        lease_seconds=config.lease_duration.total_seconds(),
        heartbeat_interval=config.heartbeat_interval.total_seconds(),
        rescue_interval=config.rescue_interval.total_seconds(),
        retry_policy=config.retry_policy,
        logger=config.logger,
        log_tracebacks=config.log_tracebacks,
    )


class Engine:
    """The machinery behind a started client: the kernel and the features attached to it.

    ``max_jobs`` caps the claims this engine ever makes. ``released`` is
    called with the queues and the kinds of jobs a cluster-wide concurrency
    limit held, once their outcomes are written (the client wakes fetchers
    with it: those of the queues, and every client working the kinds).
    ``hard_cancel`` receives operators' hard cancels of this client's jobs
    (a supervised worker process, ADR 0030). ``before_hand_back`` gets the
    ids of the jobs a stop hands back, just before the write (``drover
    worker``'s hold, ADR 0053). ``async_chain`` (given when some
    workers are ``async def``) adds the event loop and its lag watch.
    ``services`` lists every background loop in start order (the kernel's
    and the features'); ``start`` and ``stop`` are the kernel's.
    """

    def __init__(
        self,
        *,
        store: Store,
        config: Config,
        chain: Handler,
        metrics: Metrics,
        client_id: str,
        max_jobs: int | None = None,
        released: Callable[[Collection[str], Collection[str]], None] | None = None,
        hard_cancel: Callable[[HardCancel], None] | None = None,
        before_hand_back: Callable[[list[int]], None] | None = None,
        async_chain: AsyncHandler | None = None,
    ) -> None:
        self._config = config
        self._log = config.logger
        settings = settings_of(config)
        self.inflight = InFlight(settings.caps)
        # Prefetch (ADR 0058) when every kind runs on one side: the pool's threads
        # and the event loop each cap what runs at the concurrency, so with both
        # in use a prefetched claim could run beyond it.
        workers = config.workers
        mixed = async_chain is not None and len(workers.async_kinds()) != len(workers.kinds())
        prefetch = 0 if mixed else config.concurrency
        self.slots = Slots(config.concurrency, max_jobs, prefetch=prefetch)
        wiring = Wiring(
            store=store,
            config=config,
            inflight=self.inflight,
            slots=self.slots,
            metrics=metrics,
            client_id=client_id,
        )
        hooks = Hooks()
        self.progress = ProgressWriter(wiring)
        self.cancels = Cancels(
            self.inflight, self._log, counted=metrics.cancel_delivered, on_hard=hard_cancel
        )
        kit = Kit(
            store=store.kernel,
            settings=settings,
            inflight=self.inflight,
            slots=self.slots,
            client_id=client_id,
            events=metrics,
            hooks=hooks,
            context_args={
                "read_parents": store.parent_results,
                "progress_sink": self.progress.track,
            },
        )
        hooks.before_write.append(self.progress.before_outcomes)
        hooks.written.append(self.progress.written)
        hooks.written.append(self.cancels.written)
        hooks.stale.append(stale_writes_hook(self._log, store.append_ledger, kit.holder))
        if released is not None:
            hooks.capacity_freed.append(released)
        if before_hand_back is not None:
            hooks.before_hand_back.append(before_hand_back)

        # The plugins' services (ADR 0046): the stats refresher, the pruner, the
        # health probe, the periodic ticker and the application's own, each
        # only when configured (_runtime/plugins.py).
        self.plugins = build_plugins(wiring)
        # Behind a transaction pooler a LISTEN needs Config.session_url; without
        # one the fetcher polls and the cancel poller reads requests (ADR 0040).
        listens = config.notify and store.has_sessions()
        if config.notify and not listens:
            self._log.info(
                "connected through a transaction pooler (PgBouncer) with no Config.session_url: "
                "notifications are off (idle queues are polled every %gs) and the periodic "
                "leader holds a lease row; set Config.session_url for LISTEN",
                config.poll_interval.total_seconds(),
                extra={"event": "pooler_without_sessions"},
            )
        self._store = store
        self.listener: Listener | None = None
        self.cancel_poller: CancelPoller | None = None
        if listens:
            self.listener = Listener(
                wiring,
                wake=self._wake,
                on_cancel=self.cancels.notified,
                on_listening=self._catch_up,
            )
        else:
            self.cancel_poller = CancelPoller(
                self.cancels,
                store.cancel_requests,
                interval=settings.heartbeat_interval,
                client_id=client_id,
                logger=self._log,
            )
        self.registry = Registry(wiring)
        plugins: list[ThreadService] = [
            self.progress,
            # Plugins' services before the listener; those that bring work in
            # (the ticker) after it, so they stop with the intake, before the drain.
            *self.plugins.services(intake=False),
            *(s for s in (self.listener, self.cancel_poller) if s is not None),
            *self.plugins.services(intake=True),
            self.registry,
        ]
        listener = self.listener

        def listening_first() -> None:
            # Listen before the first claim, so an operator's cancel of a job
            # claimed at once is heard by notification. Bounded: with the
            # database slow, claiming starts anyway and the catch-up after the
            # LISTEN covers the gap.
            if listener is not None:
                listener.listening.wait(_LISTEN_BEFORE_CLAIMING)

        self.kernel = Kernel(
            kit,
            chain=chain,
            async_chain=async_chain,
            is_async=config.workers.is_async if async_chain is not None else None,
            plugins=plugins,
            before_fetch=listening_first if listener is not None else None,
        )
        self.loopwatch: LoopWatch | None = None
        if self.kernel.events is not None:
            self.loopwatch = LoopWatch(
                self.kernel.events,
                observe=metrics.loop_lag,
                client_id=client_id,
                logger=self._log,
            )
            # Started right after the loop it watches, stopped right before it.
            index = self.kernel.services.index(self.kernel.events) + 1
            self.kernel.services.insert(index, self.loopwatch)
            self.loopwatch.on_death = metrics.service_died
            self.loopwatch.trouble = self.kernel.trouble
        self.services = self.kernel.services
        self.completer = self.kernel.completer
        self.fetcher = self.kernel.fetcher
        self.heartbeat = self.kernel.heartbeat
        self.rescuer = self.kernel.rescuer
        self.events = self.kernel.events
        self.pool = self.kernel.pool
        self.trouble = self.kernel.trouble

    def _wake(self) -> None:
        self.kernel.wake()

    def _catch_up(self) -> None:
        """After each LISTEN: deliver the cancel requests announced before it."""
        try:
            self.cancels.catch_up(self._store.cancel_requests, "notification")
        except Exception:
            # The next LISTEN (or the operator's next request) tries again.
            self._log.warning("reading cancel requests after LISTEN failed", exc_info=True)

    def dead_services(self) -> list[str]:
        """The names of the services whose thread ended on its own, in start order."""
        return self.kernel.dead_services()

    def start(self) -> None:
        """Start the kernel and every feature service in order (see ``Kernel.start``)."""
        self.kernel.start()
        c = self._config
        queues = format_queues(c.queues)
        self._log.info(
            "worker pool started: concurrency %d, queues %s",
            c.concurrency,
            queues,
            extra={
                "queues": queues,
                "concurrency": c.concurrency,
                "poll_interval": c.poll_interval.total_seconds(),
                "lease_duration": c.lease_duration.total_seconds(),
                "heartbeat_interval": c.heartbeat_interval.total_seconds(),
                "rescue_interval": c.rescue_interval.total_seconds(),
            },
        )

    def wake(self) -> None:
        """Cut the fetcher's poll sleep short (new work was inserted)."""
        self.kernel.wake()

    def stop(self, timeout: float | None) -> DrainIncomplete | None:
        """Stop claiming, drain, hand back, stop every service (see ``Kernel.stop``)."""
        return self.kernel.stop(timeout)
