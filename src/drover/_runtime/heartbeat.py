"""Keeps this client's leases alive while its jobs run."""

from __future__ import annotations

import logging
from typing import Any

from drover._db.connections import ConnectionPool, borrow
from drover._db.runtime import job_extend_leases
from drover._runtime.inflight import InFlight
from drover._runtime.service import PeriodicService

__all__ = ["Heartbeat"]


class Heartbeat(PeriodicService):
    """Every interval, renews every lease this client holds in one statement.

    Claims that moved on (finished, rescued, handed back) are skipped by the
    fence, never resurrected. A failure is logged and the jobs keep running; if
    renewals keep failing past the lease, the rescuer of some client will
    presume this one dead and the jobs may run twice (ADR 0002). It stops only
    after the pool drained, so a draining job never loses its lease.
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
    ) -> None:
        super().__init__(interval=interval, client_id=client_id, logger=logger)
        self._pool = pool
        self._inflight = inflight
        self._lease = lease_seconds

    def run_once(self) -> int:
        """Renew every held lease; return how many were still this client's."""
        held = self._inflight.held()
        if not held:
            return 0
        with borrow(self._pool, "extend job leases") as conn:
            renewed = job_extend_leases(conn, held, self._lease)
        return len(renewed)
