"""What ``Job.set_progress`` in a tight loop costs a drain, measured side by side in one run.

    python bench/progress.py                       # embedded PostgreSQL, defaults below
    python bench/progress.py --jobs 5000 --rounds 7 --concurrency 10
    python bench/progress.py --database postgresql://127.0.0.1:5432/postgres --json p.json

Each round drains --jobs pre-inserted jobs once per variant, the variants in
an order that alternates between rounds, each drain on a freshly started
client against a table emptied before it:

- ``none``: the handler returns at once (the reference).
- ``progress``: the handler calls ``job.set_progress((i + 1) / 100)`` 100 times.
- ``progress-message``: the same with a message, ``f"step {i}"`` (a string made per call).
- ``floor``: the handler makes 100 calls of a Python function that does nothing:
  what any 100 calls cost, the part of the overhead no implementation of
  ``set_progress`` can remove.

A drain is timed from the client's start until every job is ``completed``
(read from the table every 5 ms). The figures are medians over the rounds of
jobs per second, with each variant's per-round ratio to ``none`` beside them:
the target is ``progress`` >= 0.90 x ``none``. Beside them, this process's CPU
time per job (all its threads) and its ratio to ``none``: steadier than the
wall clock on a machine shared with other work. The parent creates a scratch
database on the server (the embedded one by default, ``fsync`` on) and drops
it at the end. See docs/benchmarks.md, "Progress".
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from typing import Any

import psycopg
from _scaffold import scratch_database, server

import drover

VARIANTS = ("none", "progress", "progress-message", "floor")
TARGET = 0.90
CALLS = 100


class Work(drover.JobArgs, kind="progress_bench"):
    n: int


def _nothing(value: float) -> None:
    """A call that does nothing: the floor's unit of work."""


def _workers(variant: str) -> drover.Workers:
    workers = drover.Workers()
    if variant == "none":

        def work(job: drover.Job[Work]) -> None:
            return None

    elif variant == "progress":

        def work(job: drover.Job[Work]) -> None:
            for i in range(CALLS):
                job.set_progress((i + 1) / CALLS)

    elif variant == "progress-message":

        def work(job: drover.Job[Work]) -> None:
            for i in range(CALLS):
                job.set_progress((i + 1) / CALLS, f"step {i}")

    elif variant == "floor":

        def work(job: drover.Job[Work]) -> None:
            for i in range(CALLS):
                _nothing((i + 1) / CALLS)

    else:
        raise ValueError(variant)
    workers.register(work)
    return workers


def drain(
    url: str, variant: str, jobs: int, concurrency: int, timeout: float
) -> tuple[float, float]:
    """Insert ``jobs``, then time a fresh client draining them.

    Returns jobs per second and this process's CPU time per job in
    microseconds (every thread: the handlers, drover's services, the poll).
    """
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE drover_jobs CASCADE")
    inserter = drover.Client(url)
    try:
        for start in range(0, jobs, 1000):
            inserter.insert_many([Work(n=i) for i in range(start, min(jobs, start + 1000))])
    finally:
        inserter.close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE drover_jobs")
    config = drover.Config(
        workers=_workers(variant), concurrency=concurrency, poll_interval=0.05, notify=False
    )
    client = drover.Client(url, config)
    pause = threading.Event()
    with psycopg.connect(url, autocommit=True) as conn:
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
                pause.wait(0.005)
            elapsed = time.perf_counter() - began
            cpu = time.process_time() - cpu
        finally:
            client.stop(timeout=30)
            client.close()
    return jobs / elapsed, cpu / jobs * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", help="a server URL (default: an embedded PostgreSQL)")
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--no-warmup", action="store_true", help="skip the unrecorded first drain")
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"comma-separated, from {', '.join(VARIANTS)} (none is always run)",
    )
    parser.add_argument("--json", help="write the figures and every trial here")
    args = parser.parse_args(argv)
    chosen = ["none", *(v for v in args.variants.split(",") if v and v != "none")]
    unknown = [v for v in chosen if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown --variants {', '.join(unknown)}; use {', '.join(VARIANTS)}")
    if args.jobs < 1 or args.rounds < 1 or args.concurrency < 1:
        parser.error("--jobs, --rounds and --concurrency must be at least 1")
    raw: dict[str, list[float]] = {v: [] for v in chosen}
    cpu: dict[str, list[float]] = {v: [] for v in chosen}
    with (
        server(args.database) as url_root,
        scratch_database(url_root, "drover_progress_bench", migrate=True) as url,
    ):
        if not args.no_warmup:
            drain(url, "none", min(args.jobs, 1000), args.concurrency, args.timeout)
        for round_ in range(args.rounds):
            order = chosen if round_ % 2 == 0 else chosen[::-1]
            for variant in order:
                rate, cpu_us = drain(url, variant, args.jobs, args.concurrency, args.timeout)
                raw[variant].append(rate)
                cpu[variant].append(cpu_us)
            shown = ", ".join(f"{v} {raw[v][-1]:.0f}/s {cpu[v][-1]:.0f} us" for v in chosen)
            print(f"round {round_ + 1}: {shown}", file=sys.stderr)
    results: dict[str, Any] = {}
    print(
        f"{'variant':<18} {'jobs/s':>8} {'B/A per round':>36} {'B/A':>6} "
        f"{'CPU us/job':>11} {'CPU B/A':>8}"
    )
    for variant in chosen:
        ratios = [b / a for a, b in zip(raw["none"], raw[variant], strict=True)]
        cpu_ratios = [b / a for a, b in zip(cpu["none"], cpu[variant], strict=True)]
        median = statistics.median(ratios)
        results[variant] = {
            "jobs_per_s": statistics.median(raw[variant]),
            "ratios": ratios,
            "ratio_median": median,
            "cpu_us_per_job": statistics.median(cpu[variant]),
            "cpu_ratios": cpu_ratios,
            "cpu_ratio_median": statistics.median(cpu_ratios),
        }
        per_round = " ".join(f"{r:.2f}" for r in ratios)
        print(
            f"{variant:<18} {statistics.median(raw[variant]):>8.0f} {per_round:>36} "
            f"{median:>6.2f} {statistics.median(cpu[variant]):>11.0f} "
            f"{statistics.median(cpu_ratios):>8.2f}"
        )
    met = None
    if "progress" in results:
        met = results["progress"]["ratio_median"] >= TARGET
        print(f"target: progress >= {TARGET:.2f} x none: {'met' if met else 'NOT met'}")
    if args.json:
        document = {
            "jobs": args.jobs,
            "rounds": args.rounds,
            "concurrency": args.concurrency,
            "calls_per_job": CALLS,
            "results": results,
            "raw": raw,
            "cpu_us": cpu,
            "target": TARGET,
            "met": met,
        }
        with open(args.json, "w") as out:
            json.dump(document, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
