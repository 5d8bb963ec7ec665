"""Recovers jobs whose worker stopped renewing its lease (crashed, killed, partitioned)."""

from __future__ import annotations

import logging

from drover._kernel import disposition
from drover._kernel.disposition import Decision, Note
from drover._kernel.kit import Kit, run_hooks
from drover._kernel.service import IntervalService
from drover._records import Outcome, WriteResult
from drover.job import JobRow, JobState
from drover.log import JOB

__all__ = ["Rescuer"]

BATCH = 100
MAX_ROUNDS = 10

# A rescue to one of these sends the job to run again.
RERUN_STATES = frozenset({JobState.AVAILABLE, JobState.SCHEDULED, JobState.RETRYABLE})

_EXPIRED = Note(logging.WARNING, "job_lease_expired", JOB + " lease expired, worker presumed dead")


class Rescuer(IntervalService):
    """Every interval, moves running jobs with an expired lease on: retryable, or dead.

    A sweep re-leases up to 100 expired rows at a time (SKIP LOCKED, so
    concurrent sweeps from several clients never handle one row twice), runs
    each through the same disposition as a failed attempt with the error
    ``drover: lease expired, worker presumed dead``, and records them in one
    statement. It never spends an attempt: the attempt that stranded the row
    was really used. At most ten rounds per sweep, so it cannot monopolise a
    connection. Recovery after a crash takes about lease + rescue interval.
    The store may end a rescued job otherwise than decided (a job an
    operator asked to cancel ends ``cancelled``, ADR 0030) and note each
    rescue in the job's duplicate ledger in the same transaction (ADR
    0037); the ``written`` hooks see every result. One sent to run again
    counts in ``drover_reruns_total{reason="lease_expired"}``.
    """

    name = "rescuer"
    action = "rescue expired jobs"

    def __init__(self, kit: Kit) -> None:
        interval = kit.settings.rescue_interval
        super().__init__(interval=interval, client_id=kit.client_id, logger=kit.log)
        self._store = kit.store
        self._lease_seconds = kit.lease_seconds
        self._policy = kit.settings.retry_policy
        self._holder = kit.holder
        self._events = kit.events
        self._written = kit.hooks.written

    def _decide(self, row: JobRow) -> Outcome:
        decision = disposition.failed(
            row, None, policy=self._policy, message=disposition.RESCUE_MESSAGE
        )
        disposition.report(self._log, row, Decision(decision.outcome, (_EXPIRED, *decision.notes)))
        assert decision.outcome is not None  # a failure always has an outcome
        return decision.outcome

    def run_once(self) -> int:
        """Sweep once; return how many jobs were moved on."""
        moved = 0
        for _ in range(MAX_ROUNDS):
            found, results = self._store.rescue(
                BATCH, self._lease_seconds, self._decide, by=self._holder
            )
            for recorded in results:
                if recorded.result is not WriteResult.APPLIED:
                    continue
                moved += 1
                if not recorded.cancelled and recorded.outcome.state in RERUN_STATES:
                    self._events.rerun("lease_expired")
            if results and self._written:
                run_hooks(self._log, self._written, results)
            if found < BATCH:
                break
        return moved
