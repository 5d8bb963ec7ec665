"""The insert funnel (ADR 0047) against a checkout without it: the insert paths, side by side.

    python bench/insert_funnel.py --base /path/to/other/checkout/src \\
        --base-python /path/to/its/python
    python bench/insert_funnel.py --base ../main/src --rounds 7 --flush --json out.json

Two builds of drover run the same trials, each in a fresh child process:
``funnel`` is this checkout (the interpreter running this script, with this
checkout's ``src`` first on ``PYTHONPATH``), ``base`` is the checkout at
``--base`` (run by ``--base-python``). Each round runs every scenario once
per build, the builds alternating (base first in odd rounds, funnel first in
even ones), on one server (the embedded PostgreSQL, ``synchronous_commit``
off unless ``--flush``, so that the client's Python shows), the table
emptied and vacuumed before each trial:

- ``single``: ``Client.insert`` called --single times from one thread;
- ``single-c8``: the same number of calls from 8 threads (the combiner);
- ``many``: one ``Client.insert_many`` of --many jobs (the direct COPY);
- ``insert_tx``: ``Client.insert_tx`` --single times, each in a transaction
  of its own on one connection;
- ``async``: ``await AsyncClient.insert`` --single times on one event loop.

Each trial reports jobs per second (wall clock, first call to last return)
and the child's CPU time per job (every thread of the process, measured with
``time.process_time``), after a warm-up of 200 calls. The table gives the
median of each over the rounds and the median of the per-round ratios
funnel / base. See docs/benchmarks.md, "The insert funnel".
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
from pathlib import Path
from typing import Any

import psycopg

HERE = Path(__file__).resolve().parent
SCENARIOS = ("single", "single-c8", "many", "insert_tx", "async")


def child(scenario: str, url: str, count: int) -> dict[str, Any]:
    """One trial, in a process of its own; returns its figures."""
    import drover

    class Ping(drover.JobArgs, kind="funnel_bench_ping"):
        n: int
        account: str = "acct-0001"

    config = drover.Config()
    if scenario == "async":

        async def main() -> tuple[float, float]:
            async with drover.AsyncClient(url, config) as client:
                for n in range(200):
                    await client.insert(Ping(n=n))
                cpu, began = time.process_time(), time.perf_counter()
                for n in range(count):
                    await client.insert(Ping(n=n))
                return time.perf_counter() - began, time.process_time() - cpu

        wall, cpu = asyncio.run(main())
        return {"module": drover.__file__, "wall": wall, "cpu": cpu, "jobs": count}
    client = drover.Client(url, config)
    try:
        if scenario == "many":
            client.insert_many([Ping(n=n) for n in range(1000)])
            items = [Ping(n=n) for n in range(count)]
            cpu, began = time.process_time(), time.perf_counter()
            client.insert_many(items)
            wall, used = time.perf_counter() - began, time.process_time() - cpu
        elif scenario == "insert_tx":
            with psycopg.connect(url) as conn:
                for n in range(200):
                    with conn.transaction():
                        client.insert_tx(conn, Ping(n=n))
                cpu, began = time.process_time(), time.perf_counter()
                for n in range(count):
                    with conn.transaction():
                        client.insert_tx(conn, Ping(n=n))
                wall, used = time.perf_counter() - began, time.process_time() - cpu
        else:
            for n in range(200):
                client.insert(Ping(n=n))
            threads = 8 if scenario == "single-c8" else 1
            share = count // threads
            start = threading.Barrier(threads + 1)

            def insert() -> None:
                start.wait()
                for n in range(share):
                    client.insert(Ping(n=n))

            workers = [threading.Thread(target=insert) for _ in range(threads)]
            for worker in workers:
                worker.start()
            cpu, began = time.process_time(), time.perf_counter()
            start.wait()
            for worker in workers:
                worker.join()
            wall, used = time.perf_counter() - began, time.process_time() - cpu
            count = share * threads
    finally:
        client.close()
    return {"module": drover.__file__, "wall": wall, "cpu": used, "jobs": count}


def reset(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE drover_jobs CASCADE")
        conn.execute("VACUUM ANALYZE drover_jobs")


def run_child(
    python: str, src: Path, scenario: str, url: str, count: int, cwd: Path
) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(
        [python, str(Path(__file__).resolve()), "--child", scenario, url, str(count)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{scenario} failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if not result["module"].startswith(str(src)):
        raise RuntimeError(f"the child imported {result['module']}, not drover from {src}")
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", help="the other checkout's src directory (required)")
    parser.add_argument("--base-python", default=sys.executable)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--single", type=int, default=3000)
    parser.add_argument("--many", type=int, default=100_000)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--flush", action="store_true", help="keep synchronous_commit on")
    parser.add_argument("--database", help="a server URL (default: an embedded PostgreSQL)")
    parser.add_argument("--json", help="write every trial's figures here")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        scenario, url, count = args.child
        print(json.dumps(child(scenario, url, int(count))))
        return
    if not args.base:
        parser.error("--base is required")
    sys.path.insert(0, str(HERE))
    from _scaffold import scratch_database, server

    base_src = Path(args.base).resolve()
    builds = {
        "base": (args.base_python, base_src, base_src.parent),
        "funnel": (sys.executable, HERE.parent / "src", HERE.parent),
    }
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    trials: list[dict[str, Any]] = []
    with (
        server(args.database, tune_for_tests=not args.flush) as root,
        scratch_database(root, "funnel_bench", migrate=True, no_flush=not args.flush) as url,
    ):
        for round_ in range(args.rounds):
            order = ["base", "funnel"] if round_ % 2 == 0 else ["funnel", "base"]
            for scenario in scenarios:
                count = args.many if scenario == "many" else args.single
                for build in order:
                    python, src, cwd = builds[build]
                    reset(url)
                    found = run_child(python, src, scenario, url, count, cwd)
                    found.update(build=build, scenario=scenario, round=round_)
                    trials.append(found)
                    rate = found["jobs"] / found["wall"]
                    per_job = found["cpu"] / found["jobs"] * 1e6
                    print(
                        f"round {round_ + 1} {scenario:>9} {build:>6}: "
                        f"{rate:>9,.0f} jobs/s, {per_job:6.1f} us CPU/job",
                        flush=True,
                    )
    print()
    print(
        "| scenario | base jobs/s | funnel jobs/s | funnel / base (median of rounds) "
        "| base CPU µs/job | funnel CPU µs/job | CPU funnel / base |"
    )
    print("|---|---|---|---|---|---|---|")
    for scenario in scenarios:
        rows = {
            b: [t for t in trials if t["scenario"] == scenario and t["build"] == b] for b in builds
        }
        rate = {b: [t["jobs"] / t["wall"] for t in rows[b]] for b in builds}
        cpu = {b: [t["cpu"] / t["jobs"] * 1e6 for t in rows[b]] for b in builds}
        ratio = [f / b for b, f in zip(rate["base"], rate["funnel"], strict=True)]
        cpu_ratio = [f / b for b, f in zip(cpu["base"], cpu["funnel"], strict=True)]
        print(
            f"| {scenario} | {statistics.median(rate['base']):,.0f} "
            f"| {statistics.median(rate['funnel']):,.0f} "
            f"| {statistics.median(ratio):.2f} ({min(ratio):.2f} to {max(ratio):.2f}) "
            f"| {statistics.median(cpu['base']):.1f} | {statistics.median(cpu['funnel']):.1f} "
            f"| {statistics.median(cpu_ratio):.2f} ({min(cpu_ratio):.2f} to {max(cpu_ratio):.2f}) |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(trials, indent=2))


if __name__ == "__main__":
    main()
