"""Idle-queue latency: enqueue → handler start, with and without LISTEN/NOTIFY wake-ups.

    python bench/latency.py [--database URL] [--jobs 200] [--rate 20]

A worker client idles on an empty queue (poll_interval 1 s); a second client,
as another process would, inserts one job at a time at ``--rate`` per second.
Each job carries its enqueue instant (same host clock); the handler records
when it starts. Reports p50/p95/p99 for wake-ups on and off.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import threading
import time
from collections.abc import Iterator

import drover
from drover._db.embedded import embedded_postgres


class Ping(drover.JobArgs, kind="bench_ping"):
    sent: float


def measure(url: str, jobs: int, rate: float, notify: bool) -> list[float]:
    latencies: list[float] = []
    done = threading.Semaphore(0)
    workers = drover.Workers()

    @workers.register
    def ping(job: drover.Job[Ping]) -> None:
        latencies.append((time.perf_counter() - job.args.sent) * 1000)
        done.release()

    worker = drover.Client(url, drover.Config(workers=workers, poll_interval=1, notify=notify))
    producer = drover.Client(url, drover.Config(notify=notify))
    worker.start()
    engine = worker._engine
    if notify and engine is not None and engine.listener is not None:
        engine.listener.listening.wait(10)
    try:
        for _ in range(jobs):
            producer.insert(Ping(sent=time.perf_counter()))
            done.acquire(timeout=5)
            time.sleep(1 / rate)
    finally:
        worker.stop(10)
        producer.close()
    return latencies


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


@contextlib.contextmanager
def _database(url: str | None) -> Iterator[str]:
    if url:
        yield url
    else:
        with embedded_postgres(tune_for_tests=False) as embedded:
            yield embedded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database")
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--rate", type=float, default=20.0)
    args = parser.parse_args()
    with _database(args.database) as url:
        drover.migrate(url)
        for notify in (True, False):
            jobs = args.jobs if notify else max(20, args.jobs // 10)
            lat = measure(url, jobs, args.rate, notify)
            print(
                f"wake-ups {'on ' if notify else 'off'}: {len(lat)} jobs  "
                f"p50 {statistics.median(lat):7.2f} ms  p95 {_pct(lat, 95):7.2f} ms  "
                f"p99 {_pct(lat, 99):7.2f} ms"
            )


if __name__ == "__main__":
    main()
