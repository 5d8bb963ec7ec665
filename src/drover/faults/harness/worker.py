"""What every worker process of a fault run shares, whatever its handlers.

``run_client`` runs a client until SIGTERM and starts it again while the
nemesis has the database down at start, as a process supervisor would;
``QuickRetry`` retries failed jobs at once, so a run measures faults rather
than back-off. The worker processes of ``drover faults --app`` and of
drover's own suite use both.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta

import drover
from drover.faults.harness.jsonl import HistoryFile

__all__ = ["QuickRetry", "run_client"]


class QuickRetry:
    """Retries after a fifth of a second: a fault run measures faults, not back-off."""

    def next_retry(self, job: drover.JobRow) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=0.2)


_START_PATIENCE = 60.0
"""How long a worker keeps trying to start while the database is unreachable."""


def run_client(dsn: str, config: drover.Config, history: HistoryFile) -> None:
    """``Client.run`` until SIGTERM, starting again while the database is down at start.

    The nemesis may restart or crash the server while a replacement worker
    is still importing; a worker that gave up then would leave the run a
    worker short (its jobs rescued by nobody while another is paused), as a
    process supervisor would not. Only ``start`` raises ``DatabaseError``
    here: once started, a client rides out outages itself. Each failed start
    is recorded in ``history``; after a minute of them the last one is raised.
    """
    deadline = time.monotonic() + _START_PATIENCE
    while True:
        client = drover.Client(dsn, config)
        try:
            client.run()
            return
        except drover.DatabaseError:
            if time.monotonic() > deadline:
                raise
            history.write(ev="process", pid=os.getpid(), t=time.time(), what="start failed")
            time.sleep(0.2)
        finally:
            client.close()
