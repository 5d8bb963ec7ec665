"""What workflows and results cost next to plain jobs, measured side by side in one run.

    python bench/workflows.py                                  # every row, embedded PostgreSQL
    python bench/workflows.py --rounds 7 --rows fanout,chain
    python bench/workflows.py --base-python /tmp/base26/.venv/bin/python   # adds plain-vs-base
    python bench/workflows.py --database postgresql://127.0.0.1:5432/postgres --json wf.json

Each row is a pair of trials, A (the reference) and B (what is measured
against it), run once each per round, in alternating order, every trial in a
fresh child process. The figures are medians over the rounds, with the ratio
of each round's pair beside them:

- ``fanout``: A drains --fanout-jobs pre-inserted no-op jobs at concurrency
  50; B runs ``group(<that many no-op jobs>).then(callback)`` at concurrency
  50 until the callback has run. Seconds; target B <= 1.4 x A.
- ``chain``: A runs --chain-steps plain no-op jobs one after another (insert
  one, ``client.result`` it, insert the next); B inserts a ``chain`` of that
  many steps and ``client.result``s the last. Jobs per second; target B >=
  0.8 x A. The worker's ``poll_interval`` is 30 s in both, so a step that
  waited for a poll instead of a wake-up would show as a 30 s gap.
- ``base`` (with --base-python): A drains --drain-jobs plain no-op jobs at
  concurrency 50 with the drover installed in that interpreter's environment
  (on a database it migrated itself), B with this one. Jobs per second;
  target B >= 0.95 x A.
- ``result-cost``: drains of --drain-jobs at concurrency 50, handlers
  returning ``None`` (A) or a small dict (B). Jobs per second.
- ``result-wait``: --probes sequential probes, each inserting a no-op job into
  an idle worker and waiting for its end, by polling ``get_job`` every 10 ms
  (A) or with ``client.result`` (B). Milliseconds, insert to return.

The parent creates scratch databases on the server (the embedded one by
default, ``fsync`` on; or --database) and drops them at the end. See
docs/benchmarks.md, "Workflows and results".
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
from _scaffold import scratch_database, server

import drover

ROWS = ("fanout", "chain", "base", "result-cost", "result-wait")
CHILD_TIMEOUT = 900.0
# A worker that polls this rarely only starts a job promptly when woken.
SLOW_POLL = 30.0
# (row) -> (what is compared, "max" or "min" bound on B / A, the bound)
TARGETS: dict[str, tuple[str, str, float]] = {
    "fanout": ("seconds", "max", 1.40),
    "chain": ("jobs_per_s", "min", 0.80),
    "base": ("jobs_per_s", "min", 0.95),
}


class Noop(drover.JobArgs, kind="wfbench_noop"):
    n: int


class Step(drover.JobArgs, kind="wfbench_step"):
    i: int


class Callback(drover.JobArgs, kind="wfbench_callback"):
    pass


# --- child side: one trial, with whichever drover this interpreter imports -----------------


def _execute(url: str, *statements: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows: list[tuple[Any, ...]] = []
        for text in statements:
            cur = conn.execute(text.encode())
            if cur.description is not None:
                rows = cur.fetchall()
        return rows


def _reset(url: str) -> None:
    # CASCADE takes drover_job_deps along where the schema has it.
    _execute(url, "TRUNCATE drover_jobs CASCADE", "VACUUM ANALYZE drover_jobs")
    if _execute(url, "SELECT to_regclass('drover_job_deps') IS NOT NULL") == [(True,)]:
        _execute(url, "VACUUM ANALYZE drover_job_deps")


def _analyze(url: str) -> None:
    # Statistics for the filled tables, so autovacuum's ANALYZE does not
    # switch a plan mid-trial.
    _execute(url, "ANALYZE drover_jobs")
    if _execute(url, "SELECT to_regclass('drover_job_deps') IS NOT NULL") == [(True,)]:
        _execute(url, "ANALYZE drover_job_deps")


def _states(url: str) -> dict[str, int]:
    rows = _execute(url, "SELECT state::text, count(*) FROM drover_jobs GROUP BY 1")
    return {str(state): int(n) for state, n in rows}


def _expect(url: str, completed: int) -> None:
    found = _states(url)
    if found != {"completed": completed}:
        raise SystemExit(f"expected {completed} completed jobs, found {found}")


def _await(event: threading.Event, what: str, timeout: float) -> None:
    if not event.wait(timeout):
        raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def _drain(spec: dict[str, Any]) -> dict[str, Any]:
    """Fill ``n`` no-op jobs, then time a worker of concurrency ``c`` draining them."""
    url, n, returns = spec["url"], spec["n"], spec.get("returns", "none")
    _reset(url)
    with contextlib.closing(drover.Client(url)) as producer:
        for start in range(0, n, 5000):
            producer.insert_many([Noop(n=i) for i in range(start, min(n, start + 5000))])
    _analyze(url)
    done = threading.Event()
    lock = threading.Lock()
    count = 0
    workers = drover.Workers()

    @workers.register
    def noop(job: drover.Job[Noop]) -> Any:
        nonlocal count
        with lock:
            count += 1
            if count == n:
                done.set()
        return {"n": job.args.n, "ok": True} if returns == "dict" else None

    config = drover.Config(workers=workers, concurrency=spec["c"], poll_interval=SLOW_POLL)
    client = drover.Client(url, config)
    cpu, started = _cpu(), time.perf_counter()
    client.start()
    _await(done, f"{n} jobs", spec["timeout"])
    client.stop()
    seconds = time.perf_counter() - started
    cpu = _cpu() - cpu
    _expect(url, n)
    if returns == "dict":
        stored = _execute(url, "SELECT count(*) FROM drover_jobs WHERE result IS NOT NULL")
        if stored != [(n,)]:
            raise SystemExit(f"expected {n} stored results, found {stored}")
    return {"seconds": seconds, "jobs": n, "cpu_us_per_job": cpu / n * 1e6}


def _fanout(spec: dict[str, Any]) -> dict[str, Any]:
    """Insert ``group(n no-op jobs).then(callback)``, then time a worker running all of it."""
    url, n = spec["url"], spec["n"]
    _reset(url)
    with contextlib.closing(drover.Client(url)) as producer:
        begun = time.perf_counter()
        producer.insert(drover.group(*(Noop(n=i) for i in range(n))).then(Callback()))
        insert_seconds = time.perf_counter() - begun
    _analyze(url)
    done = threading.Event()
    lock = threading.Lock()
    members = 0
    members_at_callback: list[int] = []
    workers = drover.Workers()

    @workers.register
    def noop(job: drover.Job[Noop]) -> None:
        nonlocal members
        with lock:
            members += 1

    @workers.register
    def callback(job: drover.Job[Callback]) -> None:
        with lock:
            members_at_callback.append(members)
        done.set()

    config = drover.Config(workers=workers, concurrency=spec["c"], poll_interval=SLOW_POLL)
    client = drover.Client(url, config)
    cpu, started = _cpu(), time.perf_counter()
    client.start()
    _await(done, "the callback", spec["timeout"])
    client.stop()
    seconds = time.perf_counter() - started
    cpu = _cpu() - cpu
    _expect(url, n + 1)
    if members_at_callback != [n]:
        raise SystemExit(f"the callback ran with {members_at_callback} members done, not [{n}]")
    return {
        "seconds": seconds,
        "jobs": n + 1,
        "insert_seconds": insert_seconds,
        "cpu_us_per_job": cpu / (n + 1) * 1e6,
    }


def _wait_polling(client: drover.Client, job_id: int, every: float, deadline: float) -> None:
    completed = drover.JobState.COMPLETED
    while client.get_job(job_id).state is not completed:
        if time.perf_counter() > deadline:
            raise SystemExit(f"job {job_id} did not complete in time")
        time.sleep(every)


@contextlib.contextmanager
def _idle_worker(url: str, starts: list[float], poll: float) -> Iterator[drover.Client]:
    """A started worker polling every ``poll`` seconds, and a producer client (yielded)."""
    workers = drover.Workers()

    @workers.register
    def step(job: drover.Job[Step]) -> None:
        starts.append(time.perf_counter())

    worker = drover.Client(url, drover.Config(workers=workers, poll_interval=poll))
    producer = drover.Client(url)
    worker.start()
    try:
        # Untimed: the worker has claimed, and the producer's result listener
        # is open, before the clock starts. Waited for by polling, then read
        # with result() once complete: result() on a job still available can
        # make the worker's claim skip it (see docs/benchmarks.md).
        for i in range(3):
            row = producer.insert(Step(i=-1 - i))
            _wait_polling(producer, row.id, 0.001, time.perf_counter() + 2 * poll + 5)
            producer.result(row, timeout=5)
        starts.clear()
        yield producer
    finally:
        worker.stop(10)
        producer.close()


def _gaps_ms(starts: list[float]) -> float:
    return max((b - a for a, b in itertools.pairwise(starts)), default=0.0) * 1e3


def _sequential(spec: dict[str, Any]) -> dict[str, Any]:
    """``n`` plain jobs one after another: insert, wait for its end, insert the next."""
    url, n = spec["url"], spec["n"]
    _reset(url)
    starts: list[float] = []
    with _idle_worker(url, starts, SLOW_POLL) as producer:
        started = time.perf_counter()
        for i in range(n):
            row = producer.insert(Step(i=i))
            if spec["wait"] == "result":
                producer.result(row, timeout=SLOW_POLL / 2)
            else:
                _wait_polling(producer, row.id, 0.001, time.perf_counter() + SLOW_POLL / 2)
        seconds = time.perf_counter() - started
    _expect(url, n + 3)
    return {"seconds": seconds, "jobs": n, "max_gap_ms": _gaps_ms(starts)}


def _chain(spec: dict[str, Any]) -> dict[str, Any]:
    """A chain of ``n`` no-op steps: insert it, wait for the last step's result."""
    url, n = spec["url"], spec["n"]
    _reset(url)
    starts: list[float] = []
    with _idle_worker(url, starts, SLOW_POLL) as producer:
        steps = [Step(i=i) for i in range(n)]  # built before the clock
        started = time.perf_counter()
        inserted = producer.insert(drover.chain(*steps))
        insert_seconds = time.perf_counter() - started
        # The last step is pending until the one before completes, so no
        # claim can race the awaited flag's write here.
        producer.result(inserted.last[0], timeout=spec["timeout"])
        seconds = time.perf_counter() - started
    _expect(url, n + 3)
    if len(starts) != n or _gaps_ms(starts) > SLOW_POLL * 1e3 / 2:
        raise SystemExit(f"{len(starts)} of {n} steps ran, slowest gap {_gaps_ms(starts):.0f} ms")
    return {
        "seconds": seconds,
        "jobs": n,
        "insert_seconds": insert_seconds,
        "max_gap_ms": _gaps_ms(starts),
    }


