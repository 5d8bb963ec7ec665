"""A steady load while something pins the MVCC horizon: throughput, claim latency, claim cost.

    python bench/horizon.py [--database URL] [--rate 800] [--concurrency 32] [--job-ms 1]
        [--pressures idle-tx,rr-readers] [--clean 30] [--pressure 120] [--recovery 60]
        [--variants floors,walk]

One drover worker (``--concurrency`` threads, ``--job-ms`` of sleep per job)
runs in this process while a producer thread inserts ``--rate`` jobs per second
(a batch every 50 ms). Each run has three phases: clean, then a pressure held for
``--pressure`` seconds, then recovery. The pressures:

- ``idle-tx``: one session opens a transaction, takes a transaction id and sits idle;
- ``rr-readers``: four sessions in REPEATABLE READ, each holding one snapshot while
  it scans the job table again and again;
- ``none``: nothing (the jobs processed since the last vacuum, alone).

Every 5 seconds it prints the jobs finished in the sample (as a share of the
offered rate), the p99 and max of the worker's claims in the sample, the waiting
depth, the table's dead tuples, and what one claim costs in shared buffers read
from the worker's floors (``floors``) and walking every level from its oldest
job (``walk``), measured with EXPLAIN on a connection of the benchmark's own.

``--variants walk`` makes the worker walk on every claim, reading every level
from its oldest job (no floors, ADR 0059): run both in one invocation to compare
them on one server. autovacuum runs with the server's defaults.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg

import drover
from drover._db import floors as pg_floors
from drover._db import kernel as pg_kernel
from drover._db.embedded import embedded_postgres
from drover._db.queries import query

SAMPLE = 5.0


class Load(drover.JobArgs, kind="horizon_load"):
    n: int


@dataclass
class Sample:
    at: float
    phase: str
    done: int
    claims: list[float] = field(default_factory=list)
    depth: int = 0
    dead: int = 0
    floors: int = 0
    walk: int = 0


@contextlib.contextmanager
def _database(url: str | None) -> Iterator[str]:
    if url:
        yield url
    else:
        with embedded_postgres(tune_for_tests=False) as embedded:
            yield embedded


class Producer(threading.Thread):
    """Inserts ``rate`` jobs a second, a batch every 50 ms, on a connection of its own."""

    def __init__(self, url: str, rate: float, stop: threading.Event) -> None:
        super().__init__(name="producer", daemon=True)
        self._url, self._rate, self._halt = url, rate, stop

    def run(self) -> None:
        tick = 0.05
        with psycopg.connect(self._url, autocommit=True) as conn:
            started = time.monotonic()
            sent = 0
            while not self._halt.is_set():
                due = int((time.monotonic() - started) * self._rate)
                if due > sent:
                    conn.execute(
                        "INSERT INTO drover_jobs (kind, args) "
                        "SELECT 'horizon_load', jsonb_build_object('n', g) "
                        "FROM generate_series(1, %s) g",
                        (due - sent,),
                    )
                    sent = due
                self._halt.wait(tick)


@contextlib.contextmanager
def _pressure(url: str, kind: str) -> Iterator[None]:
    stop = threading.Event()
    threads: list[threading.Thread] = []
    conns: list[psycopg.Connection[Any]] = []
    if kind == "idle-tx":
        conn = psycopg.connect(url)
        conn.execute("SELECT txid_current()")  # holds an xid, then sits idle in the transaction
        conns.append(conn)
    elif kind == "rr-readers":

        def read() -> None:
            with psycopg.connect(url) as reader:
                reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                while not stop.is_set():
                    reader.execute("SELECT count(*), max(id) FROM drover_jobs")
                    stop.wait(0.2)
                reader.rollback()

        threads = [threading.Thread(target=read, daemon=True) for _ in range(4)]
        for t in threads:
            t.start()
    elif kind != "none":
        raise SystemExit(f"unknown pressure {kind!r}")
    try:
        yield
    finally:
        stop.set()
        for t in threads:
            t.join()
        for conn in conns:
            conn.rollback()
            conn.close()


def _claim_buffers(conn: psycopg.Connection[Any], levels: list[Any] | None) -> int:
    params = {
        "queue": "default",
        "limit": 32,
        "lease_seconds": 60,
        "holder": "probe",
        "done_ids": "{}",
        "done_attempts": "{}",
        **pg_floors.level_params(levels),
    }
    with conn.transaction(force_rollback=True):
        row = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query("job_claim"), params
        ).fetchone()
    assert row is not None
    top = row[0][0]["Plan"]
    return int(top["Shared Hit Blocks"]) + int(top.get("Shared Read Blocks", 0))


def run(args: argparse.Namespace, url: str, pressure: str, variant: str) -> list[Sample]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE drover_jobs CASCADE")
        conn.execute("VACUUM ANALYZE drover_jobs")
    done = 0
    lock = threading.Lock()
    workers = drover.Workers()
    sleep = args.job_ms / 1000

    @workers.register
    def load(job: drover.Job[Load]) -> None:
        nonlocal done
        time.sleep(sleep)
        with lock:
            done += 1

    claims: list[float] = []
    sessions: list[Any] = []
    original = pg_kernel._ClaimSession.claim
    walk_always = variant == "walk"

    def timed(self: Any, *a: Any, **kw: Any) -> Any:
        if walk_always:
            self.cursors.forget()
        if self not in sessions:
            sessions.append(self)
        started = time.perf_counter()
        try:
            return original(self, *a, **kw)
        finally:
            claims.append(time.perf_counter() - started)

    pg_kernel._ClaimSession.claim = timed  # type: ignore[method-assign]
    stop = threading.Event()
    client = drover.Client(url, drover.Config(workers=workers, concurrency=args.concurrency))
    samples: list[Sample] = []
    producer: Producer | None = None
    try:
        client.start()
        producer = Producer(url, args.rate, stop)
        producer.start()
        phases: list[tuple[str, float]] = [
            ("clean", args.clean),
            ("pressure", args.pressure),
            ("recovery", args.recovery),
        ]
        with psycopg.connect(url, autocommit=True) as probe:
            for phase, seconds in phases:
                ctx = _pressure(url, pressure) if phase == "pressure" else contextlib.nullcontext()
                with ctx:
                    end = time.monotonic() + seconds
                    while time.monotonic() < end:
                        before_done, before_claims = done, len(claims)
                        time.sleep(SAMPLE)
                        sample = Sample(time.monotonic(), phase, done - before_done)
                        sample.claims = claims[before_claims:]
                        row = probe.execute(
                            "SELECT count(*) FILTER (WHERE state IN "
                            "('available','scheduled','retryable')) FROM drover_jobs"
                        ).fetchone()
                        sample.depth = row[0] if row else 0
                        row = probe.execute(
                            "SELECT n_dead_tup FROM pg_stat_user_tables "
                            "WHERE relname = 'drover_jobs'"
                        ).fetchone()
                        sample.dead = row[0] if row else 0
                        floors = sessions[0].cursors.floors("default") if sessions else None
                        sample.floors = _claim_buffers(probe, floors)
                        sample.walk = _claim_buffers(probe, None)
                        samples.append(sample)
                        _print_sample(sample, args.rate)
    finally:
        stop.set()
        if producer is not None:
            producer.join()
        client.stop()
        pg_kernel._ClaimSession.claim = original  # type: ignore[method-assign]
    return samples


def _p99(values: list[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def _print_sample(s: Sample, rate: float) -> None:
    print(
        f"  {s.phase:9s} {s.done / SAMPLE:7.0f} jobs/s ({s.done / SAMPLE / rate:4.0%})  "
        f"claim p99 {_p99(s.claims) * 1000:7.1f} ms max {max(s.claims, default=0) * 1000:7.1f}  "
        f"depth {s.depth:6d}  dead {s.dead:7d}  "
        f"buffers/claim floors {s.floors:5d} walk {s.walk:6d}",
        flush=True,
    )


def _summary(samples: list[Sample], rate: float) -> str:
    def of(phase: str, get: Callable[[Sample], float]) -> list[float]:
        return [get(s) for s in samples if s.phase == phase]

    clean = statistics.median(of("clean", lambda s: s.done / SAMPLE)) or 1.0
    parts = []
    for phase in ("clean", "pressure", "recovery"):
        rates = of(phase, lambda s: s.done / SAMPLE)
        claims = [c for s in samples if s.phase == phase for c in s.claims]
        parts.append(
            f"{phase}: {statistics.median(rates) / clean:.0%} / worst {min(rates) / clean:.0%} "
            f"of clean, claim p99 {_p99(claims) * 1000:.1f} ms, buffers/claim "
            f"{max(of(phase, lambda s: s.floors)):.0f} "
            f"(walk {max(of(phase, lambda s: s.walk)):.0f})"
        )
    return "; ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database")
    parser.add_argument("--rate", type=float, default=800.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--job-ms", type=float, default=1.0)
    parser.add_argument("--pressures", default="idle-tx,rr-readers")
    parser.add_argument("--variants", default="floors,walk")
    parser.add_argument("--clean", type=float, default=30.0)
    parser.add_argument("--pressure", type=float, default=120.0)
    parser.add_argument("--recovery", type=float, default=60.0)
    args = parser.parse_args()
    with _database(args.database) as url:
        drover.migrate(url)
        results = []
        for pressure in args.pressures.split(","):
            for variant in args.variants.split(","):
                print(f"== {pressure}, {variant} ({args.rate:.0f} jobs/s offered)", flush=True)
                samples = run(args, url, pressure, variant)
                results.append((pressure, variant, _summary(samples, args.rate)))
        print()
        for pressure, variant, summary in results:
            print(f"{pressure:10s} {variant:6s} {summary}")


if __name__ == "__main__":
    main()
