"""Keeps this client's row in the registry of live clients, and reaps the rows of dead ones."""

from __future__ import annotations

import logging
import os
import secrets
import socket
from datetime import datetime

from drover._db.clients import ClientEntry
from drover._kernel.service import IntervalService
from drover._runtime.wiring import Wiring
from drover._version import VERSION

__all__ = ["EXPIRY_INTERVALS", "Registry"]

EXPIRY_INTERVALS = 3
"""A row not refreshed for this many of its client's intervals has expired."""
UNREGISTER_DEADLINE = 2.0


class Registry(IntervalService):
    """Registers the started client in ``drover_clients`` and keeps the row fresh.

    `start` writes the row (host, pid, drover version, queues, concurrency)
    before the thread starts; then every ``heartbeat_interval`` the thread
    refreshes it with how many jobs the client holds, and in the same
    statement deletes every other client's expired row: one not refreshed for
    three of its own intervals, on the database clock, which is how a crashed
    or frozen process disappears. A clean stop deletes the row after the drain (the registry
    stops after the intake services and the drain, with the other services).

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
        )
        self.started_at: datetime | None = None
        """The row's start time (database clock), once written."""

    def run_once(self) -> int:
        """Write or refresh the row and reap expired ones; return how many rows were reaped."""
        started_at, reaped = self._store.refresh_client(
            self.entry,
            running=len(self._inflight.held()),
            ttl_seconds=self.ttl_seconds,
            started_at=self.started_at,
            deadline=self._deadline,
        )
        self.started_at = started_at
        if reaped:
            self._log.info(
                "removed %d expired client(s) from the registry",
                reaped,
                extra={"reaped": reaped},
            )
        return reaped

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
