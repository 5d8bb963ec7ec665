"""Runs the queue doctor on an interval and publishes its findings as gauges."""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from drover._kernel.service import IntervalService
from drover._runtime.wiring import Wiring
from drover.health import HealthReport, HealthThresholds, diagnose

__all__ = ["HealthProbe"]


class HealthProbe(IntervalService):
    """Every interval, examines the queue's health and publishes it.

    Built by the ``drover.plugins.HealthProbe`` plugin, with its interval and
    thresholds. The same examination as ``drover doctor`` and
    ``Inspector.health()`` (ADR 0035): a handful of reads
    of the server's statistics views on one pooled connection, never a
    lock. The first examination runs one interval after start, so a fleet
    starting together does not examine at once. A failed examination (a
    worker role without access to a statistics view, say) changes nothing,
    is logged at WARNING and leaves ``drover_health_checked_timestamp_seconds``
    where it was, which is how an alert tells a stale verdict from a healthy one.
    """

    name = "health"
    action = "examine queue health"
    failure_level = logging.WARNING

    def __init__(
        self, wiring: Wiring, *, interval: timedelta, thresholds: HealthThresholds
    ) -> None:
        super().__init__(
            interval=interval.total_seconds(), client_id=wiring.client_id, logger=wiring.log
        )
        self._store = wiring.store
        self._metrics = wiring.metrics
        self._thresholds = thresholds

    def run_once(self) -> HealthReport:
        """Examine and publish once; raises on failure (the loop logs it)."""
        report = diagnose(self._store.operator.health_facts(self._thresholds), self._thresholds)
        self._metrics.publish_health(report.codes(), time.time())
        return report