def _probes(spec: dict[str, Any]) -> dict[str, Any]:
    """Insert a no-op job into an idle worker and wait for its end, ``n`` times in a row.

    The worker polls every second (the default): a probe that the wake-up
    missed shows as a latency near 1,000 ms.
    """
    url, n, how = spec["url"], spec["n"], spec["how"]
    _reset(url)
    latencies: list[float] = []
    with _idle_worker(url, [], 1.0) as producer:
        begun = time.perf_counter()
        for i in range(n):
            # Probes start on a fixed schedule, so each finds the client idle
            # (an insert just after another waits for the notifier's 10 ms gap).
            time.sleep(max(0.0, begun + i * spec["every"] - time.perf_counter()))
            started = time.perf_counter()
            row = producer.insert(Step(i=i))
            if how == "result":
                producer.result(row, timeout=SLOW_POLL / 2)
            else:
                _wait_polling(producer, row.id, 0.01, started + SLOW_POLL / 2)
            latencies.append((time.perf_counter() - started) * 1e3)
    _expect(url, n + 3)
    return {"latencies_ms": latencies, "jobs": n}


KINDS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "drain": _drain,
    "fanout": _fanout,
    "sequential": _sequential,
    "chain": _chain,
    "probes": _probes,
}


def child(spec_json: str) -> None:
    spec = json.loads(spec_json)
    if spec["kind"] == "migrate":
        drover.migrate(spec["url"])
        result: dict[str, Any] = {}
    else:
        result = KINDS[spec["kind"]](spec)
    result["drover"] = drover.__version__
    Path(spec["out"]).write_text(json.dumps(result))


