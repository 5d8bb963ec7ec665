"""A worker process for the SIGKILL crash-recovery test in ``test_lifecycle.py``.

Run as ``python crash_worker.py <database url>``. It starts a client that works
``crashy`` jobs with a one-second lease. On attempt 1 the handler prints
``RUNNING <job id>`` to stdout and then blocks forever, so the test can kill the
process while the job is mid-run; any later attempt completes at once. The
process itself never exits on its own: the test ends it with SIGKILL.

The args class must stay identical to ``Crashy`` in ``test_lifecycle.py``.
"""

from __future__ import annotations

import sys
import threading

import drover


class Crashy(drover.JobArgs, kind="lifecycle_crashy"):
    n: int = 0


workers = drover.Workers()


@workers.register
def crashy(job: drover.Job[Crashy]) -> None:
    if job.attempt == 1:
        print(f"RUNNING {job.id}", flush=True)
        threading.Event().wait()  # hold the job until the test kills this process


def main(url: str) -> None:
    config = drover.Config(workers=workers, concurrency=2, lease_duration=1, poll_interval=0.05)
    client = drover.Client(url, config)
    client.start()
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1])
