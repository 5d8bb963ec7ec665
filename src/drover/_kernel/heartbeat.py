"""Keeps this client's leases alive while its jobs run."""

from __future__ import annotations

import logging
import time

from drover._kernel.claims import Claim
from drover._kernel.kit import Kit, StaleWrite, run_hooks
from drover._kernel.service import IntervalService
from drover.log import JOB, log_job

__all__ = ["Heartbeat"]


class Heartbeat(IntervalService):
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

    A renewal the database refused because the job moved on is a stale
    write: it is counted and handed to the ``stale`` hooks (the duplicate
    ledger, ADR 0037), once per claim.
    """

    name = "heartbeat"
    action = "extend job leases"

    def __init__(self, kit: Kit) -> None:
        interval = kit.settings.heartbeat_interval
        super().__init__(interval=interval, client_id=kit.client_id, logger=kit.log)
        self._store = kit.store
        self._inflight = kit.inflight
        self._lease_seconds = kit.lease_seconds
        self._events = kit.events
        self._stale_hooks = kit.hooks.stale

    def run_once(self) -> int:
        """Renew every held lease; return how many were renewed."""
        # Give a lease up if it would lapse before the next beat could renew it: the check runs once
        # per interval, and must act before the database's expiry, not an interval after it.
        horizon = time.monotonic() + self._interval
        held: list[Claim] = []
        for claim in self._inflight.snapshot():
            if claim.lease.lost_reason is not None:
                continue
            if claim.expired_locally(horizon) and not claim.settled:
                self._lose(claim, "its lease ran out without a renewal")
                continue
            held.append(claim)
        if not held:
            return 0
        # A renewal that takes half a lease is not coming: break the call (a
        # half-open connection would hang it for good) so the next beat retries
        # on another connection and the local deadline check keeps running.
        sent, renewals = self._store.extend_leases(
            [(c.row.id, c.row.attempt) for c in held],
            self._lease_seconds,
            deadline=max(self._lease_seconds / 2, 0.5),
        )
        by_id = {c.row.id: c for c in held}
        renewed = 0
        stale: list[StaleWrite] = []
        for renewal in renewals:
            claim = by_id[renewal.id]
            if renewal.leased_until is not None:
                claim.renewed(renewal.leased_until, sent + self._lease_seconds)
                renewed += 1
            elif (
                not renewal.current
                and not claim.settled
                and self._lose(claim, "the job moved on: rescued, re-claimed or cancelled")
            ):
                self._events.stale_write_refused("lease lost", "heartbeat")
                stale.append(StaleWrite(claim.row.id, claim.row.attempt, "heartbeat", "lease lost"))
        if stale and self._stale_hooks:
            run_hooks(self._log, self._stale_hooks, stale)
        return renewed

    def _lose(self, claim: Claim, reason: str) -> bool:
        """Mark the claim's lease lost; False when it already was."""
        if not claim.lose(reason):
            return False
        self._events.lease_lost()
        log_job(
            self._log,
            logging.WARNING,
            claim.row,
            "lease_lost",
            JOB + " lost its lease (%s); its handler is asked to stop and its outcome will be "
            "refused",
            reason,
            reason=reason,
        )
        return True
