"""The per-execution metrics, tallied per thread without locks and summed when scraped.

prometheus-client's Counter, Gauge and Histogram take a lock and validate on
every call: the five calls one execution made (executing up and down, a
counter, a histogram's sum and bucket) cost about five microseconds, a third
of drover's own work per job on a drain of short jobs. Here every thread that
runs jobs keeps its own tally, written only by that thread, and a scrape adds
the tallies up. Reading an int another thread is writing is safe under the
GIL; a scrape that races an execution may see its count before its duration,
never a count going backwards.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections.abc import Collection, Iterator, Sequence

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

__all__ = ["Executions"]

_COMPLETED = "drover_jobs_completed"
_FAILED = "drover_jobs_failed"
_DURATION = "drover_job_duration_seconds"
_EXECUTING = "drover_jobs_executing"


class _QueueTally:
    __slots__ = ("buckets", "completed", "failed", "sum")

    def __init__(self, size: int) -> None:
        self.completed = 0
        self.failed = 0
        self.sum = 0.0
        self.buckets = [0] * size  # per bucket, not cumulative; the last is +Inf


class _ThreadTally:
    __slots__ = ("executing", "queues")

    def __init__(self) -> None:
        self.executing = 0
        self.queues: dict[str, _QueueTally] = {}


class Executions(Collector):
    """``drover_jobs_completed_total``, ``drover_jobs_failed_total``,
    ``drover_job_duration_seconds`` (per queue) and ``drover_jobs_executing``.

    ``begin`` and ``end`` bracket one execution on the calling
    thread. Configured queues (and each queue on its first execution) show
    zeros from the first scrape.
    """

    def __init__(self, queues: Collection[str], buckets: Sequence[float]) -> None:
        self._bounds = tuple(float(b) for b in buckets)
        # As prometheus-client writes a bound: repr of the float (1 -> "1.0").
        self._les = [repr(b) for b in self._bounds] + ["+Inf"]
        self._local = threading.local()
        self._lock = threading.Lock()
        self._tallies: list[_ThreadTally] = []
        self._created: dict[str, float] = {}
        for queue in queues:
            self._created.setdefault(queue, time.time())

    def _tally(self) -> _ThreadTally:
        tally: _ThreadTally | None = getattr(self._local, "tally", None)
        if tally is None:
            tally = self._local.tally = _ThreadTally()
            with self._lock:
                # Kept after its thread ends: its counts must not go away.
                self._tallies.append(tally)
        return tally

    def begin(self) -> _ThreadTally:
        """An execution starts on this thread; pass the result to ``end``."""
        tally = self._tally()
        tally.executing += 1
        return tally

    def end(self, tally: _ThreadTally, queue: str, ok: bool, seconds: float) -> None:
        """The execution ``begin`` started ended (``ok``: its handler returned)."""
        counts = tally.queues.get(queue)
        if counts is None:
            counts = tally.queues[queue] = _QueueTally(len(self._les))
            if queue not in self._created:
                with self._lock:
                    self._created.setdefault(queue, time.time())
        if ok:
            counts.completed += 1
        else:
            counts.failed += 1
        counts.sum += seconds
        # A bucket holds values <= its bound, so a value equal to a bound is in it.
        counts.buckets[bisect_left(self._bounds, seconds)] += 1
        tally.executing -= 1

    def describe(self) -> Iterator[Metric]:
        yield CounterMetricFamily(_COMPLETED, "", labels=["queue"])
        yield CounterMetricFamily(_FAILED, "", labels=["queue"])
        yield HistogramMetricFamily(_DURATION, "", labels=["queue"])
        yield GaugeMetricFamily(_EXECUTING, "")

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            tallies = list(self._tallies)
            created = dict(self._created)
        size = len(self._les)
        totals = {q: _QueueTally(size) for q in created}
        executing = 0
        for tally in tallies:
            executing += tally.executing
            for queue, counts in list(tally.queues.items()):
                total = totals.setdefault(queue, _QueueTally(size))
                total.completed += counts.completed
                total.failed += counts.failed
                total.sum += counts.sum
                for i, n in enumerate(list(counts.buckets)):
                    total.buckets[i] += n
        completed = CounterMetricFamily(
            _COMPLETED, "Executions whose handler returned.", labels=["queue"]
        )
        failed = CounterMetricFamily(
            _FAILED,
            "Executions whose handler raised (including snooze, cancel and timeouts).",
            labels=["queue"],
        )
        duration = HistogramMetricFamily(
            _DURATION, "Wall-clock time of one execution, successful or not.", labels=["queue"]
        )
        for queue in sorted(totals):
            total = totals[queue]
            when = created.get(queue)
            completed.add_metric([queue], total.completed, created=when)
            failed.add_metric([queue], total.failed, created=when)
            cumulative, running = [], 0
            for le, n in zip(self._les, total.buckets, strict=True):
                running += n
                cumulative.append((le, float(running)))
            duration.add_metric([queue], cumulative, total.sum)
        yield completed
        yield failed
        yield duration
        yield GaugeMetricFamily(
            _EXECUTING, "Executions currently inside the middleware chain.", value=executing
        )
