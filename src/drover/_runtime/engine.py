"""Builds the services of a started client and runs the shutdown sequence."""

from __future__ import annotations

import concurrent.futures
import time
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
from drover.config import Config
from drover.errors import DrainIncomplete, DroverError
from drover.middleware import Handler

__all__ = ["Engine"]


class Engine:
    """The machinery behind a started client.

    Threads, in start order: the completer, the heartbeat, the rescuer, the
    job pool (``concurrency`` threads, created on demand) and last the
    fetcher, so nothing is claimed before everything that handles a claim
    runs. :meth:`stop` tears them down in the order that loses nothing (see
    its docstring).
    """

    def __init__(
        self,
        *,
        pool: ConnectionPool[Any],
        config: Config,
        chain: Handler,
        publish_stats: Callable[[QueueStats], None],
        client_id: str,
    ) -> None:
        self._pool = pool
        self._config = config
        self._log = config.logger
        lease = config.lease_duration.total_seconds()
        self.inflight = InFlight()
        self.slots = Slots(config.concurrency)
        self.executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=config.concurrency, thread_name_prefix=f"drover-job-{client_id}"
        )
        self.completer = Completer(
            pool=pool, inflight=self.inflight, client_id=client_id, logger=self._log
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
        )
        self.listener: Listener | None = None
        if config.notify:
            self.listener = Listener(
                pool=pool,
                queues=config.queues,
                wake=self.fetcher.wake,
                backoff=config.poll_interval.total_seconds(),
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
        self.rescuer = Rescuer(
            pool=pool,
            interval=config.rescue_interval.total_seconds(),
            lease_seconds=lease,
            retry_policy=config.retry_policy,
            client_id=client_id,
            logger=self._log,
        )

    def _dispatch(self, running: Running) -> None:
        # The fetcher only claims for idle slots, so a pool thread is free for
        # this job: nothing waits in the executor's queue while the database
        # already calls it running.
        self.executor.submit(self.runner.run, running)

    def start(self) -> None:
        self.completer.start()
        self.heartbeat.start()
        self.rescuer.start()
        self.refresher.start()
        if self.pruner is not None:
            self.pruner.start()
        if self.listener is not None:
            self.listener.start()
        self.fetcher.start()
        c = self._config
        self._log.info(
            "drover: worker pool started",
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

        1. The fetcher stops: no claim starts after this.
        2. Wait up to ``timeout`` for every in-flight job to record its outcome
           (the completer and heartbeat keep running meanwhile).
        3. Out of time: cancel the unfinished jobs' contexts and return them to
           the queue in one fenced statement, claimable at once.
        4. The completer writes what is queued; the heartbeat and rescuer stop;
           the pool threads are released (abandoned handlers are not waited for).
        """
        self._log.info("drover: worker pool stopping")
        started = time.monotonic()
        # Normally instant; bounded so a claim stuck on an unresponsive database
        # cannot hold stop() forever (a late claim is untracked and rescued).
        self.fetcher.stop(timeout=None if timeout is None else max(timeout, 5.0))
        if self.listener is not None:
            self.listener.stop()
        remaining = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
        verdict: DrainIncomplete | None = None
        escalated = not self.inflight.wait_empty(remaining)
        if escalated:
            verdict = self._hand_back()
        self.completer.stop(timeout=None)
        self.heartbeat.stop()
        self.rescuer.stop()
        self.refresher.stop()
        if self.pruner is not None:
            self.pruner.stop()
        # After the budget ran out, never wait for pool threads: a handler that
        # ignores cancellation (even one whose job finished or was taken over)
        # would hold stop() hostage.
        self.executor.shutdown(wait=not escalated, cancel_futures=True)
        self._log.info("drover: worker pool stopped")
        return verdict

    def _hand_back(self) -> DrainIncomplete | None:
        unfinished = [r for r in self.inflight.snapshot() if not r.finished]
        if not unfinished:
            return None  # the last job finished just as the budget ran out
        for running in unfinished:
            running.context.cancel("shutdown")
        self._log.warning(
            "drover: shutdown deadline reached with jobs still running",
            extra={"jobs": [r.row.id for r in unfinished]},
        )
        outcomes = [disposition.handed_back(r.row) for r in unfinished]
        try:
            with borrow(self._pool, "return jobs to the queue") as conn:
                results = job_record_outcomes(conn, outcomes)
        except DroverError:
            self._log.error(
                "drover: return jobs to the queue failed; the rescuer will recover them",
                extra={"jobs": [o.id for o in outcomes]},
                exc_info=True,
            )
            results = []
        # A job whose write was refused finished (or was taken over) in the
        # meantime: it is not incomplete. One whose write failed is, and stays
        # running for the rescuer.
        moved_on: set[int] = set()
        for recorded in results:
            fields = {"job_id": recorded.outcome.id, "attempt": recorded.outcome.attempt}
            if recorded.result is WriteResult.APPLIED:
                self._log.warning("drover: returned an unfinished job to the queue", extra=fields)
            else:
                moved_on.add(recorded.outcome.id)
                self._log.debug(
                    "drover: job finished before it could be returned to the queue", extra=fields
                )
        for running in unfinished:
            self.inflight.remove(running.row.id, running.row.attempt)
        incomplete = [r.row.id for r in unfinished if r.row.id not in moved_on]
        return DrainIncomplete(incomplete) if incomplete else None
