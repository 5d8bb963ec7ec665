"""Bulk insert: where a batch's time goes, drover beside a raw COPY, in one run.

    python bench/bulk_insert.py --baseline-src ../main/src        # drover, drover@base, raw
    python bench/bulk_insert.py --rounds 9 --jobs 100000 --batch 5000 --json out.json

Each round runs one trial per system, in a fresh child process, the order
rotating from round to round, on one embedded PostgreSQL (fsync on; see
``--no-flush``), the table emptied and vacuumed before each trial. A trial
inserts --jobs no-op jobs in batches of --batch, from pydantic models built
before the clock starts:

- ``drover``: ``Client.insert_many`` (this checkout);
- ``drover@base``: the same from ``--baseline-src`` (e.g. a worktree of main);
- ``raw``: psycopg's COPY of ``(kind, args)`` into ``drover_jobs``, one
  transaction per batch, ``model_dump_json`` per row (bench/peers/raw.py).

Per trial: jobs per second (wall clock), the client's CPU in µs per job
(``time.process_time`` of the child around the inserts: every thread) and
the server's CPU in µs per job (user + system time of the postmaster and
all its children, read from ``/proc`` before and after: the backend, the
WAL writer, the checkpointer). The table gives the median of each, and the
median of the per-round ratios to raw and to drover@base: on a shared
machine the ratios of one round are steadier than any absolute figure.
See docs/benchmarks.md, "Bulk insert against a raw COPY".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _scaffold import scratch_database, server

SYSTEMS = ("drover", "drover@base", "raw")
KIND = "bench_noop"


def _child(spec: dict[str, Any]) -> dict[str, float]:
    url, n, batch, pm = spec["url"], spec["jobs"], spec["batch"], spec["postmaster"]
    if spec["system"] == "raw":
        from pydantic import BaseModel

        class NoopArgs(BaseModel):
            n: int

        models = [NoopArgs(n=i) for i in range(n)]
        with psycopg.connect(url) as conn:
            started, cpu, server_cpu = time.perf_counter(), time.process_time(), _server_cpu(pm)
            for start in range(0, n, batch):
                with (
                    conn.transaction(),
                    conn.cursor() as cur,
                    cur.copy("COPY drover_jobs (kind, args) FROM STDIN") as copy,
                ):
                    for model in models[start : start + batch]:
                        copy.write_row((KIND, model.model_dump_json()))
            return _took(started, cpu, server_cpu, pm)
    import drover

    class Noop(drover.JobArgs, kind=KIND):
        n: int

    client = drover.Client(url)
    try:
        pool: Any = client._store.pool
        pool.putconn(pool.getconn())  # the connection opened before the clock, as raw's
        jobs = [Noop(n=i) for i in range(n)]
        started, cpu, server_cpu = time.perf_counter(), time.process_time(), _server_cpu(pm)
        for start in range(0, n, batch):
            client.insert_many(jobs[start : start + batch])
        return _took(started, cpu, server_cpu, pm)
    finally:
        client.close()


def _took(started: float, cpu: float, server_cpu: float, postmaster: int) -> dict[str, float]:
    return {
        "seconds": time.perf_counter() - started,
        "cpu": time.process_time() - cpu,
        "server_cpu": _server_cpu(postmaster) - server_cpu,
    }


def _server_cpu(postmaster: int) -> float:
    """CPU seconds (user + system) of the postmaster and its children so far (read while
    the trial's connections are open: a backend's time goes with it when it exits)."""
    if not postmaster:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        # fields[1] is the parent pid; utime and stime are the 14th and 15th fields.
        if int(entry) == postmaster or int(fields[1]) == postmaster:
            total += int(fields[11]) + int(fields[12])
    return total / ticks


def _postmaster(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SHOW data_directory").fetchone()
    assert row is not None
    return int((Path(row[0]) / "postmaster.pid").read_text().split()[0])


def _reset(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE drover_jobs CASCADE")
        conn.execute("VACUUM ANALYZE drover_jobs")


def _trial(system: str, url: str, args: argparse.Namespace, postmaster: int) -> dict[str, float]:
    _reset(url)
    env = dict(os.environ)
    if system == "drover@base":
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (args.baseline_src, env.get("PYTHONPATH")) if p
        )
    spec = {
        "system": system,
        "url": url,
        "jobs": args.jobs,
        "batch": args.batch,
        "postmaster": postmaster,
    }
    proc = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=600,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{system} trial failed:\n{proc.stderr[-3000:]}")
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    n = args.jobs
    return {
        "jobs_per_s": n / result["seconds"],
        "client_cpu_us": result["cpu"] / n * 1e6,
        "server_cpu_us": result["server_cpu"] / n * 1e6,
    }


def _ratio(runs: dict[str, list[dict[str, float]]], system: str, other: str) -> str:
    """The median over the rounds of ``system``'s throughput over ``other``'s."""
    if other not in runs or other == system:
        return "-"
    pairs = zip(runs[system], runs[other], strict=True)
    return f"{statistics.median(a['jobs_per_s'] / b['jobs_per_s'] for a, b in pairs):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--database", help="PostgreSQL server URL (default: embedded)")
    parser.add_argument("--baseline-src", help="drover source tree for drover@base")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=5_000)
    parser.add_argument("--no-flush", action="store_true", help="fsync and friends off")
    parser.add_argument("--json", help="also write every trial to this file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(json.loads(args.child))))
        return
    systems = [s for s in SYSTEMS if s != "drover@base" or args.baseline_src]
    if args.baseline_src:
        args.baseline_src = str(Path(args.baseline_src).resolve())
    runs: dict[str, list[dict[str, float]]] = {s: [] for s in systems}
    with (
        server(args.database, tune_for_tests=args.no_flush) as server_url,
        scratch_database(server_url, "bulk_insert", migrate=True) as url,
    ):
        postmaster = _postmaster(url) if args.database is None else 0
        _trial("drover", url, argparse.Namespace(**{**vars(args), "jobs": 5000}), postmaster)
        for r in range(args.rounds):
            order = systems[r % len(systems) :] + systems[: r % len(systems)]
            for system in order:
                row = _trial(system, url, args, postmaster)
                runs[system].append(row)
                print(
                    f"round {r + 1} {system:>12}: {row['jobs_per_s']:>9,.0f} jobs/s  "
                    f"client {row['client_cpu_us']:.2f} µs/job  "
                    f"server {row['server_cpu_us']:.2f} µs/job",
                    flush=True,
                )
    print(f"\nmedian of {args.rounds} rounds, {args.jobs:,} jobs in batches of {args.batch:,}")
    print("| system | jobs/s | vs raw | vs drover@base | client CPU µs/job | server CPU µs/job |")
    print("|---|---|---|---|---|---|")
    for system in systems:
        rows = runs[system]
        print(
            f"| {system} | {statistics.median(x['jobs_per_s'] for x in rows):,.0f} "
            f"| {_ratio(runs, system, 'raw')} | {_ratio(runs, system, 'drover@base')} "
            f"| {statistics.median(x['client_cpu_us'] for x in rows):.2f} "
            f"| {statistics.median(x['server_cpu_us'] for x in rows):.2f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=2))


if __name__ == "__main__":
    main()
