"""What flow control (priorities, limits) costs a drain and an idle queue, side by side in one run.

    python bench/flow.py                    # every row, embedded PostgreSQL (fsync on), 3 reps
    python bench/flow.py --quick --reps 1   # sizes / 10, a smoke run
    python bench/flow.py --reps 5 --rows kind-c50,partitions-c50 --json flow.json

Each row is a pair of trials, A (no flow control) and B (the feature under
test), run once each per repetition in alternating order (A first in odd
repetitions, B first in even ones), each in a fresh child process started
through bench/compare.py's runner, after the parent has emptied the tables
(jobs, queues, limits and their starts; TRUNCATE + VACUUM ANALYZE), inserted
the row's --drain-jobs no-op jobs and analyzed them. Both trials of a row use
the same concurrency and number of processes:

- ``plain-c10`` / ``plain-c50``: A and B alike, no limits (the noise floor);
- ``kind-c10`` / ``kind-c50``: B declares ``concurrency=1,000,000`` on the
  kind (applies to every job, never binds);
- ``kind-rate-c50``: B declares ``rate=1,000,000`` per second on the kind;
- ``queue-c50``: B declares ``concurrency=1,000,000`` on the queue;
- ``partitions-c10`` / ``partitions-c50``: the jobs carry ``p = i % 1000``;
  B declares ``concurrency=1, partition_by="p"``: 1,000 keys, one running
  job each;
- ``partitions-c50x2``: the same over two worker processes of 50, started
  together (A: two plain processes);
- ``priority-c50``: A all priority 0; B priorities 0 to 9 mixed (``i % 10``),
  no limits;
- ``latency``: enqueue→start of --latency-jobs probes sent one by one at
  --rate per second to an idle worker; B declares ``rate=1,000`` per second on
  the probes' kind. p50 / p95 / max, in ms.

Reported per row: the median of each side, B/A per repetition (its range) and
the median B/A, and for drains each side's slowest repetition; for latency
the worst probe of every run. See docs/benchmarks.md, "Flow control".
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compare
import peers
from peers import Latencies, raw

TABLES = ["drover_jobs", "drover_queues", "drover_limits", "drover_limit_starts"]
KIND = "bench_noop"
PING = "bench_ping"
NOT_BINDING = 1_000_000

# row -> (concurrency, processes, B's limits, how the jobs are filled)
# A limit is (scope, partition_by, concurrency, rate); "kind" scopes the drained kind.
Limits = list[tuple[str, str | None, int | None, int | None]]
DRAINS: dict[str, tuple[int, int, Limits, str]] = {
    "plain-c10": (10, 1, [], "plain"),
    "plain-c50": (50, 1, [], "plain"),
    "kind-c10": (10, 1, [("kind", None, NOT_BINDING, None)], "plain"),
    "kind-c50": (50, 1, [("kind", None, NOT_BINDING, None)], "plain"),
    "kind-rate-c50": (50, 1, [("kind", None, None, NOT_BINDING)], "plain"),
    "queue-c50": (50, 1, [("queue", None, NOT_BINDING, None)], "plain"),
    "partitions-c10": (10, 1, [("kind", "p", 1, None)], "partitions"),
    "partitions-c50": (50, 1, [("kind", "p", 1, None)], "partitions"),
    "partitions-c50x2": (50, 2, [("kind", "p", 1, None)], "partitions"),
    "priority-c50": (50, 1, [], "priorities"),
}
ROWS = (*DRAINS, "latency")
LATENCY_RATE_LIMIT = 1_000
# row -> minimum B/A (throughput) or maximum B - A in ms (latency p50), from the spec.
TARGETS: dict[str, float] = {
    "kind-c10": 0.90,
    "kind-c50": 0.90,
    "kind-rate-c50": 0.90,
    "queue-c50": 0.90,
    "partitions-c10": 0.70,
    "partitions-c50": 0.70,
    "partitions-c50x2": 0.70,
    "priority-c50": 0.95,
}
LATENCY_P50_TARGET_MS = 1.0


# --- child side -----------------------------------------------------------------------------


def _limits(spec_limits: Limits, scope: str) -> list[Any]:
    import drover

    return [
        drover.Limit(concurrency=conc, rate=rate, partition_by=part)
        for s, part, conc, rate in spec_limits
        if s == scope
    ]


def _client(spec: dict[str, Any], handler: Any, kind: str) -> Any:
    """A client running ``kind`` with the spec's limits declared on the kind and queue."""
    import drover

    limits: Limits = [tuple(x) for x in spec["limits"]]  # type: ignore[misc]
    kind_limits = _limits(limits, "kind")
    queue_limits = _limits(limits, "queue")

    class Args(drover.JobArgs, kind=kind, limits=kind_limits or None):
        n: int = 0
        p: int = 0
        i: int = 0
        sent: float = 0.0

    workers = drover.Workers()

    @workers.register(args=Args)
    def run(job: drover.Job[Args]) -> None:
        handler(job.args)

    queues = {"default": drover.Queue(weight=1, limits=queue_limits or None)}
    config = drover.Config(workers=workers, concurrency=spec["concurrency"], queues=queues)
    return drover.Client(spec["url"], config), Args


