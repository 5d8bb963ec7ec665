"""drover, used as its README says, with default settings except the knob under test.

- bulk enqueue: ``client.insert_many`` per batch (COPY into a staging table);
- single-row enqueue: one shared ``Client`` (its own pool, 10 connections),
  ``client.insert`` from every thread (default ``notify=True``: each insert
  also queues a NOTIFY);
- drain: ``Config(concurrency=c)``, a sync no-op worker; timed from ``start()``
  until ``stop()`` has returned (``stop`` flushes the batched completions);
- latency: a started client idling with its default LISTEN/NOTIFY wake-ups and
  ``poll_interval`` 1 s, in a process of its own (``drover_latency_worker.py``),
  as graphile-worker's runner is; a client in the harness's process inserts.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

import drover
import peers
from peers import Latencies, raw, run_threads, wait_for

REQUIRES = None


class Noop(drover.JobArgs, kind="bench_noop"):
    n: int


class Ping(drover.JobArgs, kind="bench_ping"):
    i: int
    sent: float


TABLES = raw.TABLES
setup = raw.setup
reset = raw.reset
count = raw.count
fill = raw.fill


def _warm_pool(client: drover.Client, size: int) -> None:
    # Open the pool's connections before the clock starts, as the raw
    # reference does with its own connections. The client's own pool, reached
    # through its store: Client.pool is deprecated, and a pool passed in would
    # not be the one drover opens for a URL.
    pool: Any = client._store.pool
    conns = [pool.getconn() for _ in range(size)]
    for conn in conns:
        pool.putconn(conn)


def enqueue_bulk(url: str, n: int, batch: int) -> float:
    client = drover.Client(url)
    try:
        _warm_pool(client, 1)
        models = [Noop(n=i) for i in range(n)]  # built before the clock, as for raw
        started = time.perf_counter()
        for start in range(0, n, batch):
            client.insert_many(models[start : start + batch])
        return time.perf_counter() - started
    finally:
        client.close()


def enqueue_single(url: str, n: int, threads: int) -> float:
    client = drover.Client(url)
    try:
        _warm_pool(client, min(threads, client._store.pool.max_size))

        def work(_: object, numbers: range) -> None:
            for i in numbers:
                client.insert(Noop(n=i))

        return run_threads(n, threads, lambda: None, work)
    finally:
        client.close()


def drain(url: str, n: int, concurrency: int) -> float:
    finished = threading.Event()
    lock = threading.Lock()
    count = 0
    workers = drover.Workers()

    @workers.register
    def noop(job: drover.Job[Noop]) -> None:
        nonlocal count
        peers.work()
        with lock:
            count += 1
            if count == n:
                finished.set()

    client = drover.Client(url, drover.Config(workers=workers, concurrency=concurrency))
    _warm_pool(client, 1)
    started = time.perf_counter()
    client.start()
    wait_for(finished, f"drover draining {n} jobs", timeout=1800)
    client.stop()
    return time.perf_counter() - started


def latency(url: str, n: int, rate: float) -> list[float]:
    # The worker runs in a process of its own, as graphile-worker's does: the
    # producer's inserts and the worker's threads do not share one GIL.
    recorder = Latencies(n)
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("drover_latency_worker.py")), url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdin is not None
    ready = threading.Event()
    reader = threading.Thread(target=recorder.read_worker, args=(proc.stdout, ready), daemon=True)
    reader.start()
    producer = drover.Client(url)
    try:
        wait_for(ready, "drover latency worker start", timeout=60)
        _warm_pool(producer, 1)
        return recorder.drive(rate, lambda i, sent: producer.insert(Ping(i=i, sent=sent)))
    finally:
        producer.close()
        proc.stdin.close()
        proc.wait(30)


def drain_shared(url: str, concurrency: int) -> tuple[float, float]:
    """One of several processes draining one table; returns its (start, end) wall times.

    A started client works until no job waits or runs anywhere, polled every
    20 ms on a connection of the benchmark's own, then stops (recording every
    outcome it holds), the same stop rule as the raw reference's.
    """
    workers = drover.Workers()

    @workers.register
    def noop(job: drover.Job[Noop]) -> None:
        pass

    client = drover.Client(url, drover.Config(workers=workers, concurrency=concurrency))
    _warm_pool(client, 1)
    with psycopg.connect(url, autocommit=True) as watch:
        started = time.time()
        client.start()
        while watch.execute(raw.WORK_LEFT).fetchone() == (True,):
            time.sleep(0.02)
        client.stop()
        return started, time.time()


def latency_load(url: str, n: int, rate: float, concurrency: int) -> tuple[list[float], int]:
    """Enqueue→start of probe jobs while the client drains the filled backlog (see raw's).

    The client works queue ``probe`` with weight 10 and the backlog's queue
    ``default`` with weight 1, as an application would weight its urgent
    queue; the probes are inserted one by one by a second client.
    """
    recorder = Latencies(n)
    workers = drover.Workers()

    @workers.register
    def noop(job: drover.Job[Noop]) -> None:
        pass

    @workers.register
    def ping(job: drover.Job[Ping]) -> None:
        recorder.record(job.args.i, job.args.sent)

    worker = drover.Client(
        url,
        drover.Config(workers=workers, concurrency=concurrency, queues={"probe": 10, "default": 1}),
    )
    producer = drover.Client(url)
    _warm_pool(producer, 1)
    probe = drover.InsertOpts(queue="probe")
    worker.start()
    try:
        values = recorder.drive(rate, lambda i, sent: producer.insert(Ping(i=i, sent=sent), probe))
        with psycopg.connect(url, autocommit=True) as conn:
            left = conn.execute(raw.BACKLOG_LEFT).fetchone()
        return values, int(left[0]) if left else 0
    finally:
        worker.stop(10)
        producer.close()
