"""Writes what running handlers report (progress, metadata), throttled and batched (ADR 0032).

A feature outside the kernel (ADR 0045): an execution's ``ProgressSlot`` is
made by the handler's first report and handed to ``ProgressWriter.track``
(the execution's ``progress_sink``); the writer writes the changed slots
every interval, and before each batch of outcomes (the completer's
``before_write`` hook), so a job's last report always lands before its
outcome. A client whose handlers never report costs nothing here but an
idle thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence

from drover._db.ledger import stale_write_note
from drover._db.progress import ProgressReport
from drover._kernel.service import IntervalService
from drover._records import Recorded
from drover._runtime.ledger import record_notes
from drover._runtime.wiring import Wiring
from drover.progress import ProgressSlot, encode_meta

__all__ = ["PROGRESS_INTERVAL", "ProgressWriter"]

PROGRESS_INTERVAL = 0.5
"""Seconds between two rounds of the progress writer: the most a report waits."""

_MAX_NOTED = 10_000

Write = Callable[[Sequence[ProgressReport]], set[int]]


class ProgressWriter(IntervalService):
    """Every interval, writes the changed reports of every running job in one statement.

    ``Job.set_progress`` and ``Job.update_meta`` only store values in the
    execution's ``ProgressSlot``, which the first report hands to ``track``;
    this service writes the tracked slots that changed since its last round,
    each fenced on ``(id, attempt, state = 'running')``. However often a
    handler reports, its row is written at most once per interval. Before
    each batch of outcomes the completer calls ``before_outcomes`` (its
    ``before_write`` hook), which writes what changed since, so a job's last
    report lands before its outcome; every write holds one lock, so an older
    report can never land after a newer one. A slot is forgotten once its
    outcome is written (``written``, the completer's hook) or its claim is no
    longer held. A failed round is logged and its reports are written by the
    next.

    A report the fence refused (its claim moved on while the handler kept
    running) is a stale write: counted and written in the job's duplicate
    ledger (ADR 0037), once per execution.
    """

    name = "progress"
    action = "write job progress"

    def __init__(self, wiring: Wiring, *, interval: float = PROGRESS_INTERVAL) -> None:
        super().__init__(interval=interval, client_id=wiring.client_id, logger=wiring.log)
        self._store = wiring.store
        self._inflight = wiring.inflight
        self._lock = threading.Lock()
        # Its own lock: a handler's first report must not wait for a write.
        self._tracked_lock = threading.Lock()
        self._tracked: dict[tuple[int, int], ProgressSlot] = {}
        self._on_stale = wiring.metrics.stale_write_refused
        self._holder = wiring.holder
        # (id, attempt) of the executions whose refused report is already in
        # their ledger: a handler that keeps reporting is refused every round.
        self._noted: set[tuple[int, int]] = set()
        self.statements = 0
        """Statements sent so far (for tests: the throttle's effect)."""

    def track(self, slot: ProgressSlot) -> None:
        """Write ``slot`` from now on (an execution's first report; any thread)."""
        if slot.job_id is not None:
            with self._tracked_lock:
                self._tracked[(slot.job_id, slot.attempt)] = slot

    def run_once(self) -> int:
        """Write the changed reports of the running jobs; return how many rows were written."""
        if not self._tracked:
            return 0
        with self._tracked_lock:
            inflight = self._inflight
            for key in [k for k, slot in self._tracked.items() if not slot.dirty]:
                claim = inflight.get(key[0])
                if claim is None or claim.row.attempt != key[1]:
                    del self._tracked[key]  # settled without an outcome, or taken over
            slots = list(self._tracked.values())
        return self.flush(slots, self._write) if slots else 0

    def before_outcomes(self) -> None:
        """The completer's ``before_write`` hook: write what changed, before the outcomes."""
        if self._tracked:
            with self._tracked_lock:
                slots = list(self._tracked.values())
            try:
                self.flush(slots, self._write)
            except Exception:
                # A report is worth less than an outcome: log it and write the outcomes.
                self._log.warning(
                    "writing the last progress of %d job(s) failed", len(slots), exc_info=True
                )

    def written(self, results: Sequence[Recorded]) -> None:
        """The completer's ``written`` hook: forget the slots of jobs whose outcome is written."""
        if self._tracked:
            with self._tracked_lock:
                for recorded in results:
                    self._tracked.pop((recorded.outcome.id, recorded.outcome.attempt), None)

    def _write(self, reports: Sequence[ProgressReport]) -> set[int]:
        written = self._store.report_progress(reports)
        if len(written) == len(reports):
            return written
        notes = []
        for report in reports:
            key = (report.id, report.attempt)
            if report.id in written or key in self._noted:
                continue
            if len(self._noted) >= _MAX_NOTED:
                self._noted.clear()  # a bound, not a cache: at worst a second entry
            self._noted.add(key)
            self._on_stale("lease lost", "progress")
            notes.append(
                stale_write_note(
                    report.id,
                    report.attempt,
                    worker=self._holder,
                    write="progress",
                    refused="lease lost",
                )
            )
        record_notes(self._log, self._store.append_ledger, notes)
        return written

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