def child(spec_json: str) -> None:
    """Run one timed trial and write its result as JSON to ``spec["out"]``."""
    from peers import drover_queue

    spec = json.loads(spec_json)
    result: dict[str, Any] = {}
    if spec["kind"] == "drain":
        n = spec["n"]
        finished = threading.Event()
        lock = threading.Lock()
        count = 0

        def noop(args: Any) -> None:
            nonlocal count
            with lock:
                count += 1
                if count == n:
                    finished.set()

        client, _ = _client(spec, noop, KIND)
        drover_queue._warm_pool(client, 1)
        started = time.perf_counter()
        client.start()
        peers.wait_for(finished, f"draining {n} jobs", timeout=compare.CHILD_TIMEOUT)
        client.stop()
        result["seconds"] = time.perf_counter() - started
    elif spec["kind"] == "drain_shared":
        client, _ = _client(spec, lambda args: None, KIND)
        drover_queue._warm_pool(client, 1)
        with psycopg.connect(spec["url"], autocommit=True) as watch:
            started_wall = time.time()
            client.start()
            while watch.execute(raw.WORK_LEFT).fetchone() == (True,):
                time.sleep(0.02)
            client.stop()
            result["window"] = [started_wall, time.time()]
    elif spec["kind"] == "latency":
        import drover

        recorder = Latencies(spec["n"])
        worker, args_cls = _client(spec, lambda a: recorder.record(a.i, a.sent), PING)
        producer = drover.Client(spec["url"])
        drover_queue._warm_pool(producer, 1)
        worker.start()
        try:
            result["latencies_ms"] = recorder.drive(
                spec["rate"], lambda i, sent: producer.insert(args_cls(i=i, sent=sent))
            )
        finally:
            worker.stop(10)
            producer.close()
    else:
        raise SystemExit(f"unknown trial kind {spec['kind']!r}")
    Path(spec["out"]).write_text(json.dumps(result))


# --- parent side ----------------------------------------------------------------------------


def reset(url: str) -> None:
    peers.truncate_and_vacuum(url, TABLES)


def fill(url: str, n: int, how: str) -> None:
    """``n`` available no-op jobs of KIND: plain, with ``p = i % 1000``, or priorities i % 10."""
    with (
        psycopg.connect(url) as conn,
        conn.transaction(),
        conn.cursor() as cur,
        cur.copy("COPY drover_jobs (kind, args, priority) FROM STDIN") as copy,
    ):
        for i in range(n):
            args = {"n": i, "p": i % 1000} if how == "partitions" else {"n": i}
            copy.write_row((KIND, json.dumps(args), i % 10 if how == "priorities" else 0))
    peers.execute(url, "ANALYZE drover_jobs")


def finished(url: str) -> int:
    return peers.scalar_pair(
        url, "SELECT count(*) FILTER (WHERE state = 'completed'), 0 FROM drover_jobs"
    )[0]


