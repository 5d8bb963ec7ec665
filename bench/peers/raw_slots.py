"""The raw reference's drain as it was until 2026-12-06: system ``raw-slots``.

Kept to show what the current ``raw`` and ``raw-inline`` changed. A fetcher
claims only as many jobs as there are idle slots (``raw.CLAIM``), a
``ThreadPoolExecutor(concurrency)`` runs them, and a completer on a second
connection completes every finished job it has in hand (``raw.COMPLETE``):
two transactions, and so two commits, per batch, and once the pool is busy at
concurrency 10 the slots free one or two at a time, so most claims fetch one or
two jobs. Everything but the drain is ``raw``'s.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor

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
    finished: queue.SimpleQueue[tuple[int, int]] = queue.SimpleQueue()
    slots = threading.Condition()
    free = concurrency

    def execute(job_id: int, attempt: int, args: str) -> None:
        nonlocal free
        raw._noop(args)
        finished.put((job_id, attempt))
        with slots:
            free += 1
            slots.notify()

    def complete(conn: psycopg.Connection[tuple[object, ...]]) -> None:
        written = 0
        while written < n:
            done = [finished.get()]
            while True:
                try:
                    done.append(finished.get_nowait())
                except queue.Empty:
                    break
            raw._complete(conn, done)
            written += len(done)

    with (
        psycopg.connect(url, autocommit=True) as fetch_conn,
        psycopg.connect(url, autocommit=True) as complete_conn,
        ThreadPoolExecutor(concurrency) as pool,
    ):
        completer = threading.Thread(target=complete, args=(complete_conn,))
        started = time.perf_counter()
        completer.start()
        claimed = 0
        while claimed < n:
            with slots:
                while free == 0:
                    slots.wait()
                want = free
            rows = fetch_conn.execute(raw.CLAIM, (want,)).fetchall()
            with slots:
                free -= len(rows)
            for job_id, attempt, args in rows:
                pool.submit(execute, job_id, attempt, args)
            claimed += len(rows)
        completer.join()
        return time.perf_counter() - started
