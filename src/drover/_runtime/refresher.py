"""Refreshes the queue depth and age gauges from the database on an interval."""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from drover._kernel.service import IntervalService
from drover._records import QueueStats
from drover._runtime.wiring import Wiring

__all__ = ["StatsRefresher"]


class StatsRefresher(IntervalService):
    """Reads depth and oldest age once at start, then every interval.

    Built by the ``drover.plugins.QueueStats`` plugin, with its interval.

    Scrapes only read the published snapshot, so scrape rate never adds
    database load. A failed refresh changes nothing and is logged at WARNING
    (a transient one once per episode, through ``trouble``);
    ``fresh`` then turns false once two intervals pass without a success,
    which is what ``/readyz`` reports.
    """

    name = "refresher"
    action = "refresh queue stats"
    failure_level = logging.WARNING

    def __init__(self, wiring: Wiring, *, interval: timedelta) -> None:
        super().__init__(
            interval=interval.total_seconds(), client_id=wiring.client_id, logger=wiring.log
        )
        self._store = wiring.store
        self._metrics = wiring.metrics
        self.last_success: float | None = None
        """``time.monotonic()`` of the last successful refresh."""

    def run_once(self) -> QueueStats:
        """Read and publish once; raises on failure (the loop logs it)."""
        stats = self._store.operator.queue_stats(floored=True)
        self._metrics.publish_queue_stats(stats.depth, stats.oldest_age)
        self.last_success = time.monotonic()
        return stats

    def fresh(self, bound: float) -> bool:
        """True when the last success is at most ``bound`` seconds old."""
        last = self.last_success
        return last is not None and time.monotonic() - last <= bound

    def _loop(self) -> None:
        try:
            self.run_once()
        except Exception as exc:
            if not self._failed(exc):
                self._log.warning("refresh queue stats failed", exc_info=True)
        else:
            self._ok()
        super()._loop()
