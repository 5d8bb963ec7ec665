"""Builds the services of a started client and runs the shutdown sequence."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection

from drover._db.store import Store
from drover._records import WriteResult
from drover._runtime.aioloop import EventLoop, LoopWatch
from drover._runtime.cancels import Cancels, HardCancel, log_cancelled
from drover._runtime.completer import Completer
from drover._runtime.fetcher import Fetcher
from drover._runtime.heartbeat import Heartbeat
from drover._runtime.inflight import Claim, InFlight, Slots
from drover._runtime.jobpool import JobPool
from drover._runtime.listener import Listener
from drover._runtime.outage import Trouble
from drover._runtime.plugins import build_plugins
from drover._runtime.progress import ProgressWriter
from drover._runtime.registry import Registry
from drover._runtime.rescuer import Rescuer
from drover._runtime.runner import Runner
from drover._runtime.service import ThreadService
from drover._runtime.wiring import Wiring
from drover.config import Config
from drover.errors import DrainIncomplete
from drover.log import JOB, log_job
from drover.middleware import AsyncHandler, Handler
from drover.ops.metrics import Metrics
from drover.queues import caps_of, format_queues

__all__ = ["Engine"]

# How long start() waits for the listener's LISTEN before the fetcher starts.
_LISTEN_BEFORE_CLAIMING = 2.0


class Engine:
    """The machinery behind a started client.

    ``services`` lists the background loops in start order: the
    completer, the heartbeat, the rescuer, the plugins' services (the stats
    refresher, the pruner, the health probe and the application's plugins,
    when configured), the listener, the plugins' intake services (the
    ticker), the registry, and last the fetcher, so nothing is claimed
    before everything that handles a claim runs (the fetcher also waits up
    to 2 s for the listener's LISTEN, so a cancel of a job claimed at once
    is heard by notification). The job
    pool's ``concurrency`` threads start before them all. ``start``
    starts them in that order and, if one fails to start, stops those
    already running; ``stop`` stops them in reverse order, draining
    after the intake services (see its docstring). ``max_jobs`` caps the
    claims this engine ever makes. ``released`` is called with the queues
    of jobs a cluster-wide concurrency limit held, once their outcomes are
    written (the client wakes fetchers with it). ``hard_cancel`` receives
    operators' hard cancels of this client's jobs (a supervised worker
    process, ADR 0030). ``async_chain`` (given when some workers are
    ``async def``) adds the event loop and its lag watch after the completer
    (ADR 0033): the fetcher hands async jobs to the loop, the rest to the
    pool, all under the one ``concurrency``.
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
        released: Callable[[Collection[str]], None] | None = None,
        hard_cancel: Callable[[HardCancel], None] | None = None,
        async_chain: AsyncHandler | None = None,
    ) -> None:
        self._config = config
        self._log = config.logger
        self.inflight = InFlight(caps_of(config.queues))
        self.slots = Slots(config.concurrency, max_jobs)
        wiring = Wiring(
            store=store,
            config=config,
            inflight=self.inflight,
            slots=self.slots,
            metrics=metrics,
            client_id=client_id,
        )
        self.progress = ProgressWriter(wiring)
        self.completer = Completer(wiring, released=released, progress=self.progress)
        runner = Runner(
            chain=chain,
            retry_policy=config.retry_policy,
            slots=self.slots,
            inflight=self.inflight,
            settle=self.completer.settle,
            logger=self._log,
        )
        self.pool = JobPool(
            concurrency=config.concurrency, client_id=client_id, run=runner.run, logger=self._log
        )
        self.events: EventLoop | None = None
        self.loopwatch: LoopWatch | None = None
        dispatch: Callable[[list[Claim]], None] = self.pool.dispatch
        if async_chain is not None:
            self.events = EventLoop(
                chain=async_chain,
                retry_policy=config.retry_policy,
                slots=self.slots,
                inflight=self.inflight,
                settle=self.completer.settle,
                client_id=client_id,
                logger=self._log,
            )
            self.loopwatch = LoopWatch(
                self.events, observe=metrics.loop_lag, client_id=client_id, logger=self._log
            )
            dispatch = self._router(self.events)
        self.fetcher = Fetcher(wiring, dispatch=dispatch)
        self.cancels = Cancels(
            self.inflight, self._log, counted=metrics.cancel_delivered, on_hard=hard_cancel
        )
        self.heartbeat = Heartbeat(wiring, cancels=self.cancels)
        self.rescuer = Rescuer(wiring)
        # The plugins' services (ADR 0046): the stats refresher, the pruner, the
        # health probe, the periodic ticker and the application's own, each
        # only when configured (_runtime/plugins.py).
        self.plugins = build_plugins(wiring)
        # Behind a transaction pooler a LISTEN needs Config.session_url; without
        # one the fetcher polls and the heartbeat delivers cancels (ADR 0040).
        listens = config.notify and store.has_sessions()
        if config.notify and not listens:
            self._log.info(
                "connected through a transaction pooler (PgBouncer) with no Config.session_url: "
                "notifications are off (idle queues are polled every %gs) and the periodic "
                "leader holds a lease row; set Config.session_url for LISTEN",
                config.poll_interval.total_seconds(),
                extra={"event": "pooler_without_sessions"},
            )
        self.listener = (
            Listener(wiring, wake=self.fetcher.wake, on_cancel=self.cancels.notified)
            if listens
            else None
        )
        self.registry = Registry(wiring)
        self.services: list[ThreadService] = [
            self.completer,
            *(s for s in (self.events, self.loopwatch) if s is not None),
            self.progress,
            self.heartbeat,
            self.rescuer,
            # Plugins' services before the listener; those that bring work in
            # (the ticker) after it, so they stop with the intake, before the drain.
            *self.plugins.services(intake=False),
            *(s for s in (self.listener,) if s is not None),
            *self.plugins.services(intake=True),
            self.registry,
            self.fetcher,
        ]
        self.trouble = Trouble(self._log, counted=metrics.database_error)
        """The loops' transient database failures: one warning per episode, and readiness."""
        for service in self.services:
            service.on_death = metrics.service_died
            service.trouble = self.trouble
            self.trouble.watch(service.name, service.retry_now)

    def _router(self, events: EventLoop) -> Callable[[list[Claim]], None]:
        """The fetcher's dispatch: async kinds to the loop, the others to the pool threads."""
        is_async = self._config.workers.is_async
        pool = self.pool.dispatch
        loop = events.dispatch

        def dispatch(claims: list[Claim]) -> None:
            on_loop = [c for c in claims if is_async(c.row.kind)]
            if len(on_loop) == len(claims):
                loop(claims)
                return
            if on_loop:
                loop(on_loop)
                pool([c for c in claims if not is_async(c.row.kind)])
            else:
                pool(claims)

        return dispatch

    def dead_services(self) -> list[str]:
        """The names of the services whose thread ended on its own, in start order."""
        return [s.name for s in self.services if s.died is not None]

    def start(self) -> None:
        """Start every service in order; on failure stop the started ones and re-raise."""
        started: list[ThreadService] = []
        try:
            if self.events is None:
                # With async workers the threads start with the first sync job.
                self.pool.start()
            for service in self.services:
                if service is self.fetcher and self.listener is not None:
                    # Listen before the first claim, so an operator's cancel of a
                    # job claimed at once is heard by notification, not a heartbeat
                    # later. Bounded: with the database slow, claiming starts anyway
                    # and polling (and the heartbeat) cover the gap.
                    self.listener.listening.wait(_LISTEN_BEFORE_CLAIMING)
                service.start()
                started.append(service)
        except BaseException:
            for service in reversed(started):
                service.stop()
            self.pool.end(wait=False)
            raise
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
        self.fetcher.wake()

    def stop(self, timeout: float | None) -> DrainIncomplete | None:
        """Stop claiming, drain, hand back what did not finish, then stop the services.

        1. The intake services (fetcher, listener) stop: no claim starts after this.
        2. Wait up to ``timeout`` for every in-flight job to record its outcome
           (the completer and heartbeat keep running meanwhile).
        3. Out of time: return the unfinished jobs to the queue in one fenced
           statement, claimable at once, then cancel their contexts (an async
           job's task with it).
        4. The other services stop in reverse start order, the completer last
           (it writes what is queued); the pool threads are released
           (abandoned handlers are not waited for).
        """
        self._log.info("worker pool stopping")
        started = time.monotonic()
        # Intake first (reverse start order puts the fetcher and the listener
        # there): no claim starts after this.
        for service in reversed(self.services):
            if service.intake:
                service.stop(timeout=service.join_timeout(timeout))
        remaining = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
        verdict: DrainIncomplete | None = None
        escalated = not self.inflight.wait_empty(remaining)
        if escalated:
            verdict = self._hand_back()
        # Then the rest, in reverse start order: the completer, first started,
        # stops last and writes whatever outcomes are still queued.
        for service in reversed(self.services):
            if not service.intake:
                service.stop(timeout=service.join_timeout(timeout))
        # After the budget ran out, never wait for pool threads: a handler that
        # ignores cancellation (even one whose job finished or was taken over)
        # would hold stop() hostage.
        self.pool.end(wait=not escalated)
        self._log.info("worker pool stopped")
        return verdict

    def _hand_back(self) -> DrainIncomplete | None:
        unfinished = [c for c in self.inflight.snapshot() if not c.finished]
        if not unfinished:
            return None  # the last job finished just as the budget ran out
        for claim in unfinished:
            # Lost before the write, so a heartbeat racing it takes the
            # refusal for what it is, not for a lease lost elsewhere.
            claim.lease._lose("handed back at shutdown")
        self._log.warning(
            "shutdown deadline reached with %d job(s) still running: %s",
            len(unfinished),
            ", ".join(str(c.row.id) for c in unfinished),
            extra={"jobs": [c.row.id for c in unfinished]},
        )
        try:
            results = self.completer.hand_back(unfinished) or []
        finally:
            # Cancelled once the hand-back is written: a handler that stops at
            # once (an async task is cancelled within a loop turn) cannot
            # record its own failure first and turn the hand-back into a retry
            # at the policy's time.
            for claim in unfinished:
                claim.context.cancel("shutdown")
        # A job whose write was refused finished (or was taken over) in the
        # meantime: it is not incomplete. One whose write failed is, and stays
        # running for the rescuer.
        moved_on: set[int] = set()
        rows = {c.row.id: c.row for c in unfinished}
        for recorded in results:
            row = rows[recorded.outcome.id]
            if recorded.result is WriteResult.APPLIED and recorded.cancelled:
                log_cancelled(self._log, row.id, row.attempt)
            elif recorded.result is WriteResult.APPLIED:
                log_job(
                    self._log,
                    logging.WARNING,
                    row,
                    "job_handed_back",
                    "returned unfinished " + JOB + " to the queue",
                )
            else:
                moved_on.add(recorded.outcome.id)
                log_job(
                    self._log,
                    logging.DEBUG,
                    row,
                    "job_finished_before_hand_back",
                    JOB + " finished before it could be returned to the queue",
                )
        incomplete = [c.row.id for c in unfinished if c.row.id not in moved_on]
        return DrainIncomplete(incomplete) if incomplete else None
