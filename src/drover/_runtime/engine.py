"""Builds the services of a started client and runs the shutdown sequence."""

from __future__ import annotations

import concurrent.futures
import contextlib
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from drover._db.connections import ConnectionPool, borrow
from drover._db.runtime import WriteResult, job_record_outcomes
from drover._db.stats import QueueStats
from drover._runtime import disposition
from drover._runtime.completer import Completer
from drover._runtime.fetcher import Fetcher
from drover._runtime.heartbeat import Heartbeat
from drover._runtime.inflight import InFlight, Running, Slots
from drover._runtime.listener import Listener
from drover._runtime.pruner import Pruner
from drover._runtime.refresher import StatsRefresher
from drover._runtime.rescuer import Rescuer
from drover._runtime.runner import Runner
from drover._runtime.scheduler import PeriodicScheduler
from drover._runtime.service import ThreadService
from drover.config import Config
from drover.errors import DrainIncomplete, DroverError
from drover.log import JOB, job_args, job_fields
from drover.middleware import Handler
from drover.ops.metrics import Metrics

__all__ = ["Engine"]


# How often an idle pool thread checks that the main thread is still running
# (the fallback where the hook below is missing).
_IDLE_CHECK = 1.0
# What ThreadPoolExecutor itself uses to wake its idle threads when the
# interpreter exits, before it joins them; private to the standard library
# (3.9+), so looked up rather than relied on.
_register_atexit: Callable[[Callable[[], None]], None] | None = getattr(
    threading, "_register_atexit", None
)


