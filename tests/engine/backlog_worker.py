"""A worker process for the crash test in ``test_outcome_backlog.py``.

Run as ``python backlog_worker.py <database url> <concurrency>``. It starts a
client that works ``backlog_instant`` jobs, whose handler returns at once, and
never exits on its own: the test
ends it with SIGKILL. Nothing in it reaches into drover's internals; the test
slows the outcome writes in the database instead.

The args class must stay identical to ``Instant`` in ``test_outcome_backlog.py``.
"""

from __future__ import annotations

import sys
import threading

import drover


class Instant(drover.JobArgs, kind="backlog_instant"):
    n: int = 0


workers = drover.Workers()


@workers.register
def instant(job: drover.Job[Instant]) -> None:
    pass


def main(url: str, concurrency: int) -> None:
    # A lease far longer than the test: nothing expires before the kill, and the
    # test expires the dead worker's leases itself rather than wait one out.
    config = drover.Config(
        workers=workers, concurrency=concurrency, lease_duration=300, poll_interval=0.05
    )
    client = drover.Client(url, config)
    client.start()
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
