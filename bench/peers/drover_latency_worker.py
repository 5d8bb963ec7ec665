"""drover's idle-latency worker, in a process of its own (``drover_queue.latency``).

``python drover_latency_worker.py URL`` starts a client with default settings
that runs ``bench_ping`` jobs, prints ``ready`` once started and, per job,
``lat <i> <ms>``: the time from the ``perf_counter()`` the producer took just
before its insert (``CLOCK_MONOTONIC``, the same clock in every process) to
the handler's first line. It runs until stdin closes. As graphile-worker's
runner does, it keeps the worker out of the producer's process: a web
application inserts, a worker process runs.
"""

from __future__ import annotations

import sys
import time

import drover


class Ping(drover.JobArgs, kind="bench_ping"):
    i: int
    sent: float


def main(url: str) -> None:
    workers = drover.Workers()
    out = sys.stdout

    @workers.register
    def ping(job: drover.Job[Ping]) -> None:
        now = time.perf_counter()
        out.write(f"lat {job.args.i} {(now - job.args.sent) * 1000}\n")
        out.flush()

    client = drover.Client(url, drover.Config(workers=workers))
    client.start()
    try:
        out.write("ready\n")
        out.flush()
        sys.stdin.read()
    finally:
        client.stop(10)


if __name__ == "__main__":
    main(sys.argv[1])
