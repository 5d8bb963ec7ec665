"""The raw reference without threads: system ``raw-inline``.

The fastest drain we know how to write on psycopg 3 for no-op jobs: one
thread and one connection, no hand-off between threads at all. Each round
trip is one statement (``raw.COMPLETE_AND_CLAIM``) that completes the batch
just run and claims the next ``2 x concurrency`` jobs (``FOR UPDATE SKIP
LOCKED``), in one transaction and so one commit; the thread then runs the
batch's handlers inline, one after another. ``concurrency`` here bounds the
jobs held at once (claimed and not yet completed) to ``2 x concurrency``, the
bound of the threaded ``raw`` (``concurrency`` running, as many waiting) and
about that of graphile-worker's local queue (``concurrency`` running,
``concurrency + 1`` waiting); it is not parallelism: handlers that block would
run one at a time. Everything else (schema, enqueue, latency) is the ``raw`` system's.
"""

from __future__ import annotations

import threading
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


# One loop claiming 2 x concurrency a round trip. Tried on the 2-core machine
# (2026-12-07, drains of 10,000 at c10 and c50): two loops of one concurrency
# each, two of half and four of half were all slower, and cost more server CPU
# per job; smaller statements cost the server more per job (every claimed row is
# updated twice, in every index of drover_jobs), and the server shares the cores.
LOOPS = 1
HELD = 2


def drain(url: str, n: int, concurrency: int) -> float:
    batch = max(1, concurrency * HELD)
    lock = threading.Lock()
    claimed = 0

    def share(want: int) -> int:
        nonlocal claimed
        with lock:
            want = min(want, n - claimed)
            claimed += want
            return want

    def loop(conn: psycopg.Connection[tuple[object, ...]]) -> None:
        done: list[tuple[int, int]] = []
        while True:
            want = share(batch)
            if want == 0 and not done:
                return
            rows = raw.complete_and_claim(conn, done, want)
            if len(rows) < want:
                share(len(rows) - want)  # give back what was not there
            done = []
            for job_id, attempt, args in rows:
                raw._noop(args)
                done.append((job_id, attempt))
            if not rows and want > 0:
                return  # nothing left to claim

    conns = [psycopg.connect(url, autocommit=True) for _ in range(LOOPS)]
    try:
        threads = [threading.Thread(target=loop, args=(c,)) for c in conns]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - started
    finally:
        for c in conns:
            c.close()
