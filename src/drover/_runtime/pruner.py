"""Deletes finished jobs past their retention, in batches, one client at a time."""

from __future__ import annotations

from datetime import timedelta

from drover._kernel.service import IntervalService
from drover._runtime.wiring import Wiring
from drover.retention import Retention

__all__ = ["Pruner"]

BATCH = 1000
MAX_BATCHES = 50


class Pruner(IntervalService):
    """Every interval, deletes terminal jobs older than their state's retention.

    Built by the ``drover.plugins.Pruner`` plugin, with its options.

    Each batch is its own short transaction holding a try-lock, so only one
    client prunes at a time and a sweep never holds locks for long; other
    clients skip the sweep. At most 50 batches of 1000 per state per sweep,
    so a first sweep over a huge backlog spreads over several intervals.
    """

    name = "pruner"
    action = "prune finished jobs"

    def __init__(self, wiring: Wiring, *, retention: Retention, interval: timedelta) -> None:
        super().__init__(
            interval=interval.total_seconds(), client_id=wiring.client_id, logger=wiring.log
        )
        self._store = wiring.store
        self._retention = retention.by_state()

    def run_once(self) -> int:
        """One sweep; returns how many jobs were deleted (0 when another client holds the lock)."""
        deleted = 0
        for state, older_than in self._retention.items():
            for _ in range(MAX_BATCHES):
                if self._stopping.is_set():
                    return deleted
                count = self._store.prune(state, older_than, BATCH)
                if count is None:
                    return deleted  # another client is pruning
                deleted += count
                if count < BATCH:
                    break
        if deleted:
            self._log.info("pruned %d finished jobs", deleted, extra={"deleted": deleted})
        return deleted
