"""``drover bench``: synthetic no-op jobs through a real client, measured.

Modes:

- ``enqueue``: insert ``jobs`` jobs with ``insert_many`` in batches of
  ``batch`` (or, with ``batch`` 1, with ``insert`` from ``concurrency`` threads).
- ``drain``: insert the jobs first (not timed), then time a client at
  ``concurrency`` from start until every one of them has completed.
- ``latency``: an idle client; another client inserts one job at a time (about
  20 per second) and each job's enqueue → start time is recorded.
- ``burst``: ``drain`` into a freshly created database whose ``drover_jobs``
  has never been analyzed (its planner statistics still say "empty"), as
  after a quiet period in production. Compare it with ``drain``.

Each run uses a queue of its own, so leftovers from earlier runs are never
counted. Peak RSS is this process's.
"""

from __future__ import annotations

import contextlib
import os
import resource
import secrets
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from psycopg.conninfo import make_conninfo

import drover
from drover._db.bench import analyze_jobs, create_database, drop_database, server_settings
from drover._db.embedded import embedded_postgres

__all__ = ["BenchResult", "run_bench"]

MODES = ("enqueue", "drain", "latency", "burst")


class BenchNoop(drover.JobArgs, kind="drover_bench_noop"):
    sent: float = 0.0


@dataclass
class BenchResult:
    """What one ``drover bench`` run measured."""

    mode: str
    jobs: int
    concurrency: int
    batch: int
    queues: int
    seconds: float
    jobs_per_second: float
    latency_ms: dict[str, float] = field(default_factory=dict)
    peak_rss_mb: float = 0.0
    cpu_count: int = 0
    python: str = ""
    drover: str = ""
    postgres: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def pick(p: float) -> float:
        return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]

    return {
        "p50": round(statistics.median(ordered), 3),
        "p95": round(pick(0.95), 3),
        "p99": round(pick(0.99), 3),
        "max": round(ordered[-1], 3),
    }


def _peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return round(peak / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)


@contextlib.contextmanager
def _database(url: str | None) -> Iterator[str]:
    if url and url != "embedded":
        yield url
    else:
        # Real durability settings: a benchmark never turns fsync off.
        with embedded_postgres(tune_for_tests=False) as embedded:
            yield embedded


@contextlib.contextmanager
def _fresh(url: str, wanted: bool) -> Iterator[str]:
    """``url`` itself, or (``wanted``) a new database on its server, dropped afterwards."""
    if not wanted:
        yield url
        return
    name = f"drover_bench_burst_{secrets.token_hex(4)}"
    create_database(url, name)
    try:
        yield make_conninfo(url, dbname=name)
    finally:
        drop_database(url, name)


def _queue_names(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{i}" for i in range(count)]


def _enqueue(url: str, jobs: int, batch: int, concurrency: int, queues: list[str]) -> float:
    client = drover.Client(url, drover.Config(notify=False))
    try:
        started = time.perf_counter()
        if batch > 1:
            for start in range(0, jobs, batch):
                size = min(batch, jobs - start)
                client.insert_many(
                    [
                        (BenchNoop(), drover.InsertOpts(queue=queues[(start + i) % len(queues)]))
                        for i in range(size)
                    ]
                )
        else:
            counter = iter(range(jobs))
            lock = threading.Lock()

            def insert_some() -> None:
                while True:
                    with lock:
                        n = next(counter, None)
                    if n is None:
                        return
                    client.insert(BenchNoop(), drover.InsertOpts(queue=queues[n % len(queues)]))

            threads = [threading.Thread(target=insert_some) for _ in range(concurrency)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        return time.perf_counter() - started
    finally:
        client.close()


def _drain(
    url: str, jobs: int, concurrency: int, queues: list[str], *, analyze: bool = True
) -> tuple[float, list[float]]:
    _enqueue(url, jobs, 5000, 1, queues)
    if analyze:
        # The steady state: statistics that describe the filled table, so
        # autovacuum's ANALYZE does not land mid-drain. ``burst`` skips this.
        analyze_jobs(url)
    latencies: list[float] = []
    done = threading.Event()
    count = 0
    lock = threading.Lock()
    workers = drover.Workers()

    @workers.register
    def noop(job: drover.Job[BenchNoop]) -> None:
        nonlocal count
        # created_at is the database clock; fine on one host, approximate across hosts.
        waited = (time.time() - job.created_at.timestamp()) * 1000
        with lock:
            latencies.append(waited)
            count += 1
            if count == jobs:
                done.set()

    config = drover.Config(
        workers=workers, concurrency=concurrency, queues=dict.fromkeys(queues, 1)
    )
    client = drover.Client(url, config)
    started = time.perf_counter()
    client.start()
    done.wait()
    client.stop()  # includes recording every outcome
    return time.perf_counter() - started, latencies


def _latency(url: str, jobs: int, queues: list[str]) -> tuple[float, list[float]]:
    latencies: list[float] = []
    arrived = threading.Semaphore(0)
    workers = drover.Workers()

    @workers.register
    def ping(job: drover.Job[BenchNoop]) -> None:
        latencies.append((time.perf_counter() - job.args.sent) * 1000)
        arrived.release()

    worker = drover.Client(
        url, drover.Config(workers=workers, queues=dict.fromkeys(queues, 1), poll_interval=1)
    )
    producer = drover.Client(url)
    worker.start()
    engine = worker._engine
    if engine is not None and engine.listener is not None:
        engine.listener.listening.wait(10)
    started = time.perf_counter()
    try:
        for n in range(jobs):
            producer.insert(
                BenchNoop(sent=time.perf_counter()),
                drover.InsertOpts(queue=queues[n % len(queues)]),
            )
            arrived.acquire(timeout=10)
            time.sleep(0.05)  # about 20 jobs per second: an idle queue, not a backlog
    finally:
        worker.stop(10)
        producer.close()
    return time.perf_counter() - started, latencies


def run_bench(
    database: str | None,
    *,
    mode: str,
    jobs: int,
    concurrency: int,
    batch: int,
    queues: int,
) -> BenchResult:
    """Run one benchmark and return what it measured."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    with _database(database) as server, _fresh(server, mode == "burst") as url:
        drover.migrate(url)
        names = _queue_names(f"bench-{secrets.token_hex(3)}", queues)
        latencies: list[float] = []
        if mode == "enqueue":
            seconds = _enqueue(url, jobs, batch, concurrency, names)
        elif mode in ("drain", "burst"):
            seconds, latencies = _drain(url, jobs, concurrency, names, analyze=mode == "drain")
        else:
            seconds, latencies = _latency(url, jobs, names)
        settings = server_settings(url)
    return BenchResult(
        mode=mode,
        jobs=jobs,
        concurrency=concurrency,
        batch=batch,
        queues=queues,
        seconds=round(seconds, 4),
        jobs_per_second=round(jobs / seconds, 1) if seconds > 0 else 0.0,
        latency_ms=_percentiles(latencies),
        peak_rss_mb=_peak_rss_mb(),
        cpu_count=os.cpu_count() or 0,
        python=sys.version.split()[0],
        drover=drover.__version__,
        postgres=settings,
    )