# --- parent side ----------------------------------------------------------------------------


class TrialFailed(RuntimeError):
    pass


def run_child(python: str, spec: dict[str, Any]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="drover-wfbench-") as tmp:
        out = Path(tmp) / "result.json"
        proc = subprocess.run(
            [python, __file__, "--child", json.dumps({**spec, "out": str(out)})],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=CHILD_TIMEOUT,
            check=False,
        )
        if proc.returncode != 0 or not out.exists():
            tail = "\n".join(proc.stdout.strip().splitlines()[-15:])
            raise TrialFailed(f"{spec['kind']} exit {proc.returncode}\n{tail}")
        result: dict[str, Any] = json.loads(out.read_text())
        return result


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def row_specs(
    row: str, args: argparse.Namespace, cur: str, base: str | None, scale: float = 1.0
) -> tuple[tuple[str, dict[str, Any]], tuple[str, dict[str, Any]]]:
    """The (interpreter, spec) of a row's trials A and B."""
    me = sys.executable
    t = {"timeout": args.timeout}

    def size(n: int) -> int:
        return max(1, int(n * scale))

    if row == "fanout":
        n = size(args.fanout_jobs)
        return (
            (me, {"kind": "drain", "url": cur, "n": n, "c": 50, **t}),
            (me, {"kind": "fanout", "url": cur, "n": n, "c": 50, **t}),
        )
    if row == "chain":
        n = size(args.chain_steps)
        return (
            (me, {"kind": "sequential", "url": cur, "n": n, "wait": args.sequential_wait, **t}),
            (me, {"kind": "chain", "url": cur, "n": n, **t}),
        )
    if row == "base":
        assert base is not None
        assert args.base_python
        n = size(args.drain_jobs)
        return (
            (args.base_python, {"kind": "drain", "url": base, "n": n, "c": 50, **t}),
            (me, {"kind": "drain", "url": cur, "n": n, "c": 50, **t}),
        )
    if row == "result-cost":
        n = size(args.drain_jobs)
        return (
            (me, {"kind": "drain", "url": cur, "n": n, "c": 50, "returns": "none", **t}),
            (me, {"kind": "drain", "url": cur, "n": n, "c": 50, "returns": "dict", **t}),
        )
    if row == "result-wait":
        n = size(args.probes)
        return (
            (me, {"kind": "probes", "url": cur, "n": n, "how": "poll", "every": 0.05, **t}),
            (me, {"kind": "probes", "url": cur, "n": n, "how": "result", "every": 0.05, **t}),
        )
    raise ValueError(row)


