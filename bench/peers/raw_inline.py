"""The raw reference without threads: system ``raw-inline``.

The fastest drain we know how to write on psycopg 3 for no-op jobs: one
thread and one connection, no hand-off between threads at all. Each round
trip is one statement (``raw.COMPLETE_AND_CLAIM``) that completes the batch
just run and claims the next ``concurrency`` jobs (``FOR UPDATE SKIP
LOCKED``), in one transaction and so one commit; the thread then runs the
batch's handlers inline, one after another. ``concurrency`` here bounds the
jobs held at once (claimed and not yet completed), which is what it bounds for
the others; it is not parallelism: handlers that block would run one at a
time. Everything else (schema, enqueue, latency) is the ``raw`` system's.
"""

from __future__ import annotations

import time

import psycopg

from peers import raw

REQUIRES = None
TABLES = raw.TABLES
setup = raw.setup
reset = raw.reset
count = raw.count
fill = raw.fill
enqueue_bulk = raw.enqueue_bulk
enqueue_single = raw.enqueue_single
latency = raw.latency


def drain(url: str, n: int, concurrency: int) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        started = time.perf_counter()
        done: list[tuple[int, int]] = []
        claimed = 0
        while True:
            want = min(concurrency, n - claimed)
            if want == 0 and not done:
                break
            rows = raw.complete_and_claim(conn, done, want)
            claimed += len(rows)
            done = []
            for job_id, attempt, args in rows:
                raw._noop(args)
                done.append((job_id, attempt))
            if not rows and want > 0:
                break  # nothing left to claim
        return time.perf_counter() - started
