"""Inserts periodic jobs on their schedules, from one leading client per database."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from datetime import datetime

from drover._db.store import Store
from drover._db.ticks import Leadership, LeasedLeadership
from drover._insert.encode import encode_insert
from drover._insert.ticks import insert_tick
from drover._kernel.service import ThreadService
from drover._runtime.wiring import Wiring
from drover.errors import DroverError
from drover.insert_middleware import insert_chain
from drover.periodic import PeriodicJob, tick_key, tick_opts

__all__ = ["Ticker"]

ENQUEUED, DUPLICATE, FAILED = "enqueued", "duplicate", "failed"


class Ticker(ThreadService):
    """Competes for leadership and, while it leads, inserts each periodic job's ticks.

    Built by the ``drover.plugins.Periodic`` plugin, with its jobs.

    Leadership is a session advisory lock held on a connection of this
    service's own. Every turn (at most one ``poll_interval`` apart) the
    leader reads the database clock on that connection, which also proves
    its session, and so its lock, is alive; a client that does not lead
    tries the lock instead. A lost connection is lost leadership (INFO),
    and another client takes over on its next turn.

    Behind a transaction pooler with no ``Config.session_url`` (no session
    to hold a lock, ADR 0040) leadership is a lease row instead, renewed on
    the same turns and expiring ``lease_ttl`` seconds (five poll intervals,
    at least one second) after the last renewal on the database clock; a
    clean stop deletes it, so the next leader takes over on its next turn.

    A tick is inserted in one transaction with the entry's watermark (ADR
    0011): a fire time is never inserted twice, even by two clients that
    both believe they lead, and a tick that fell due while no client led
    fires once, late, however many periods were missed. An insert that
    fails is logged and retried on the next turn; nothing here ends the
    loop. The turn sleeps until the soonest fire, cut short by stop.
    """

    name = "periodic"
    intake = True  # inserts work: stops before the drain, like the fetcher

    def __init__(self, wiring: Wiring, *, jobs: Sequence[PeriodicJob]) -> None:
        super().__init__(client_id=wiring.client_id, logger=wiring.log)
        self._store: Store = wiring.store
        self._jobs = tuple(jobs)
        self._insert_chain = insert_chain(wiring.config.middleware)
        self._poll = wiring.config.poll_interval.total_seconds()
        self._count = wiring.metrics.periodic_tick
        self._leading_hook = wiring.metrics.periodic_leading
        self._conn: Leadership | LeasedLeadership | None = None
        self.lease_ttl = max(1.0, 5 * self._poll)
        """How long a lease row outlives its last renewal (lease-row leadership only)."""
        self.leading = False
        """True while this client holds leadership (read by tests and /readyz-style probes)."""
        self._next: dict[str, datetime | None] = {}

    # --- the loop -------------------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            while not self._stopping.is_set():
                try:
                    wait = self.run_once()
                except Exception:
                    # Backstop: every database call below handles its own
                    # errors; anything else is a bug, logged, and retried.
                    self._log.error("periodic scheduler turn failed", exc_info=True)
                    wait = self._poll
                self._stopping.wait(wait)
        finally:
            self._resign()

    def run_once(self) -> float:
        """One turn: lead (or try to), insert what is due; return seconds until the next turn."""
        conn = self._lead()
        if conn is None:
            return self._poll
        try:
            now = conn.now()
        except DroverError as exc:
            self._lost(f"checking it failed: {exc}")
            return self._poll
        failed = False
        for job in self._jobs:
            fire = self._next.get(job.id)
            if fire is None or fire > now:
                continue
            if not self._fire(conn, job, fire, now):
                failed = True
                if not self.leading:
                    return self._poll
        if failed:
            return self._poll  # no hot loop on a failing insert
        soonest = min((f for f in self._next.values() if f is not None), default=None)
        if soonest is None:
            return self._poll
        # Never longer than a poll interval: leadership is re-checked each turn.
        return min(max((soonest - now).total_seconds(), 0.0), self._poll)

    def _fire(
        self, conn: Leadership | LeasedLeadership, job: PeriodicJob, fire: datetime, now: datetime
    ) -> bool:
        # Everything due up to now is folded into this one tick: a late
        # leader, or one that was stalled, fires a missed period once.
        following = job.schedule.next(now)
        try:
            tick = insert_tick(
                self._insert_chain,
                conn,
                job.args,
                tick_opts(job, fire),
                periodic_id=job.id,
                fire=fire,
                upto=now,
                next_fire=following,
            )
        except DroverError as exc:
            self._count(job.id, FAILED)
            self._log.error(
                "enqueue periodic job %s (fire time %s) failed; retrying in %ss",
                job.id,
                fire.isoformat(),
                self._poll,
                extra={"periodic_id": job.id, "fire_time": fire.isoformat(), "error": str(exc)},
                exc_info=True,
            )
            if conn.broken:
                self._lost(f"its connection failed: {exc}")
            return False
        fields = {"periodic_id": job.id, "fire_time": fire.isoformat()}
        if tick.row is not None:
            self._count(job.id, ENQUEUED)
            self._log.info(
                "periodic job %s fired for %s: job %d",
                job.id,
                fire.isoformat(),
                tick.row.id,
                extra={**fields, "job_id": tick.row.id, "event": "periodic_enqueued"},
            )
        else:
            self._count(job.id, DUPLICATE)
            self._log.debug(
                "skipped duplicate periodic tick %s",
                tick_key(job.id, fire),
                extra={**fields, "event": "periodic_duplicate"},
            )
        self._next[job.id] = job.schedule.next(tick.fired_through)
        return True

    # --- leadership -----------------------------------------------------------------------------

    def _lead(self) -> Leadership | LeasedLeadership | None:
        """This client's leadership once it leads, else None (after trying once)."""
        if self._conn is None or self._conn.broken:
            self._conn = None
            try:
                self._conn = (
                    self._store.lead()
                    if self._store.has_sessions()
                    else self._store.lead_by_lease(self._client_id, self.lease_ttl)
                )
            except DroverError:
                self._log.error("connect for the periodic scheduler lock failed", exc_info=True)
                return None
        conn = self._conn
        if self.leading:
            return conn
        try:
            if not conn.try_lock():
                return None
            self._gain(conn)
        except DroverError as exc:
            self._log.error("acquire the periodic scheduler lock failed", exc_info=True)
            self._lost(f"taking it failed: {exc}")
            return None
        return conn

    def _gain(self, conn: Leadership | LeasedLeadership) -> None:
        conn.record_leader(self._client_id, socket.gethostname(), os.getpid())
        watermarks = {
            job.id: conn.define(
                periodic_id=job.id,
                schedule=job.schedule.spec,
                timezone=job.timezone.key,
                kind=job.args.kind,
                queue=encode_insert(job.args, job.opts).queue,
                client_id=self._client_id,
            )
            for job in self._jobs
        }
        # Read after registering: later than any new entry's watermark, so a
        # run_on_start tick is never mistaken for one already fired.
        now = conn.now()
        for job in self._jobs:
            # A new id starts from now; a known one fires once if a tick fell
            # due while nobody led; run_on_start fires once now regardless.
            due = now if job.run_on_start else job.schedule.next(watermarks[job.id])
            self._next[job.id] = due
            conn.record_next(job.id, due)
        self.leading = True
        self._leading_hook(True)
        self._log.info(
            "became the periodic scheduler leader for %d periodic job(s)",
            len(self._jobs),
            extra={"event": "periodic_leader_gained"},
        )

    def _lost(self, reason: str) -> None:
        if self.leading:
            self.leading = False
            self._leading_hook(False)
            self._log.info(
                "lost periodic scheduler leadership: %s",
                reason,
                extra={"event": "periodic_leader_lost"},
            )
        self._close()

    def _resign(self) -> None:
        if self.leading:
            self.leading = False
            self._leading_hook(False)
            self._log.info(
                "gave up periodic scheduler leadership (stopping)",
                extra={"event": "periodic_leader_released"},
            )
        # Closing the session releases its lock: no unlock round trip to fail.
        self._close()

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                self._log.warning("closing the periodic scheduler connection failed", exc_info=True)