def figure(row: str, result: dict[str, Any]) -> float:
    """The number a row compares: seconds (fanout), p50 ms (result-wait), else jobs/s."""
    if row == "fanout":
        return float(result["seconds"])
    if row == "result-wait":
        return pct(result["latencies_ms"], 50)
    return float(result["jobs"] / result["seconds"])


def describe(row: str, result: dict[str, Any]) -> str:
    if row == "result-wait":
        lat = result["latencies_ms"]
        return " / ".join(f"{pct(lat, p):.1f}" for p in (50, 95, 99, 100)) + " ms (p50/95/99/max)"
    text = f"{result['seconds']:.3f} s, {result['jobs'] / result['seconds']:,.0f} jobs/s"
    if "insert_seconds" in result:
        text += f", insert {result['insert_seconds'] * 1e3:.0f} ms"
    if "max_gap_ms" in result:
        text += f", slowest step gap {result['max_gap_ms']:.1f} ms"
    if "cpu_us_per_job" in result:
        text += f", cpu {result['cpu_us_per_job']:.0f} µs/job"
    return text


def summarise(row: str, pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    a = [figure(row, p[0]) for p in pairs]
    b = [figure(row, p[1]) for p in pairs]
    out: dict[str, Any] = {
        "a": a,
        "b": b,
        "a_median": statistics.median(a),
        "b_median": statistics.median(b),
        "ratios": [y / x for x, y in zip(a, b, strict=True)],
    }
    out["ratio_of_medians"] = out["b_median"] / out["a_median"]
    out["median_ratio"] = statistics.median(out["ratios"])
    if row == "result-wait":
        for side, i in (("a", 0), ("b", 1)):
            lat = [v for p in pairs for v in p[i]["latencies_ms"]]
            out[f"{side}_pooled_ms"] = {f"p{p}": pct(lat, p) for p in (50, 95, 99, 100)}
            out[f"{side}_over_500ms"] = sum(v > 500 for v in lat)
    for key in ("insert_seconds", "max_gap_ms", "cpu_us_per_job"):
        for side, i in (("a", 0), ("b", 1)):
            values = [p[i][key] for p in pairs if key in p[i]]
            if values:
                out[f"{side}_{key}"] = (
                    max(values) if key == "max_gap_ms" else statistics.median(values)
                )
    if row in TARGETS:
        _, bound, limit = TARGETS[row]
        ratio = out["ratio_of_medians"]
        out["target"] = f"B/A {'<=' if bound == 'max' else '>='} {limit:.2f}"
        out["met"] = ratio <= limit if bound == "max" else ratio >= limit
    return out


LABELS = {
    "fanout": ("plain drain c50 (s)", "group + callback c50 (s)"),
    "chain": ("sequential plain (jobs/s)", "chain (jobs/s)"),
    "base": ("base drain c50 (jobs/s)", "this drain c50 (jobs/s)"),
    "result-cost": ("return None c50 (jobs/s)", "return dict c50 (jobs/s)"),
    "result-wait": ("poll get_job 10 ms (p50 ms)", "client.result (p50 ms)"),
}


def table(results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| row | A | A median | B | B median | B/A (of medians) | B/A per round | target |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row, s in results.items():
        a_label, b_label = LABELS[row]
        per_round = ", ".join(f"{r:.2f}" for r in s["ratios"])
        verdict = "—"
        if "target" in s:
            verdict = f"{s['target']}: {'met' if s['met'] else '**not met**'}"
        lines.append(
            f"| {row} | {a_label} | {s['a_median']:,.3f} | {b_label} | {s['b_median']:,.3f} "
            f"| **{s['ratio_of_medians']:.2f}** | {per_round} | {verdict} |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--database", help="a server URL; scratch databases are made on it")
    parser.add_argument("--base-python", help="an interpreter with the drover to compare against")
    parser.add_argument("--rows", default="fanout,chain,base,result-cost,result-wait")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--fanout-jobs", type=int, default=10_000)
    parser.add_argument("--chain-steps", type=int, default=1_000)
    parser.add_argument("--drain-jobs", type=int, default=20_000)
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument(
        "--sequential-wait",
        choices=("poll", "result"),
        default="poll",
        help="how the chain row's plain baseline waits for each job: get_job every 1 ms "
        "(default) or client.result",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="per trial, seconds")
    parser.add_argument("--no-warmup", action="store_true", help="skip the 1/10-size trials")
    parser.add_argument("--json", help="also write every figure to this file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child:
        child(args.child)
        return
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        raise SystemExit(f"unknown row(s) {unknown}; choose from {list(ROWS)}")
    if "base" in rows and not args.base_python:
        print("skipping row base: no --base-python")
        rows.remove("base")
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    began = time.perf_counter()
    pairs: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {r: [] for r in rows}
    with server(args.database) as server_url, contextlib.ExitStack() as stack:
        cur = stack.enter_context(scratch_database(server_url, "drover_wfbench_cur"))
        run_child(sys.executable, {"kind": "migrate", "url": cur})
        base = None
        if "base" in rows:
            base = stack.enter_context(scratch_database(server_url, "drover_wfbench_base"))
            run_child(args.base_python, {"kind": "migrate", "url": base})
        pg = _execute(cur, "SELECT version(), current_setting('fsync')")[0]
        print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} · {os.cpu_count()} CPU · "
              f"{str(pg[0]).split(' on ')[0]} (fsync={pg[1]}) · rounds {args.rounds}")  # fmt: skip
        if not args.no_warmup:
            for row in rows:
                for python, spec in row_specs(row, args, cur, base, scale=0.1):
                    run_child(python, spec)
        for rnd in range(args.rounds):
            for row in rows:
                (pa, a), (pb, b) = row_specs(row, args, cur, base)
                # Alternate which side goes first, so neither always follows the other.
                if rnd % 2 == 0:
                    ra, rb = run_child(pa, a), run_child(pb, b)
                else:
                    rb, ra = run_child(pb, b), run_child(pa, a)
                pairs[row].append((ra, rb))
                ratio = figure(row, rb) / figure(row, ra)
                print(f"round {rnd + 1} {row:>11}  A {describe(row, ra)}")
                print(f"round {rnd + 1} {row:>11}  B {describe(row, rb)}  B/A {ratio:.2f}")
    results = {row: summarise(row, pairs[row]) for row in rows}
    print(f"\nmedians of {args.rounds} rounds · total {time.perf_counter() - began:.0f} s\n")
    print(table(results))
    for row, s in results.items():
        extras = {k: v for k, v in s.items() if k.startswith(("a_", "b_")) and "median" not in k}
        if extras:
            shown = ", ".join(f"{k} {_fmt(v)}" for k, v in extras.items())
            print(f"{row}: {shown}")
    if args.json:
        settings = {k: v for k, v in vars(args).items() if k not in ("database", "child")}
        payload = {"rounds": args.rounds, "args": settings, "results": results, "raw": pairs}
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
        print(f"\nwrote {args.json}")


def _fmt(value: Any) -> str:
    if isinstance(value, int):
        return str(value)
    if isinstance(value, dict):
        return "/".join(f"{v:.1f}" for v in value.values()) + " ms"
    return f"{value:,.1f}" if value >= 1 else f"{value:.3f}"


if __name__ == "__main__":
    main()
