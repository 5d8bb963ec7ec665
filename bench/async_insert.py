"""AsyncClient against Client: single inserts and batches, measured side by side in one run.

    python bench/async_insert.py                        # embedded PostgreSQL, fsync on
    python bench/async_insert.py --no-flush             # commits do not wait for the disk
    python bench/async_insert.py --jobs 2000 --reps 9 --database URL --json out.json

Each repetition starts from an empty table and runs the trials interleaved in
blocks of --block inserts (the order rotating from block to block), each
client on its own pool, one caller at a time (one thread; one task on one
event loop kept across blocks), so that a change in the machine's load falls
on every trial alike:

- ``sync``: --jobs calls of ``Client.insert(args)``;
- ``async``: --jobs calls of ``await AsyncClient.insert(args)``;
- ``sync_many`` / ``async_many``: the same number of jobs through
  ``insert_many`` in batches of --batch.

Reported: the median inserts per second of each trial over the repetitions,
and the median of each repetition's ratio of async to sync. Target:
``async`` at least 0.80 x ``sync``. See docs/benchmarks.md and ADR 0034.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time

import psycopg
from _scaffold import scratch_database, server

import drover

TRIALS = ("sync", "async", "sync_many", "async_many")
TARGET = 0.80


class Ping(drover.JobArgs, kind="aiobench_ping"):
    n: int
    account: str = "acct-0001"


def reset(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE drover_jobs CASCADE")
        conn.execute("VACUUM ANALYZE drover_jobs")


class Bench:
    """The two clients, and the event loop the async one lives on."""

    def __init__(self, url: str, batch: int) -> None:
        self.sync = drover.Client(url)
        self.runner = asyncio.Runner()
        self.aio = self.runner.run(self._make(url))
        self.batch = batch

    @staticmethod
    async def _make(url: str) -> drover.AsyncClient:
        return drover.AsyncClient(url)

    def close(self) -> None:
        self.runner.run(self.aio.close())
        self.runner.close()
        self.sync.close()

    def block(self, name: str, start: int, size: int) -> float:
        """Seconds for ``size`` inserts of trial ``name``, numbered from ``start``."""
        numbers = range(start, start + size)
        if name == "sync":
            insert = self.sync.insert
            began = time.perf_counter()
            for n in numbers:
                insert(Ping(n=n))
            return time.perf_counter() - began
        if name == "sync_many":
            began = time.perf_counter()
            for i in range(0, size, self.batch):
                self.sync.insert_many([Ping(n=n) for n in numbers[i : i + self.batch]])
            return time.perf_counter() - began
        return self.runner.run(self._async_block(name, numbers))

    async def _async_block(self, name: str, numbers: range) -> float:
        began = time.perf_counter()
        if name == "async":
            insert = self.aio.insert
            for n in numbers:
                await insert(Ping(n=n))
        else:
            for i in range(0, len(numbers), self.batch):
                await self.aio.insert_many([Ping(n=n) for n in numbers[i : i + self.batch]])
        return time.perf_counter() - began


def repetition(bench: Bench, url: str, rep: int, jobs: int, size: int) -> dict[str, float]:
    """Inserts per second of each trial in one repetition, the trials interleaved in blocks."""
    reset(url)
    spent = dict.fromkeys(TRIALS, 0.0)
    done = 0
    while done < jobs:
        step = min(size, jobs - done)
        turn = (rep + done // size) % len(TRIALS)
        for name in TRIALS[turn:] + TRIALS[:turn]:
            spent[name] += bench.block(name, done, step)
        done += step
    return {name: jobs / seconds for name, seconds in spent.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", help="a server URL (default: an embedded server)")
    parser.add_argument("--jobs", type=int, default=2000, help="inserts per trial")
    parser.add_argument("--reps", type=int, default=7, help="repetitions (odd: a median)")
    parser.add_argument("--block", type=int, default=100, help="inserts per interleaved block")
    parser.add_argument("--batch", type=int, default=100, help="jobs per insert_many call")
    parser.add_argument("--no-flush", action="store_true", help="synchronous_commit = off")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()

    with (
        server(args.database) as server_url,
        scratch_database(server_url, "drover_aiobench", no_flush=args.no_flush) as url,
    ):
        drover.migrate(url)
        with psycopg.connect(url) as conn:
            settings = conn.execute(
                "SELECT split_part(version(), ' on ', 1), current_setting('fsync'), "
                "current_setting('synchronous_commit')"
            ).fetchone()
        bench = Bench(url, args.batch)
        try:
            repetition(bench, url, 0, min(400, args.jobs), args.block)  # warm up
            rates: dict[str, list[float]] = {name: [] for name in TRIALS}
            ratios: dict[str, list[float]] = {"async": [], "async_many": []}
            for rep in range(args.reps):
                measured = repetition(bench, url, rep, args.jobs, args.block)
                for name, rate in measured.items():
                    rates[name].append(rate)
                ratios["async"].append(measured["async"] / measured["sync"])
                ratios["async_many"].append(measured["async_many"] / measured["sync_many"])
                print(
                    f"rep {rep + 1}: "
                    + ", ".join(f"{name} {measured[name]:,.0f}/s" for name in TRIALS),
                    file=sys.stderr,
                )
        finally:
            bench.close()

    assert settings is not None
    print(
        f"{settings[0]} (fsync={settings[1]}, synchronous_commit={settings[2]}) · "
        f"{args.jobs} jobs per trial, {args.reps} repetitions, batches of {args.batch}, one caller"
    )
    print(f"{'trial':<11} {'jobs/s':>10} {'x sync':>7}")
    result: dict[str, dict[str, float]] = {}
    for name in TRIALS:
        rate = statistics.median(rates[name])
        ratio = statistics.median(ratios[name]) if name in ratios else 1.0
        result[name] = {"jobs_per_s": rate, "ratio": ratio}
        print(f"{name:<11} {rate:>10,.0f} {ratio:>6.2f}x")
    ok = result["async"]["ratio"] >= TARGET
    print(f"target: async insert >= {TARGET:.2f}x sync: {'met' if ok else 'MISSED'}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"settings": list(settings), "trials": result, "target": TARGET}, out)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
