"""Refreshes the queue depth and age gauges from the database on an interval."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from drover._db.connections import ConnectionPool, borrow
from drover._db.stats import QueueStats, queue_stats
from drover._runtime.service import PeriodicService

__all__ = ["StatsRefresher"]


class StatsRefresher(PeriodicService):
    """Reads depth and oldest age once at start, then every ``stats_interval``.

    Scrapes only read the published snapshot, so scrape rate never adds
    database load. A failed refresh changes nothing and is logged at WARNING;
    :meth:`fresh` then turns false once two intervals pass without a success,
    which is what ``/readyz`` reports.
    """

    kind = "refresher"
    action = "refresh queue stats"
    failure_level = logging.WARNING

    def __init__(
        self,
        *,
        pool: ConnectionPool[Any],
        publish: Callable[[QueueStats], None],
        interval: float,
        client_id: str,
        logger: logging.Logger,
    ) -> None:
        super().__init__(interval=interval, client_id=client_id, logger=logger)
        self._pool = pool
        self._publish = publish
        self.last_success: float | None = None
        """``time.monotonic()`` of the last successful refresh."""

    def run_once(self) -> QueueStats:
        """Read and publish once; raises on failure (the loop logs it)."""
        with borrow(self._pool, "refresh queue stats") as conn:
            stats = queue_stats(conn)
        self._publish(stats)
        self.last_success = time.monotonic()
        return stats

    def fresh(self, bound: float) -> bool:
        """True when the last success is at most ``bound`` seconds old."""
        last = self.last_success
        return last is not None and time.monotonic() - last <= bound

    def _loop(self) -> None:
        try:
            self.run_once()
        except Exception:
            self._log.warning("refresh queue stats failed", exc_info=True)
        super()._loop()
