"""Keeps this client's leases alive while its jobs run."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from drover._db.connections import ConnectionPool, borrow, socket_deadline
from drover._db.runtime import job_extend_leases
from drover._runtime.inflight import InFlight, Running
from drover._runtime.service import PeriodicService
from drover.log import JOB, job_args, job_fields

__all__ = ["Heartbeat"]


class Heartbeat(PeriodicService):
    """Every interval, renews every lease this client holds in one statement.

    Claims that moved on (finished elsewhere, rescued, re-claimed) are never
    resurrected: the heartbeat marks their lease lost
    (``job.lease_lost`` is set and the job's context cancelled with the
    reason "lease lost", so a cooperative handler stops early) and renews
    them no more. A lease whose last renewal is older than a whole lease (the
    database could not be reached meanwhile) is given up the same way,
    before the database lets it lapse: another worker may be about to run
    the job. A failed renewal is logged and retried next interval. It stops
    only after the pool drained, so a draining job never loses its lease.
    """

    kind = "heartbeat"
    action = "extend job leases"

    def __init__(
        self,
        *,
        pool: ConnectionPool[Any],
        inflight: InFlight,
        interval: float,
        lease_seconds: float,
        client_id: str,
        logger: logging.Logger,
        on_lease_lost: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(interval=interval, client_id=client_id, logger=logger)
        self._interval = interval
        self._pool = pool
        self._inflight = inflight
        self._lease = lease_seconds
        self._on_lease_lost = on_lease_lost

    def run_once(self) -> int:
        """Renew every held lease; return how many were renewed."""
        # Give a lease up if it would lapse before the next beat could renew it:
        # the check runs once per interval, and must act before the database's
        # expiry, not an interval after it.
        horizon = time.monotonic() + self._interval
        held: list[Running] = []
        for running in self._inflight.snapshot():
            lease = running.context.lease
            if lease.lost_reason is not None:
                continue
            settled = running.finished or lease.completed_in_tx
            if lease.expired_locally(horizon) and not settled:
                self._lose(running, "its lease ran out without a renewal")
                continue
            held.append(running)
        if not held:
            return 0
        # A renewal that takes half a lease is not coming: break the call (a
        # half-open connection would hang it for good) so the next beat retries
        # on another connection and the local deadline check keeps running.
        with (
            borrow(self._pool, "extend job leases") as conn,
            socket_deadline(conn, max(self._lease / 2, 0.5)),
        ):
            sent = time.monotonic()  # after the wait for a connection, before the statement
            renewals = job_extend_leases(
                conn, [(r.row.id, r.row.attempt) for r in held], self._lease
            )
        by_id = {r.row.id: r for r in held}
        renewed = 0
        for renewal in renewals:
            running = by_id[renewal.id]
            lease = running.context.lease
            if renewal.leased_until is not None:
                lease.renewed(renewal.leased_until, sent + self._lease)
                renewed += 1
            elif not renewal.current and not lease.completed_in_tx and not running.finished:
                self._lose(running, "the job moved on: rescued, re-claimed or cancelled")
        return renewed

    def _lose(self, running: Running, reason: str) -> None:
        if not running.context.lease.lose(reason):
            return
        running.context.cancel("lease lost")
        if self._on_lease_lost is not None:
            self._on_lease_lost()
        row = running.row
        self._log.warning(
            JOB + " lost its lease (%s); its handler is asked to stop and its outcome will be "
            "refused",
            *job_args(row),
            reason,
            extra={**job_fields(row, "lease_lost"), "reason": reason},
        )