def drain_trial(url: str, row: str, side: str, n: int) -> dict[str, Any]:
    concurrency, processes, limits, how = DRAINS[row]
    reset(url)
    fill(url, n, how if side == "B" or how == "partitions" else "plain")
    spec: dict[str, Any] = {
        "url": url,
        "n": n,
        "concurrency": concurrency,
        "limits": limits if side == "B" else [],
        "kind": "drain" if processes == 1 else "drain_shared",
    }
    if processes == 1:
        result = compare.run_child(spec, script=__file__)
        seconds = float(result["seconds"])
    else:
        parts = compare.run_children([spec] * processes, script=__file__)
        seconds = max(p["window"][1] for p in parts) - min(p["window"][0] for p in parts)
    done = finished(url)
    if done != n:
        raise compare.TrialFailed(f"{row} {side}: {done} of {n} jobs finished")
    return {"n": n, "seconds": seconds, "jobs_per_s": n / seconds}


def latency_trial(url: str, side: str, n: int, rate: float) -> dict[str, Any]:
    reset(url)
    spec = {
        "url": url,
        "n": n,
        "rate": rate,
        "concurrency": 10,
        "limits": [("kind", None, None, LATENCY_RATE_LIMIT)] if side == "B" else [],
        "kind": "latency",
    }
    result = compare.run_child(spec, script=__file__)
    return {"latencies_ms": result["latencies_ms"], **compare.latency_row(result["latencies_ms"])}


