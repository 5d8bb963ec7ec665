"""What uniqueness by args costs a single insert, measured side by side in one run.

    python bench/unique_insert.py                        # embedded PostgreSQL, fsync on
    python bench/unique_insert.py --no-flush             # commits do not wait for the disk
    python bench/unique_insert.py --jobs 2000 --reps 9 --database URL --json out.json

Each repetition starts from an empty table and runs the trials interleaved in
blocks of --block inserts (the order rotating from block to block), on one
client (one pool) in one thread, so that a change in the machine's load
falls on every trial alike:

- ``plain``: --jobs calls of ``client.insert(args)``;
- ``unique``: the same with ``InsertOpts(unique=Unique(by_args=True))``, every
  job a new identity (the cost of computing and enforcing it);
- ``duplicate``: the same options, every call after the first of the
  repetition hitting one identity (the cost of finding and returning the
  existing job: a second round trip).

Reported: the median inserts per second of each trial over the repetitions,
and the median of each repetition's ratio to ``plain``. Target: ``unique`` at
least 0.80 x ``plain``. See docs/benchmarks.md and docs/uniqueness.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import psycopg
from _scaffold import scratch_database, server

import drover

TRIALS = ("plain", "unique", "duplicate")
TARGET = 0.80


class Ping(drover.JobArgs, kind="uqbench_ping"):
    n: int
    account: str = "acct-0001"


def reset(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE drover_jobs CASCADE")
        conn.execute("VACUUM ANALYZE drover_jobs")


def block(client: drover.Client, name: str, start: int, size: int) -> float:
    """Seconds for ``size`` single inserts of trial ``name``, numbered from ``start``."""
    opts = None if name == "plain" else drover.InsertOpts(unique=drover.Unique(by_args=True))
    insert = client.insert
    began = time.perf_counter()
    if name == "duplicate":
        for _ in range(size):
            insert(Ping(n=-1), opts)
    else:
        for n in range(start, start + size):
            insert(Ping(n=n), opts)
    return time.perf_counter() - began


def repetition(client: drover.Client, url: str, rep: int, jobs: int, size: int) -> dict[str, float]:
    """Inserts per second of each trial in one repetition, the trials interleaved in blocks."""
    reset(url)
    spent = dict.fromkeys(TRIALS, 0.0)
    done = 0
    while done < jobs:
        step = min(size, jobs - done)
        order = TRIALS[(rep + done // size) % 3 :] + TRIALS[: (rep + done // size) % 3]
        for name in order:
            spent[name] += block(client, name, done, step)
        done += step
    return {name: jobs / seconds for name, seconds in spent.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", help="a server URL (default: an embedded server)")
    parser.add_argument("--jobs", type=int, default=2000, help="inserts per trial")
    parser.add_argument("--reps", type=int, default=7, help="repetitions (odd: a median)")
    parser.add_argument("--block", type=int, default=100, help="inserts per interleaved block")
    parser.add_argument("--no-flush", action="store_true", help="synchronous_commit = off")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()

    with (
        server(args.database) as server_url,
        scratch_database(server_url, "drover_uqbench", no_flush=args.no_flush) as url,
    ):
        drover.migrate(url)
        with psycopg.connect(url) as conn:
            settings = conn.execute(
                "SELECT split_part(version(), ' on ', 1), current_setting('fsync'), "
                "current_setting('synchronous_commit')"
            ).fetchone()
        client = drover.Client(url)
        try:
            repetition(client, url, 0, min(300, args.jobs), args.block)  # warm up
            rates: dict[str, list[float]] = {name: [] for name in TRIALS}
            ratios: dict[str, list[float]] = {name: [] for name in TRIALS[1:]}
            for rep in range(args.reps):
                measured = repetition(client, url, rep, args.jobs, args.block)
                for name, rate in measured.items():
                    rates[name].append(rate)
                for name in TRIALS[1:]:
                    ratios[name].append(measured[name] / measured["plain"])
                print(
                    f"rep {rep + 1}: "
                    + ", ".join(f"{name} {measured[name]:,.0f}/s" for name in TRIALS),
                    file=sys.stderr,
                )
        finally:
            client.close()

    assert settings is not None
    print(
        f"{settings[0]} (fsync={settings[1]}, synchronous_commit={settings[2]}) · "
        f"{args.jobs} single inserts per trial, {args.reps} repetitions, one thread"
    )
    print(f"{'trial':<10} {'inserts/s':>10} {'x plain':>8}")
    result: dict[str, dict[str, float]] = {}
    for name in TRIALS:
        rate = statistics.median(rates[name])
        ratio = statistics.median(ratios[name]) if name in ratios else 1.0
        result[name] = {"inserts_per_s": rate, "ratio": ratio}
        print(f"{name:<10} {rate:>10,.0f} {ratio:>7.2f}x")
    ok = result["unique"]["ratio"] >= TARGET
    print(f"target: unique >= {TARGET:.2f}x plain: {'met' if ok else 'MISSED'}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"settings": list(settings), "trials": result, "target": TARGET}, out)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
