"""Keeps this client's row in the registry of live clients, and reaps the rows of dead ones;
writes the minute's health sample when no other client has (ADR 0060)."""

from __future__ import annotations

import logging
import os
import secrets
import socket
from datetime import datetime, timedelta

from drover._db.clients import ClaimWindow, ClientEntry
from drover._db.floors import ClaimTimes
from drover._kernel.service import IntervalService
from drover._runtime.wiring import Wiring
from drover._version import VERSION
from drover.errors import DroverError

__all__ = ["EXPIRY_INTERVALS", "SAMPLES_KEPT", "Registry"]

EXPIRY_INTERVALS = 3
"""A row not refreshed for this many of its client's intervals has expired."""
UNREGISTER_DEADLINE = 2.0
SAMPLES_KEPT = timedelta(days=7)
"""How long the health samples are kept: the minute's writer deletes older ones."""


class Registry(IntervalService):
    """Registers the started client in ``drover_clients`` and keeps the row fresh.

    `start` writes the row (host, pid, drover version, queues, concurrency)
    before the thread starts; then every ``heartbeat_interval`` the thread
    refreshes it with how many jobs the client holds, and in the same
    statement deletes every other client's expired row: one not refreshed for
    three of its own intervals, on the database clock, which is how a crashed
    or frozen process disappears. A clean stop deletes the row after the drain (the registry
    stops after the intake services and the drain, with the other services).

    The row also carries the client's claims since its last refresh: how
    many, their median, 99th percentile and slowest, and the slowest walk
    (ADR 0060), which ``drover doctor`` reads. After each refresh the
    registry writes the minute's health sample (``drover_health_samples``)
    unless another client has, and deletes samples older than
    ``SAMPLES_KEPT``; a failed sample is logged at WARNING once until one
    succeeds, and does not fail the refresh.

    The row is for operators only (`Inspector.workers`, the status page);
    nothing that runs jobs reads it. A failed refresh is logged at WARNING and
    retried next interval; a client whose row was reaped meanwhile writes it
    again, keeping its first start time. Each statement waits at most a few
    seconds for a connection and for the answer, so a database that does not
    answer never holds up stop.
    """

    name = "registry"
    action = "refresh the client registry"
    failure_level = logging.WARNING

    def __init__(self, wiring: Wiring) -> None:
        interval = wiring.config.heartbeat_interval.total_seconds()
        super().__init__(interval=interval, client_id=wiring.client_id, logger=wiring.log)
        self._store = wiring.store
        self._inflight = wiring.inflight
        self.ttl_seconds = EXPIRY_INTERVALS * interval
        """How long the row stays live after a refresh."""
        self._deadline = min(max(interval, 1.0), 10.0)
        self.entry = ClientEntry(
            id=secrets.token_hex(8),
            client_id=wiring.client_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            version=VERSION,
            queues=tuple(wiring.config.queues),
            concurrency=wiring.config.concurrency,
            kinds=tuple(wiring.config.workers.kinds()),
        )
        self.started_at: datetime | None = None
        """The row's start time (database clock), once written."""
        self._unsent: ClaimTimes | None = None
        self._sample_failing = False

    def run_once(self) -> int:
        """Write or refresh the row with the claims since the last refresh, reap expired
        rows, and write the minute's health sample unless another client has; return how
        many rows were reaped."""
        window = self._store.kernel.shared.times()
        if self._unsent is not None:
            window.merge(self._unsent)  # a failed refresh's claims count in the next
        self._unsent = window
        started_at, reaped = self._store.refresh_client(
            self.entry,
            running=len(self._inflight.held()),
            ttl_seconds=self.ttl_seconds,
            started_at=self.started_at,
            deadline=self._deadline,
            window=ClaimWindow.of(window),
        )
        self._unsent = None
        self.started_at = started_at
        self.sample()
        if reaped:
            self._log.info(
                "removed %d expired client(s) from the registry",
                reaped,
                extra={"reaped": reaped},
            )
        return reaped

    def sample(self) -> bool:
        """Write the minute's health sample unless another client has (ADR 0060); True
        when this call wrote it. A failure is logged (once until a success), not raised."""
        try:
            wrote = self._store.sample_health(SAMPLES_KEPT.total_seconds(), deadline=self._deadline)
        except DroverError:
            if not self._sample_failing:
                self._log.warning("writing the health sample failed", exc_info=True)
            self._sample_failing = True
            return False
        self._sample_failing = False
        return wrote

    def unregister(self) -> bool:
        """Delete the row now; False when it was already gone."""
        return self._store.unregister_client(self.entry.id, deadline=UNREGISTER_DEADLINE)

    def start(self) -> None:
        """Write the row on the starting thread, then start the refreshing thread.

        So a client is listed as soon as `Client.start` returns. A failure
        here is logged and does not stop the client from starting: the
        thread writes the row at its first refresh.
        """
        if not self._stopping.is_set() and self.started_at is None:
            try:
                self.run_once()
            except Exception:
                self._log.warning("%s failed", self.action, exc_info=True)
        super().start()

    def _loop(self) -> None:
        super()._loop()
        try:
            self.unregister()
        except Exception:
            self._log.warning(
                "removing this client from the registry failed; its row expires in %ss",
                self.ttl_seconds,
                exc_info=True,
            )