def summarise(row: str, pairs: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    if row == "latency":
        out: dict[str, Any] = {}
        for side in ("A", "B"):
            runs = [p[side] for p in pairs]
            out[side] = {
                "p50": statistics.median(r["p50"] for r in runs),
                "p95": statistics.median(r["p95"] for r in runs),
                "max": max(r["max"] for r in runs),
                "runs_p50": [r["p50"] for r in runs],
            }
        diffs = [p["B"]["p50"] - p["A"]["p50"] for p in pairs]
        out["p50_diffs_ms"] = diffs
        out["p50_diff_ms"] = statistics.median(diffs)
        return out
    ratios = [p["B"]["jobs_per_s"] / p["A"]["jobs_per_s"] for p in pairs]
    return {
        side: {
            "jobs_per_s": statistics.median(p[side]["jobs_per_s"] for p in pairs),
            "runs": [round(p[side]["jobs_per_s"], 1) for p in pairs],
            "max_seconds": max(p[side]["seconds"] for p in pairs),
        }
        for side in ("A", "B")
    } | {"ratios": ratios, "ratio": statistics.median(ratios)}


def table(results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| row | A jobs/s [range] | B jobs/s [range] | B/A [per rep] | slowest A / B s | target |",
        "|---|---|---|---|---|---|",
    ]
    for row, r in results.items():
        if row == "latency":
            continue
        a, b = r["A"], r["B"]
        target = TARGETS.get(row)
        verdict = (
            "—"
            if target is None
            else f"≥ {target:.0%}: " + ("met" if r["ratio"] >= target else "**not met**")
        )
        lines.append(
            f"| {row} | {a['jobs_per_s']:,.0f} [{min(a['runs']):,.0f}-{max(a['runs']):,.0f}] "
            f"| {b['jobs_per_s']:,.0f} [{min(b['runs']):,.0f}-{max(b['runs']):,.0f}] "
            f"| {r['ratio']:.2f} [{min(r['ratios']):.2f}-{max(r['ratios']):.2f}] "
            f"| {a['max_seconds']:.2f} / {b['max_seconds']:.2f} | {verdict} |"
        )
    if "latency" in results:
        r = results["latency"]
        lines += [
            "",
            "| latency | p50 ms [per rep] | p95 ms | max ms |",
            "|---|---|---|---|",
        ]
        for side, label in (("A", "no limit"), ("B", f"rate {LATENCY_RATE_LIMIT}/s on the kind")):
            s = r[side]
            runs = s["runs_p50"]
            lines.append(
                f"| {label} | {s['p50']:.2f} [{min(runs):.2f}-{max(runs):.2f}] "
                f"| {s['p95']:.2f} | {s['max']:.1f} |"
            )
        met = "met" if r["p50_diff_ms"] <= LATENCY_P50_TARGET_MS else "**not met**"
        lines.append(
            f"\np50 B - A: {r['p50_diff_ms']:+.2f} ms (per rep "
            + ", ".join(f"{d:+.2f}" for d in r["p50_diffs_ms"])
            + f"); target ≤ {LATENCY_P50_TARGET_MS:g} ms: {met}"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--database", help="PostgreSQL URL (default: embedded throwaway server)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions (default 3)")
    parser.add_argument("--quick", action="store_true", help="divide every size by 10")
    parser.add_argument("--rows", default=",".join(ROWS), help="comma-separated, default all")
    parser.add_argument("--drain-jobs", type=int, default=20_000)
    parser.add_argument("--latency-jobs", type=int, default=200)
    parser.add_argument("--rate", type=float, default=20.0, help="latency: probes per second")
    parser.add_argument(
        "--no-warmup", action="store_true", help="skip the untimed 1/10-size trials"
    )
    parser.add_argument("--json", help="also write every number to this file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child:
        child(args.child)
        return
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    signal.signal(signal.SIGTERM, _terminate)
    div = 10 if args.quick else 1
    drain_jobs = max(10, args.drain_jobs // div)
    latency_jobs = max(5, args.latency_jobs // div)
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        raise SystemExit(f"unknown row(s) {unknown}; choose from {list(ROWS)}")

    began = time.perf_counter()
    pairs: dict[str, list[dict[str, dict[str, Any]]]] = {}
    with compare.database(args.database) as url:
        info = compare.machine(url)
        pg = info["postgresql"]
        print(
            f"{info['date']} · {info['cpu_count']} CPU ({info['cpu_model']}) · "
            f"PostgreSQL {pg['server_version']} (fsync={pg['fsync']}, "
            f"synchronous_commit={pg['synchronous_commit']}) · pid {os.getpid()}"
        )
        print(f"drain jobs {drain_jobs}, latency probes {latency_jobs}, reps {args.reps}")
        raw.setup(url)

        def one(row: str, side: str, scale: float = 1.0) -> dict[str, Any]:
            if row == "latency":
                return latency_trial(url, side, max(5, int(latency_jobs * scale)), args.rate)
            return drain_trial(url, row, side, max(10, int(drain_jobs * scale)))

        for row in rows:
            if not args.no_warmup and row != "latency":
                for side in ("A", "B"):
                    with contextlib.suppress(compare.TrialFailed):
                        one(row, side, scale=0.1)
            for rep in range(args.reps):
                pair: dict[str, dict[str, Any]] = {}
                for side in ("A", "B") if rep % 2 == 0 else ("B", "A"):
                    try:
                        pair[side] = one(row, side)
                    except (compare.TrialFailed, subprocess.TimeoutExpired) as exc:
                        raise SystemExit(f"{row} rep {rep + 1} {side} failed: {exc}") from exc
                pairs.setdefault(row, []).append(pair)
                if row == "latency":
                    shown = "  ".join(
                        f"{s} p50 {pair[s]['p50']:.2f} p95 {pair[s]['p95']:.2f} "
                        f"max {pair[s]['max']:.1f} ms"
                        for s in ("A", "B")
                    )
                else:
                    a, b = pair["A"]["jobs_per_s"], pair["B"]["jobs_per_s"]
                    shown = f"A {a:8,.0f}  B {b:8,.0f} jobs/s  B/A {b / a:.2f}"
                print(f"{row:>17} rep {rep + 1}: {shown}")

    results = {row: summarise(row, p) for row, p in pairs.items()}
    print(f"\nmedians of {args.reps} · total time {time.perf_counter() - began:.0f} s\n")
    print(table(results))
    if args.json:
        for row in pairs.values():
            for pair in row:
                for side in pair.values():
                    side.pop("latencies_ms", None)
        payload = {
            "machine": info,
            "sizes": {"drain_jobs": drain_jobs, "latency_jobs": latency_jobs, "rate": args.rate},
            "reps": args.reps,
            "results": results,
            "raw": pairs,
        }
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
