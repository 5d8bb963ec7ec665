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
funnel / base.

``--stubbed`` measures instead, without a database, the Python each insert
path costs the caller: the statements are replaced by stubs that return the
row (a sleep of 50-80 us stands in for the round trip under the 8 threads),
and each figure is the best of several repetitions, in microseconds per job.
The stubs patch each build's private modules, so they know both layouts.
See docs/benchmarks.md, "The insert funnel".
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


def stubbed() -> dict[str, Any]:
    """The Python cost per job of each insert path, the database replaced by stubs."""
    import importlib.util
    import timeit

    import drover
    import drover._insert.tx as txmod
    from drover._db.rows import new_row

    class Ping(drover.JobArgs, kind="funnel_bench_ping"):
        n: int
        account: str = "acct-0001"

    funnel = importlib.util.find_spec("drover._insert.funnel") is not None
    client = drover.Client("host=/nonexistent dbname=none")
    client._notifier = None
    store = client._combiner._store

    def one(params: Any, notify: bool = False) -> Any:
        return new_row(params, 1, None)

    client._combiner.insert = one  # type: ignore[method-assign]
    store.insert_many = lambda batch: []  # type: ignore[method-assign]
    txmod.job_insert = lambda conn, params, **kw: new_row(params, 1, None)  # type: ignore[assignment]
    txmod.resolve_connection = lambda obj, api: obj  # type: ignore[assignment]
    args = Ping(n=1)
    items = [Ping(n=i) for i in range(1000)]

    def best(fn: Any, number: int, repeat: int = 15) -> float:
        return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6

    found = {
        "insert": best(lambda: client.insert(args), 10_000),
        "insert_tx": best(lambda: client.insert_tx(object(), args), 10_000),
        "insert_many": best(lambda: client.insert_many(items), 50) / len(items),
    }

    class Borrowed:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        async def __aenter__(self) -> None:
            return None

        async def __aexit__(self, *exc: Any) -> None:
            return None

    async def aio_one(conn: Any, params: Any, **kwargs: Any) -> Any:
        return new_row(params, 1, None)

    async def ready(action: str) -> None:
        return None

    aclient = drover.AsyncClient("host=/nonexistent dbname=none")
    aclient._ready = ready  # type: ignore[method-assign,assignment]
    aclient._notifier = None
    module: Any = importlib.import_module(
        "drover._insert.aio_tx" if funnel else "drover.async_client"
    )
    module.aio_borrow, module.aio_insert = Borrowed, aio_one
    if funnel:
        aclient._write._pool = ready  # type: ignore[attr-defined]

    async def inserts(count: int) -> None:
        for _ in range(count):
            await aclient.insert(args)

    found["async"] = (
        min(timeit.repeat(lambda: asyncio.run(inserts(10_000)), number=1, repeat=7)) / 10_000 * 1e6
    )

    def slow_one(params: Any, notify: bool = False) -> Any:
        time.sleep(0.00005)
        return new_row(params, 1, None)

    def slow_rows(batch: Any) -> Any:
        time.sleep(0.00008)
        return [new_row(p, 1, None) for p in batch]

    del client._combiner.insert  # back to the real combiner, on stubbed statements
    store.insert, store.insert_rows = slow_one, slow_rows  # type: ignore[method-assign]

    def concurrent(threads: int = 8, share: int = 2000) -> float:
        start = threading.Barrier(threads + 1)

        def insert() -> None:
            start.wait()
            for n in range(share):
                client.insert(Ping(n=n))

        workers = [threading.Thread(target=insert) for _ in range(threads)]
        for worker in workers:
            worker.start()
        cpu = time.process_time()
        start.wait()
        for worker in workers:
            worker.join()
        return (time.process_time() - cpu) / (threads * share) * 1e6

    found["single-c8 CPU"] = min(concurrent() for _ in range(5))
    return {"module": drover.__file__, **found}


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
    parser.add_argument("--stubbed", action="store_true", help="Python only, no database")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        scenario, url, count = args.child
        found = stubbed() if scenario == "stubbed" else child(scenario, url, int(count))
        print(json.dumps(found))
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
    if args.stubbed:
        stubbed_rounds(builds, args.rounds)
        return
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


def stubbed_rounds(builds: dict[str, tuple[str, Path, Path]], rounds: int) -> None:
    found: dict[str, list[dict[str, Any]]] = {build: [] for build in builds}
    for round_ in range(rounds):
        order = ["base", "funnel"] if round_ % 2 == 0 else ["funnel", "base"]
        for build in order:
            python, src, cwd = builds[build]
            result = run_child(python, src, "stubbed", "", 0, cwd)
            found[build].append(result)
            shown = ", ".join(f"{k} {v:.2f}" for k, v in result.items() if k != "module")
            print(f"round {round_ + 1} {build:>6}: {shown} (us per job)", flush=True)
    print()
    print("| path | base µs/job (best round) | funnel µs/job (best round) | funnel - base |")
    print("|---|---|---|---|")
    for key in (k for k in found["base"][0] if k != "module"):
        base = min(r[key] for r in found["base"])
        funnel = min(r[key] for r in found["funnel"])
        print(f"| {key} | {base:.2f} | {funnel:.2f} | {funnel - base:+.2f} |")


if __name__ == "__main__":
    main()
