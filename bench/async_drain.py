"""Async handlers against sync ones: I/O-bound drains and no-op drains, side by side in one run.

    python bench/async_drain.py                    # embedded PostgreSQL, defaults below
    python bench/async_drain.py --io-jobs 20000 --noop-jobs 5000 --rounds 3
    python bench/async_drain.py --database postgresql://127.0.0.1:5432/postgres --json a.json

Every drain runs in a child process of its own (so its resident memory is
its own): the parent inserts the jobs, the child starts a client, times it
from ``start`` until every job is ``completed`` (read from the table every
20 ms) and reports jobs per second, its peak resident set (``VmHWM``), its
CPU time per job and, when the server runs on this host, the server's CPU
time per job (its processes in /proc): where the time goes.
The rows, in one run against the same server:

- ``async-io``: ``await asyncio.sleep(0.05)`` at concurrency --async-concurrency
  (500): the ideal is concurrency / 0.05 s = 10,000 jobs/s; the target is
  >= 80 % of it with a peak RSS <= 100 MB.
- ``async-ceiling``: the same number of jobs, handlers that return at once,
  at the same concurrency: what the claim and completion round trips allow
  on this machine, the ceiling ``async-io`` cannot pass whatever its handlers.
- ``sync-io``: ``time.sleep(0.05)`` on pool threads at concurrency
  --sync-concurrency (100), for comparison (ideal 2,000 jobs/s).
- ``async-noop`` and ``sync-noop``: handlers that return at once, at
  concurrency --noop-concurrency (50), in an order that alternates between
  rounds; the figure is the median per-round ratio async / sync (target >=
  0.80).

The parent creates a scratch database on the server (the embedded one by
default, ``fsync`` on) and drops it at the end. See docs/benchmarks.md, "Async
handlers".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

import psycopg
from _scaffold import scratch_database, server

import drover

SLEEP = 0.05
IO_TARGET = 0.80
RSS_TARGET_MB = 100.0
NOOP_TARGET = 0.80


class Work(drover.JobArgs, kind="async_bench"):
    n: int


def _workers(variant: str) -> drover.Workers:
    workers = drover.Workers()
    if variant == "async-io":

        async def work(job: drover.Job[Work]) -> None:
            await asyncio.sleep(SLEEP)

        workers.register(work)
    elif variant == "sync-io":

        def sync_work(job: drover.Job[Work]) -> None:
            time.sleep(SLEEP)

        workers.register(sync_work)
    elif variant == "async-noop":

        async def noop(job: drover.Job[Work]) -> None:
            return None

        workers.register(noop)
    elif variant == "sync-noop":

        def sync_noop(job: drover.Job[Work]) -> None:
            return None

        workers.register(sync_noop)
    else:
        raise ValueError(variant)
    return workers


def _peak_rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _server_cpu(conn: psycopg.Connection[Any]) -> float | None:
    """CPU seconds used so far by the PostgreSQL server's processes (None: not on this host).

    The postmaster's pid comes from ``postmaster.pid`` in its data directory;
    its children are found in /proc. Backends that exited are not counted.
    """
    try:
        row = conn.execute("SHOW data_directory").fetchone()
        with open(os.path.join(str(row[0]) if row else "", "postmaster.pid")) as f:
            postmaster = int(f.readline())
        tick = os.sysconf("SC_CLK_TCK")
        total = 0
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            # After the name: state, ppid, ..., utime (14th field) and stime (15th).
            if int(entry) == postmaster or int(fields[1]) == postmaster:
                total += int(fields[11]) + int(fields[12])
        return total / tick
    except (OSError, ValueError, psycopg.Error):
        return None


def child(url: str, variant: str, jobs: int, concurrency: int, timeout: float) -> dict[str, Any]:
    """Drain the ``jobs`` already inserted with a fresh client; time it and read the peak RSS."""
    config = drover.Config(
        workers=_workers(variant), concurrency=concurrency, poll_interval=0.05, notify=False
    )
    client = drover.Client(url, config)
    pause = threading.Event()
    with psycopg.connect(url, autocommit=True) as conn:
        server_cpu = _server_cpu(conn)
        began = time.perf_counter()
        cpu = time.process_time()
        client.start()
        deadline = began + timeout
        try:
            while True:
                row = conn.execute(
                    "SELECT count(*) FROM drover_jobs WHERE state = 'completed'"
                ).fetchone()
                if row is not None and row[0] >= jobs:
                    break
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"{variant}: the drain did not finish in {timeout}s")
                pause.wait(0.02)
            elapsed = time.perf_counter() - began
            cpu = time.process_time() - cpu
            server_end = _server_cpu(conn)
            threads = threading.active_count()
            engine = client._engine  # the claim loop's own count, for where the time goes
            claims = engine.fetcher.claims if engine is not None else 0
        finally:
            client.stop(timeout=30)
            client.close()
    return {
        "variant": variant,
        "jobs": jobs,
        "concurrency": concurrency,
        "jobs_per_s": jobs / elapsed,
        "seconds": elapsed,
        "cpu_us_per_job": cpu / jobs * 1e6,
        "server_cpu_us_per_job": (
            None
            if server_cpu is None or server_end is None
            else (server_end - server_cpu) / jobs * 1e6
        ),
        "peak_rss_mb": _peak_rss_mb(),
        "threads_at_end": threads,
        "claim_round_trips": claims,
        "ms_per_claim_round": elapsed / claims * 1000 if claims else None,
        "jobs_per_claim": jobs / claims if claims else None,
    }


def drain(url: str, variant: str, jobs: int, concurrency: int, timeout: float) -> dict[str, Any]:
    """Insert ``jobs`` into an emptied table, then drain them in a child process."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE drover_jobs CASCADE")
    inserter = drover.Client(url)
    try:
        for start in range(0, jobs, 5000):
            inserter.insert_many([Work(n=i) for i in range(start, min(jobs, start + 5000))])
    finally:
        inserter.close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE drover_jobs")
    done = subprocess.run(
        [sys.executable, __file__, "--child", variant, "--database", url,
         "--child-jobs", str(jobs), "--child-concurrency", str(concurrency),
         "--timeout", str(timeout)],
        capture_output=True, text=True, check=False, timeout=timeout + 60,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{variant} drain failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _show(row: dict[str, Any], ideal: float | None = None) -> str:
    pg = row.get("server_cpu_us_per_job")
    server = "" if pg is None else f" (PostgreSQL {pg:.0f} us/job)"
    of_ideal = f" ({row['jobs_per_s'] / ideal:.0%} of {ideal:.0f}/s)" if ideal else ""
    return (
        f"{row['variant']:<11} c{row['concurrency']:<4} {row['jobs']:>6} jobs "
        f"{row['jobs_per_s']:>8.0f} jobs/s{of_ideal}  peak RSS {row['peak_rss_mb']:.0f} MB  "
        f"CPU {row['cpu_us_per_job']:.0f} us/job{server}  threads {row['threads_at_end']}  "
        f"claims {row['claim_round_trips']} ({row['jobs_per_claim'] or 0:.0f} jobs, "
        f"{row['ms_per_claim_round'] or 0:.1f} ms apart)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", help="a server URL (default: an embedded PostgreSQL)")
    parser.add_argument("--io-jobs", type=int, default=20000)
    parser.add_argument("--async-concurrency", type=int, default=500)
    parser.add_argument("--sync-concurrency", type=int, default=100)
    parser.add_argument("--noop-jobs", type=int, default=5000)
    parser.add_argument("--noop-concurrency", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3, help="no-op rounds (interleaved)")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--json", help="write the figures and every trial here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-jobs", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child-concurrency", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        report = child(
            args.database, args.child, args.child_jobs, args.child_concurrency, args.timeout
        )
        print(json.dumps(report))
        return 0
    if min(args.io_jobs, args.noop_jobs, args.rounds) < 1:
        parser.error("--io-jobs, --noop-jobs and --rounds must be at least 1")
    with (
        server(args.database) as url_root,
        scratch_database(url_root, "drover_async_bench", migrate=True) as url,
    ):
        aio = drain(url, "async-io", args.io_jobs, args.async_concurrency, args.timeout)
        aio_ideal = args.async_concurrency / SLEEP
        print(_show(aio, aio_ideal), file=sys.stderr)
        ceiling = drain(url, "async-noop", args.io_jobs, args.async_concurrency, args.timeout)
        print(f"ceiling: {_show(ceiling)}", file=sys.stderr)
        sio = drain(url, "sync-io", args.io_jobs, args.sync_concurrency, args.timeout)
        sio_ideal = args.sync_concurrency / SLEEP
        print(_show(sio, sio_ideal), file=sys.stderr)
        noop: dict[str, list[dict[str, Any]]] = {"sync-noop": [], "async-noop": []}
        for round_ in range(args.rounds):
            order = ["sync-noop", "async-noop"]
            for variant in order if round_ % 2 == 0 else order[::-1]:
                row = drain(url, variant, args.noop_jobs, args.noop_concurrency, args.timeout)
                noop[variant].append(row)
                print(f"round {round_ + 1}: {_show(row)}", file=sys.stderr)
    ratios = [
        a["jobs_per_s"] / s["jobs_per_s"]
        for s, a in zip(noop["sync-noop"], noop["async-noop"], strict=True)
    ]
    ratio = statistics.median(ratios)
    io_met = aio["jobs_per_s"] >= IO_TARGET * aio_ideal and aio["peak_rss_mb"] <= RSS_TARGET_MB
    noop_met = ratio >= NOOP_TARGET
    print(_show(aio, aio_ideal))
    share = aio["jobs_per_s"] / ceiling["jobs_per_s"]
    print(f"{_show(ceiling)}  (the ceiling: async-io ran at {share:.0%} of it)")
    print(_show(sio, sio_ideal))
    for variant in ("sync-noop", "async-noop"):
        rates = [r["jobs_per_s"] for r in noop[variant]]
        print(f"{variant:<11} c{args.noop_concurrency:<4} median {statistics.median(rates):.0f}/s")
    print(f"async/sync no-op per round: {' '.join(f'{r:.2f}' for r in ratios)}  median {ratio:.2f}")
    print(
        f"target async-io >= {IO_TARGET:.0%} of {aio_ideal:.0f}/s with RSS <= {RSS_TARGET_MB:.0f} "
        f"MB: {'met' if io_met else 'NOT met'}; no-op ratio >= {NOOP_TARGET:.2f}: "
        f"{'met' if noop_met else 'NOT met'}"
    )
    if args.json:
        document = {
            "async_io": aio,
            "async_io_ideal": aio_ideal,
            "async_ceiling": ceiling,
            "sync_io": sio,
            "sync_io_ideal": sio_ideal,
            "noop": noop,
            "noop_ratios": ratios,
            "noop_ratio_median": ratio,
            "io_met": io_met,
            "noop_met": noop_met,
        }
        with open(args.json, "w") as out:
            json.dump(document, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
