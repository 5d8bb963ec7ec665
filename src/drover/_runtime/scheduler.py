"""Inserts periodic jobs on their schedules, from one leading client per database."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from drover._db import periodic as db
from drover._db.connections import Connection, ConnectionPool, dedicated_connect
from drover._encode import encode_insert
from drover._runtime.service import ThreadService
from drover.errors import DroverError
from drover.periodic import PeriodicJob, tick_key, tick_opts

__all__ = ["PeriodicScheduler"]

ENQUEUED, DUPLICATE, FAILED = "enqueued", "duplicate", "failed"
_CONNECT = "connect for the periodic scheduler lock"


class PeriodicScheduler(ThreadService):
    """Competes for leadership and, while it leads, inserts each periodic job's ticks.

    Leadership is a session advisory lock held on a connection of this
    service's own. Every turn (at most one ``poll_interval`` apart) the
    leader reads the database clock on that connection, which also proves
    its session, and so its lock, is alive; a client that does not lead
    tries the lock instead. A lost connection is lost leadership (INFO),
    and another client takes over on its next turn.

    A tick is inserted in one transaction with the entry's watermark (ADR
    0011): a fire time is never inserted twice, even by two clients that
    both believe they lead, and a tick that fell due while no client led
    fires once, late, however many periods were missed. An insert that
    fails is logged and retried on the next turn; nothing here ends the
    loop. The turn sleeps until the soonest fire, cut short by stop.
    """

    kind = "periodic"
    intake = True  # inserts work: stops before the drain, like the fetcher

    def __init__(
        self,
        *,
        pool: ConnectionPool[Any],
        jobs: Sequence[PeriodicJob],
        poll_interval: float,
        count: Callable[[str, str], None],
        leading: Callable[[bool], None],
        client_id: str,
        logger: logging.Logger,
    ) -> None:
        super().__init__(client_id=client_id, logger=logger)
        self._pool = pool
        self._jobs = tuple(jobs)
        self._poll = poll_interval
        self._count = count
        self._leading_hook = leading
        self._conn: Connection | None = None
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
            now = db.db_now(conn)
        except DroverError as exc:
            self._lost(f"its connection failed: {exc}")
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

    def _fire(self, conn: Connection, job: PeriodicJob, fire: datetime, now: datetime) -> bool:
        # Everything due up to now is folded into this one tick: a late
        # leader, or one that was stalled, fires a missed period once.
        following = job.schedule.next(now)
        try:
            params = encode_insert(job.args, tick_opts(job, fire))
            tick = db.fire_tick(
                conn, params, periodic_id=job.id, fire=fire, upto=now, next_fire=following
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
            if conn.broken or conn.closed:
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

    def _lead(self) -> Connection | None:
        """This client's lock connection once it leads, else None (after trying once)."""
        if self._conn is None or self._conn.closed:
            self._conn = None
            try:
                self._conn = dedicated_connect(
                    self._pool, "connect for the periodic scheduler lock", "scheduler"
                )
            except DroverError:
                self._log.error("connect for the periodic scheduler lock failed", exc_info=True)
                return None
        conn = self._conn
        if self.leading:
            return conn
        try:
            if not db.try_lock(conn):
                return None
            self._gain(conn)
        except DroverError as exc:
            self._log.error("acquire the periodic scheduler lock failed", exc_info=True)
            self._lost(f"taking it failed: {exc}")
            return None
        return conn

    def _gain(self, conn: Connection) -> None:
        db.record_leader(conn, self._client_id, socket.gethostname(), os.getpid())
        watermarks = {
            job.id: db.define(
                conn,
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
        now = db.db_now(conn)
        for job in self._jobs:
            # A new id starts from now; a known one fires once if a tick fell
            # due while nobody led; run_on_start fires once now regardless.
            due = now if job.run_on_start else job.schedule.next(watermarks[job.id])
            self._next[job.id] = due
            db.record_next(conn, job.id, due)
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
