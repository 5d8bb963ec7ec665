"""Deletes finished jobs past their retention, in batches, one client at a time."""

from __future__ import annotations

import logging
from typing import Any

from drover._db.connections import ConnectionPool, borrow
from drover._db.retention import job_prune_batch
from drover._runtime.service import PeriodicService

__all__ = ["Pruner"]

BATCH = 1000
MAX_BATCHES = 50


class Pruner(PeriodicService):
    """Every interval, deletes terminal jobs older than their state's retention.

    Each batch is its own short transaction holding a try-lock, so only one
    client prunes at a time and a sweep never holds locks for long; other
    clients skip the sweep. At most 50 batches of 1000 per state per sweep,
    so a first sweep over a huge backlog spreads over several intervals.
    """

    kind = "pruner"
    action = "prune finished jobs"

    def __init__(
        self,
        *,
        pool: ConnectionPool[Any],
        retention: dict[str, float],
        interval: float,
        client_id: str,
        logger: logging.Logger,
    ) -> None:
        super().__init__(interval=interval, client_id=client_id, logger=logger)
        self._pool = pool
        self._retention = retention

    def run_once(self) -> int:
        """One sweep; returns how many jobs were deleted (0 when another client holds the lock)."""
        deleted = 0
        for state, older_than in self._retention.items():
            for _ in range(MAX_BATCHES):
                if self._stopping.is_set():
                    return deleted
                with borrow(self._pool, "prune finished jobs") as conn:
                    count = job_prune_batch(conn, state, older_than, BATCH)
                if count is None:
                    return deleted  # another client is pruning
                deleted += count
                if count < BATCH:
                    break
        if deleted:
            self._log.info("pruned %d finished jobs", deleted, extra={"deleted": deleted})
        return deleted