class Engine:
    """The machinery behind a started client.

    :attr:`services` lists the background loops in start order: the
    completer, the heartbeat, the rescuer, the stats refresher, the pruner,
    the listener and the periodic scheduler (when configured), and last the
    fetcher, so nothing is claimed before everything that handles a claim
    runs. The job pool's ``concurrency`` threads start before them all, each
    serving jobs from one queue. :meth:`start` starts them in that order and,
    if one fails to start, stops those already running;
    :meth:`stop` stops them in reverse order, draining after the intake
    services (see its docstring).
    """

    def __init__(
        self,
        *,
        pool: ConnectionPool[Any],
        config: Config,
        chain: Handler,
        publish_stats: Callable[[QueueStats], None],
        on_death: Callable[[ThreadService], None],
        metrics: Metrics,
        client_id: str,
        claim_budget: int | None = None,
    ) -> None:
        self._pool = pool
        self._config = config
        self._log = config.logger
        lease = config.lease_duration.total_seconds()
        self.inflight = InFlight()
        self.slots = Slots(config.concurrency, claim_budget)
        self.executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=config.concurrency, thread_name_prefix=f"drover-job-{client_id}"
        )
        self._ready: queue.SimpleQueue[Running | None] = queue.SimpleQueue()
        self.completer = Completer(
            pool=pool,
            inflight=self.inflight,
            client_id=client_id,
            logger=self._log,
            on_refused=metrics.write_refused,
        )
        self.runner = Runner(
            chain=chain,
            retry_policy=config.retry_policy,
            slots=self.slots,
            inflight=self.inflight,
            submit=self.completer.submit,
            logger=self._log,
        )
        self.fetcher = Fetcher(
            pool=pool,
            queues=config.queues,
            slots=self.slots,
            inflight=self.inflight,
            dispatch=self._dispatch,
            poll_interval=config.poll_interval.total_seconds(),
            lease_seconds=lease,
            client_id=client_id,
            logger=self._log,
        )
        self.heartbeat = Heartbeat(
            pool=pool,
            inflight=self.inflight,
            interval=config.heartbeat_interval.total_seconds(),
            lease_seconds=lease,
            client_id=client_id,
            logger=self._log,
            on_lease_lost=metrics.lease_lost,
        )
        self.listener: Listener | None = None
        if config.notify:
            self.listener = Listener(
                pool=pool,
                queues=config.queues,
                wake=self.fetcher.wake,
                on_reconnect=metrics.listener_reconnected,
                client_id=client_id,
                logger=self._log,
            )
        self.refresher = StatsRefresher(
            pool=pool,
            publish=publish_stats,
            interval=config.stats_interval.total_seconds(),
            client_id=client_id,
            logger=self._log,
        )
        self.pruner: Pruner | None = None
        if config.retention is not None and config.retention.by_state():
            self.pruner = Pruner(
                pool=pool,
                retention=config.retention.by_state(),
                interval=config.prune_interval.total_seconds(),
                client_id=client_id,
                logger=self._log,
            )
        self.scheduler: PeriodicScheduler | None = None
        if config.periodic_jobs:
            self.scheduler = PeriodicScheduler(
                pool=pool,
                jobs=config.periodic_jobs,
                poll_interval=config.poll_interval.total_seconds(),
                count=metrics.periodic_tick,
                leading=metrics.periodic_leading,
                client_id=client_id,
                logger=self._log,
            )
        self.rescuer = Rescuer(
            pool=pool,
            interval=config.rescue_interval.total_seconds(),
            lease_seconds=lease,
            retry_policy=config.retry_policy,
            client_id=client_id,
            logger=self._log,
        )

        self.services: list[ThreadService] = [
            self.completer,
            self.heartbeat,
            self.rescuer,
            self.refresher,
            *([self.pruner] if self.pruner is not None else []),
            *([self.listener] if self.listener is not None else []),
            *([self.scheduler] if self.scheduler is not None else []),
            self.fetcher,
        ]
        for service in self.services:
            service.on_death = on_death

    def dead_services(self) -> list[str]:
        """The kinds of the services whose thread ended on its own, in start order."""
        return [s.kind for s in self.services if s.died is not None]

    def _dispatch(self, running: Running) -> None:
        # The fetcher only claims for idle slots, so a pool thread is free for
        # this job: nothing waits in this queue while the database already
        # calls it running.
        self._ready.put(running)

    def _serve(self) -> None:
        """One pool thread's life: run the jobs handed to it until told to end (``None``).

        One long task per executor thread, fed through a queue, instead of one
        ``submit`` per job: a submit builds a Future (a Condition and its
        locks) and takes the executor's locks, and on a drain of short jobs
        that was a tenth of the claim thread's time.
        """
        main = threading.main_thread()
        while True:
            try:
                running = self._ready.get(timeout=_IDLE_CHECK)
            except queue.Empty:
                # The fallback for _end_at_exit: once the main thread has
                # finished, end, as an idle executor thread would.
                if not main.is_alive():
                    return
                continue
            if running is None:
                return
            try:
                self.runner.run(running)
            except BaseException:  # run() handles everything; this keeps the thread
                self._log.critical("a pool thread's job runner failed", exc_info=True)

    def start(self) -> None:
        """Start every service in order; on failure stop the started ones and re-raise."""
        started: list[ThreadService] = []
        try:
            self._end_at_exit()
            for _ in range(self._config.concurrency):
                self.executor.submit(self._serve)
            for service in self.services:
                service.start()
                started.append(service)
        except BaseException:
            for service in reversed(started):
                service.stop()
            self._end_pool_threads(wait=False)
            raise
        c = self._config
        self._log.info(
            "worker pool started: concurrency %d, queues %s",
            c.concurrency,
            ",".join(f"{q}={w}" for q, w in c.queues.items()),
            extra={
                "queues": ",".join(f"{q}={w}" for q, w in c.queues.items()),
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
        3. Out of time: cancel the unfinished jobs' contexts and return them to
           the queue in one fenced statement, claimable at once.
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
        self._end_pool_threads(wait=not escalated)
        self._log.info("worker pool stopped")
        return verdict

    def _end_at_exit(self) -> None:
        # A client never stopped must not hold the interpreter at exit: the
        # executor joins its threads then, and ours wait on our queue, not on
        # the executor's. The hook runs before that join and ends idle ones.
        if _register_atexit is None:
            return
        ref = weakref.ref(self)

        def at_exit() -> None:
            engine = ref()
            if engine is not None:
                for _ in range(engine._config.concurrency):
                    engine._ready.put(None)

        with contextlib.suppress(RuntimeError):  # the interpreter is already exiting
            _register_atexit(at_exit)

    def _end_pool_threads(self, *, wait: bool) -> None:
        # One end marker per thread; a thread still inside an abandoned handler
        # takes its marker when (if) the handler returns.
        for _ in range(self._config.concurrency):
            self._ready.put(None)
        self.executor.shutdown(wait=wait, cancel_futures=True)

    def _hand_back(self) -> DrainIncomplete | None:
        unfinished = [r for r in self.inflight.snapshot() if not r.finished]
        if not unfinished:
            return None  # the last job finished just as the budget ran out
        for running in unfinished:
            # Lost before the write, so a heartbeat racing it takes the
            # refusal for what it is, not for a lease lost elsewhere.
            running.context.lease.lose("handed back at shutdown")
            running.context.cancel("shutdown")
        self._log.warning(
            "shutdown deadline reached with %d job(s) still running: %s",
            len(unfinished),
            ", ".join(str(r.row.id) for r in unfinished),
            extra={"jobs": [r.row.id for r in unfinished]},
        )
        # A job whose handler already completed it in its own transaction is
        # that transaction's to settle; writing to its row would wait on the
        # transaction's lock and could hold stop() past its budget.
        returnable = [r for r in unfinished if not r.context.lease.completed_in_tx]
        outcomes = [disposition.handed_back(r.row) for r in returnable]
        try:
            with borrow(self._pool, "return jobs to the queue") as conn:
                results = job_record_outcomes(conn, outcomes)
        except DroverError:
            self._log.error(
                "returning jobs %s to the queue failed; the rescuer will recover them",
                ", ".join(str(o.id) for o in outcomes),
                extra={"jobs": [o.id for o in outcomes]},
                exc_info=True,
            )
            results = []
        # A job whose write was refused finished (or was taken over) in the
        # meantime: it is not incomplete. One whose write failed is, and stays
        # running for the rescuer.
        moved_on: set[int] = set()
        rows = {r.row.id: r.row for r in unfinished}
        for recorded in results:
            row = rows[recorded.outcome.id]
            if recorded.result is WriteResult.APPLIED:
                self._log.warning(
                    "returned unfinished " + JOB + " to the queue",
                    *job_args(row),
                    extra=job_fields(row, "job_handed_back"),
                )
            else:
                moved_on.add(recorded.outcome.id)
                self._log.debug(
                    JOB + " finished before it could be returned to the queue",
                    *job_args(row),
                    extra=job_fields(row, "job_finished_before_hand_back"),
                )
        for running in unfinished:
            self.inflight.remove(running.row.id, running.row.attempt)
        incomplete = [r.row.id for r in unfinished if r.row.id not in moved_on]
        return DrainIncomplete(incomplete) if incomplete else None
