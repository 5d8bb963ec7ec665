"""The kernel's engine: its services in order, and the one shutdown sequence with the hand-back."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from drover._kernel.aioloop import EventLoop
from drover._kernel.claims import Claim
from drover._kernel.completer import Completer
from drover._kernel.executor import Executor
from drover._kernel.fetcher import Fetcher
from drover._kernel.heartbeat import Heartbeat
from drover._kernel.jobpool import JobPool
from drover._kernel.kit import Kit
from drover._kernel.outage import Trouble
from drover._kernel.rescuer import Rescuer
from drover._kernel.service import ThreadService
from drover._records import WriteResult
from drover.errors import DrainIncomplete
from drover.log import JOB, log_job
from drover.middleware import AsyncHandler, Handler

__all__ = ["Kernel"]


class Kernel:
    """Claims, runs, completes, renews, rescues and hands back: one started client's core.

    ``services`` lists the background loops in start order: the completer,
    the event loop (with async workers), the heartbeat, the rescuer, then the
    ``plugins`` services features add (in their order), and last the
    fetcher, so nothing is claimed before everything that handles a claim
    runs. The job pool's threads start before them all (with async workers,
    with the first sync job). ``before_fetch`` runs just before the fetcher
    starts (a feature waits there, bounded, for what must be ready first).

    ``chain`` runs sync kinds on the pool's ``concurrency`` threads;
    ``async_chain`` and ``is_async`` (``None`` without async workers) route
    ``async def`` kinds to the event loop, all under the one ``concurrency``.

    Thread-safe: ``start`` and ``stop`` are called once each, by the client's
    lifecycle under its lock; ``wake`` from any thread.
    """

    def __init__(
        self,
        kit: Kit,
        *,
        chain: Handler,
        async_chain: AsyncHandler | None = None,
        is_async: Callable[[str], bool] | None = None,
        plugins: Sequence[ThreadService] = (),
        before_fetch: Callable[[], None] | None = None,
    ) -> None:
        self.kit = kit
        self._log = kit.log
        self.inflight = kit.inflight
        self.slots = kit.slots
        self.completer = Completer(kit)
        self.executor = Executor(
            chain=chain,
            async_chain=async_chain,
            retry_policy=kit.settings.retry_policy,
            slots=kit.slots,
            inflight=kit.inflight,
            settle=self.completer.settle,
            logger=kit.log,
            tracebacks=kit.settings.log_tracebacks,
        )
        self.pool = JobPool(
            concurrency=kit.settings.concurrency,
            client_id=kit.client_id,
            run=self.executor.run,
            logger=kit.log,
        )
        self.events: EventLoop | None = None
        dispatch: Callable[[list[Claim]], None] = self.pool.dispatch
        if async_chain is not None and is_async is not None:
            self.events = EventLoop(
                executor=self.executor,
                client_id=kit.client_id,
                logger=kit.log,
                limit=kit.settings.concurrency,
            )
            dispatch = self._router(self.events, is_async)
        self.fetcher = Fetcher(kit, dispatch=dispatch, riders=self.completer)
        self.heartbeat = Heartbeat(kit)
        self.rescuer = Rescuer(kit)
        self._before_fetch = before_fetch
        self.services: list[ThreadService] = [
            self.completer,
            *([self.events] if self.events is not None else []),
            self.heartbeat,
            self.rescuer,
            *plugins,
            self.fetcher,
        ]
        self.trouble = Trouble(self._log, counted=kit.events.database_error)
        """The loops' transient database failures: one warning per episode, and readiness."""
        for service in self.services:
            service.on_death = kit.events.service_died
            service.trouble = self.trouble
            self.trouble.watch(service.name, service.retry_now)

    def _router(
        self, events: EventLoop, is_async: Callable[[str], bool]
    ) -> Callable[[list[Claim]], None]:
        """The fetcher's dispatch: async kinds to the loop, the others to the pool threads."""
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
                if service is self.fetcher and self._before_fetch is not None:
                    self._before_fetch()
                service.start()
                started.append(service)
        except BaseException:
            for service in reversed(started):
                service.stop()
            self.pool.end(wait=False)
            raise

    def wake(self) -> None:
        """Cut the fetcher's poll sleep short (new work was inserted)."""
        self.fetcher.wake()

    def stop(self, timeout: float | None) -> DrainIncomplete | None:
        """Stop claiming, drain, hand back what did not finish, then stop the services.

        1. The intake services (the fetcher, and any plugin marked ``intake``)
           stop: no claim starts after this.
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
        for service in reversed(self.services):
            if service.intake:
                service.stop(timeout=service.join_timeout(timeout))
        remaining = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
        verdict: DrainIncomplete | None = None
        escalated = not self.inflight.wait_empty(remaining)
        if escalated:
            verdict = self._hand_back()
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
        # running for the rescuer. One the store ended otherwise (cancelled on
        # an operator's request) is reported by the ``written`` hooks.
        moved_on: set[int] = set()
        rows = {c.row.id: c.row for c in unfinished}
        for recorded in results:
            row = rows[recorded.outcome.id]
            if recorded.result is WriteResult.APPLIED:
                if not recorded.cancelled:
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
