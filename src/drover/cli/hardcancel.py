"""A supervised worker process's side of an operator's hard cancel (ADR 0030).

``drover worker --processes N`` gives each child's client ``HardCancels.add``
as its ``hard_cancel``: the child's main loop waits on the requests'
deadlines, and once one passes with its handler still running, it hands back
its other jobs and exits ``HARD_CANCEL_EXIT`` for the supervisor to replace it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from typing import NoReturn

import drover
from drover._runtime.cancels import HardCancel

__all__ = ["HARD_CANCEL_EXIT", "HardCancels", "replace_after_hard_cancel"]

HARD_CANCEL_EXIT = 76
"""A child's exit status after an operator's hard cancel outlived its grace: it handed back
its other jobs and asks to be replaced."""

_log = logging.getLogger("drover.supervisor")


class HardCancels:
    """The hard cancels a child waits on: each a deadline and a test of whether its handler
    returned. ``add`` runs on the listener's or heartbeat's thread; the rest on the
    child's main loop."""

    def __init__(self) -> None:
        self.wake = threading.Event()
        """Set by a new request or a signal: the main loop's wait ends early."""
        self._lock = threading.Lock()
        self._pending: list[tuple[float, HardCancel]] = []
        self.fired: HardCancel | None = None

    def add(self, request: HardCancel) -> None:
        with self._lock:
            self._pending.append((time.monotonic() + request.grace, request))
        _log.warning(
            "hard cancel of job %d: this worker process is replaced unless its handler "
            "returns within %gs",
            request.job_id,
            request.grace,
            extra={"event": "hard_cancel_pending", "job_id": request.job_id},
        )
        self.wake.set()  # the main loop recomputes its wait

    def wait_for(self) -> float:
        """How long the main loop may wait before a deadline needs checking (at most 0.5 s)."""
        with self._lock:
            soonest = min((d for d, _ in self._pending), default=None)
        if soonest is None:
            return 0.5
        return min(0.5, max(0.0, soonest - time.monotonic()))

    def due(self) -> bool:
        """True (once) when a hard cancel's grace ran out with its handler still running."""
        now = time.monotonic()
        with self._lock:
            keep = []
            for deadline, request in self._pending:
                if request.done():
                    continue
                if deadline <= now and self.fired is None:
                    self.fired = request
                keep.append((deadline, request))
            self._pending = keep
            return self.fired is not None


def replace_after_hard_cancel(child: drover.Client, fired: HardCancel) -> NoReturn:
    """Stop ``child`` with no drain budget (handing back what it has not finished), then
    end the process at once with ``HARD_CANCEL_EXIT``; never returns."""
    _log.warning(
        "job %d ignored its hard cancel for %gs; handing back this process's other jobs and "
        "exiting for a fresh process",
        fired.job_id,
        fired.grace,
        extra={"event": "hard_cancel_exit", "job_id": fired.job_id},
    )
    with contextlib.suppress(drover.DrainIncomplete):
        child.stop(0)
    child.close()
    logging.shutdown()
    # The handler's thread is stuck in user code and cannot be interrupted;
    # a normal exit would join it forever.
    os._exit(HARD_CANCEL_EXIT)
