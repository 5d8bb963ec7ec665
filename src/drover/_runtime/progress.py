"""Writes what running handlers report (progress, metadata), throttled and batched (ADR 0032)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence

from drover._db.progress import ProgressReport
from drover._runtime.service import IntervalService
from drover._runtime.wiring import Wiring
from drover.progress import ProgressSlot, encode_meta

__all__ = ["PROGRESS_INTERVAL", "ProgressWriter"]

PROGRESS_INTERVAL = 0.5
"""Seconds between two rounds of the progress writer: the most a report waits."""

Write = Callable[[Sequence[ProgressReport]], set[int]]


class ProgressWriter(IntervalService):
    """Every interval, writes the changed reports of every running job in one statement.

    ``Job.set_progress`` and ``Job.update_meta`` only store values in the
    execution's ``ProgressSlot``; this service reads the slots of the claims
    this client holds and writes those that changed since its last round,
    each fenced on ``(id, attempt, state = 'running')``. However often a
    handler reports, its row is written at most once per interval. A job
    whose handler has returned is skipped: the completer writes its last
    report just before its outcome (``flush``, on the completer's
    connection), under the same lock as these rounds, so an older report
    can never land after a newer one. A failed round is logged and its
    reports are written by the next. It stops before the completer, which
    writes the last reports of the draining jobs.
    """

    name = "progress"
    action = "write job progress"

    def __init__(self, wiring: Wiring, *, interval: float = PROGRESS_INTERVAL) -> None:
        super().__init__(interval=interval, client_id=wiring.client_id, logger=wiring.log)
        self._store = wiring.store
        self._inflight = wiring.inflight
        self._lock = threading.Lock()
        self.statements = 0
        """Statements sent so far (for tests: the throttle's effect)."""

    def run_once(self) -> int:
        """Write the changed reports of the running jobs; return how many rows were written."""
        slots = []
        for claim in self._inflight.snapshot():
            slot = claim.context._progress
            if slot is not None and not claim.finished and slot.dirty:
                slots.append(slot)
        return self.flush(slots, self._store.report_progress) if slots else 0

    def flush(self, slots: Iterable[ProgressSlot], write: Write) -> int:
        """Write the changed reports of ``slots`` with ``write``; the number of rows written.

        Serialised with every other flush. If ``write`` raises, the reports
        are given back to their slots (the next round writes them) and the
        error propagates.
        """
        with self._lock:
            taken = []
            reports = []
            for slot in slots:
                if slot.job_id is None or not slot.dirty:
                    continue
                progress, patch = slot.take()
                taken.append((slot, progress, patch))
                reports.append(
                    ProgressReport(
                        slot.job_id,
                        slot.attempt,
                        progress,
                        None if patch is None else encode_meta(patch, "update_meta"),
                    )
                )
            if not reports:
                return 0
            try:
                written = write(reports)
            except BaseException:
                for slot, progress, patch in taken:
                    slot.give_back(progress, patch)
                raise
            self.statements += 1
            return len(written)
