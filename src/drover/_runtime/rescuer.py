"""Recovers jobs whose worker stopped renewing its lease (crashed, killed, partitioned)."""

from __future__ import annotations

import logging
from typing import Any

from drover._db.connections import ConnectionPool, borrow
from drover._db.runtime import WriteResult, job_claim_expired, job_record_outcomes
from drover._runtime import disposition
from drover._runtime.service import PeriodicService
from drover.log import JOB, job_args, job_fields
from drover.retry import RetryPolicy

__all__ = ["Rescuer"]

BATCH = 100
MAX_ROUNDS = 10


class Rescuer(PeriodicService):
    """Every interval, moves running jobs with an expired lease on: retryable, or dead.

    A sweep re-leases up to 100 expired rows at a time (SKIP LOCKED, so
    concurrent sweeps from several clients never handle one row twice), runs
    each through the same disposition as a failed attempt with the error
    ``drover: lease expired, worker presumed dead``, and records them in one
    statement. It never spends an attempt: the attempt that stranded the row
    was really used. At most ten rounds per sweep, so it cannot monopolise a
    connection. Recovery after a crash takes about lease + rescue interval.
    """

    kind = "rescuer"
    action = "rescue expired jobs"

    def __init__(
        self,
        *,
        pool: ConnectionPool[Any],
        interval: float,
        lease_seconds: float,
        retry_policy: RetryPolicy,
        client_id: str,
        logger: logging.Logger,
    ) -> None:
        super().__init__(interval=interval, client_id=client_id, logger=logger)
        self._pool = pool
        self._lease = lease_seconds
        self._policy = retry_policy

    def run_once(self) -> int:
        """Sweep once; return how many jobs were moved on."""
        moved = 0
        for _ in range(MAX_ROUNDS):
            with borrow(self._pool, "rescue expired jobs") as conn:
                rows = job_claim_expired(conn, BATCH, self._lease)
                outcomes = []
                for row in rows:
                    self._log.warning(
                        JOB + " lease expired, worker presumed dead",
                        *job_args(row),
                        extra=job_fields(row, "job_lease_expired"),
                    )
                    outcomes.append(
                        disposition.failed(
                            row,
                            None,
                            policy=self._policy,
                            log=self._log,
                            message=disposition.RESCUE_MESSAGE,
                        )
                    )
                results = job_record_outcomes(conn, outcomes)
            moved += sum(1 for r in results if r.result is WriteResult.APPLIED)
            if len(rows) < BATCH:
                break
        return moved
