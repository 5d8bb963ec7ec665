"""``python -m faults soak``: many jobs through three workers under periodic faults.

The soak asks what the fault suite's short scenarios cannot: does anything
grow with the jobs run? It feeds ``--jobs`` (default 1,000,000) jobs in COPY
batches while three worker processes drain them, the backlog held under
``--max-backlog`` so the table measures steady state, with a short retention
pruning finished jobs as it goes. The nemesis injects one fault every
``--fault-every`` seconds. Every ``jobs/50`` finished jobs it samples the
observed worker's RSS and threads, the workers' connections, and the jobs
table's dead tuples and size; at the start and the end it times a probe of
single jobs on the idle queue (enqueue to start, the database's clock).
At the end the fault suite's checker reads the whole history (pruned rows
come from ``soak_archive``, see ``gauges.ARCHIVE_DDL``).

Output: a table of verdicts on stdout, the JSON report at ``--report``; exit
1 if any bound is violated (docs/reliability.md "Soak", ADR 0041).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

import drover
from drover.faults.harness.checker import check
from drover.faults.harness.cluster import Cluster
from drover.faults.harness.fleet import (
    FAULT_KINDS,
    Fleet,
    FleetSettings,
    Nemesis,
    Worker,
    workdir,
)
from drover.faults.harness.history import Params, load_history
from drover.faults.harness.jsonl import HistoryFile
from drover.faults.harness.proxy import TcpProxy
from faults import worker_environment
from faults.soak import figures as fig
from faults.soak.gauges import ARCHIVE_DDL, Database, proc_status
from faults.soak.snapshot import probe_latencies, snapshot
from faults.suite.workload import EFFECTS_DDL, FaultJob

__all__ = ["SOAK_KINDS", "Soak", "main", "run"]

SOAK_KINDS = ("kill", "stop", "terminate", "pg_restart", "drain")
"""The default faults. Not ``pg_crash``: its crash recovery resets the statistics
(``n_dead_tup``) the soak measures. Not the proxy's: the workers then talk to the
server through the orchestrator's Python proxy, whose one thread shares the GIL
with the feeder and, at a soak's rate, becomes the bottleneck it measures (a
heartbeat's socket deadline fires inside the proxy). Both are available with
``--kinds``; a proxy kind routes the workers through the proxy."""

_PROXY_KINDS = frozenset({"proxy_cut", "proxy_blackhole"})

_MiB = 1024 * 1024
_TAIL = 0.95
"""Faults stop once this share of the jobs is done; the rest drains undisturbed."""


@dataclass
class Soak:
    """One soak's knobs: the workload, the workers' timings, and the bounds (ADR 0041's).

    Rates are per 100,000 finished jobs and floors are the whole run's fitted
    growth (see ``figures.slope_verdict``); durations are seconds. ``workers``
    must be 2 or more: the first is observed and never killed, paused or
    drained, so the nemesis needs another.
    """

    jobs: int = 1_000_000
    seed: int = 1
    workers: int = 3
    concurrency: int = 8
    kinds: tuple[str, ...] = SOAK_KINDS
    fault_every: float = 15.0
    """Seconds between the end of one fault and the start of the next."""
    batch: int = 5000
    max_backlog: int = 50_000
    retention: float = 5.0
    prune_interval: float = 1.0
    lease: float = 20.0
    """Seconds. Longer than the fault suite's 4 s: see ADR 0041 (outcomes wait up to ~13 s
    to be written under faults at saturation); the heartbeat is a quarter of it."""
    rescue: float = 1.0
    samples: int = 50
    warmup: float = 0.1
    """The share of the jobs whose samples are left out of the fits."""
    probes: int = 40
    rss_mib_per_100k: float = 8.0
    rss_floor_mib: float = 8.0
    threads_per_100k: float = 1.0
    threads_floor: float = 2.0
    connections_per_100k: float = 2.0
    connections_floor: float = 10.0
    """Per worker process: a client's pool may grow from its minimum (1) to its maximum (10)
    at any time, which is not a leak; the fleet's floor is this times ``workers``."""
    table_factor: float = 1.5
    latency_tolerance: float = 0.2
    latency_floor: float = 0.001
    drain_slack: float = 2.0
    autovacuum_naptime: float | None = None
    """Seconds; None keeps the server's default (one minute)."""
    quiesce_timeout: float = 300.0
    out: Path | None = None
    log: Callable[[str], None] = field(default=print, repr=False)


class _SoakFleet(Fleet):
    """The harness's fleet, spawning the suite's workers for the soak, sparing one observed worker.

    The nemesis never picks the first worker for a per-process fault (kill,
    stop, drain), so its gauges cover the whole soak; it still lives through
    every database and network fault.
    """

    def __init__(
        self, soak: Soak, settings: FleetSettings, dsn: str, effects: str, history: Path
    ) -> None:
        super().__init__(settings, dsn, effects, history)
        self._soak = soak
        self.observed: Worker | None = None

    def spawn(self) -> Worker:
        s = self._soak
        command = [
            sys.executable, "-m", "faults.suite.workload",
            "--dsn", self.dsn, "--effects-dsn", self.effects_dsn,
            "--history", str(self.history), "--concurrency", str(s.concurrency),
            "--lease", str(s.lease), "--heartbeat", str(s.lease / 4),
            "--rescue", str(s.rescue), "--retention", str(s.retention),
            "--prune-interval", str(s.prune_interval),
        ]  # fmt: skip
        proc = subprocess.Popen(
            command, env=worker_environment(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        worker = Worker(proc, time.time())
        self.workers.append(worker)
        if self.observed is None:
            self.observed = worker
        return worker

    def pick(self, rng: random.Random) -> Worker:
        return rng.choice([w for w in self.workers if w is not self.observed])


class _FaultLoop:
    """The nemesis on a thread of its own: one fault, a pause, the next; errors are kept."""

    def __init__(self, nemesis: Nemesis, soak: Soak, rng: random.Random) -> None:
        self._nemesis = nemesis
        self._soak = soak
        self._rng = rng
        self._stop = threading.Event()
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self._loop, name="soak-nemesis", daemon=True)

    def _loop(self) -> None:
        order: list[str] = []
        while not self._stop.wait(self._soak.fault_every):
            if not order:
                order = self._rng.sample(self._soak.kinds, len(self._soak.kinds))
            kind = order.pop()
            try:
                self._nemesis.inject(kind)
            except Exception as exc:  # kept and reported, never silent
                self.errors.append(f"{kind}: {exc!r}")
            self._soak.log(f"fault: {kind}")

    def start(self) -> None:
        self._thread.start()

    def halt(self) -> None:
        """Inject no further fault (the one under way finishes on its own)."""
        self._stop.set()

    def stop(self) -> None:
        """Halt, and wait for the fault under way to finish (idempotent)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


def _items(rng: random.Random, n: int) -> list[drover.InsertItem]:
    """``n`` jobs, mostly fast no-ops, a few flaky, poison and cancelling ones (seeded)."""
    items: list[drover.InsertItem] = []
    for _ in range(n):
        roll = rng.random()
        if roll < 0.04:
            items.append(
                (FaultJob(workload="flaky", fail_times=1), drover.InsertOpts(max_attempts=8))
            )
        elif roll < 0.05:
            items.append((FaultJob(workload="poison"), drover.InsertOpts(max_attempts=2)))
        elif roll < 0.06:
            items.append(FaultJob(workload="cancel"))
        else:
            items.append(FaultJob(workload="fast"))
    return items


def _insert(client: drover.Client, items: list[drover.InsertItem]) -> None:
    deadline = time.monotonic() + 120
    while True:
        try:
            client.insert_many(items)
            return
        except drover.DatabaseError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _sample(db: Database, fleet: _SoakFleet, done: int) -> fig.Sample:
    observed = fleet.observed
    mine = proc_status(observed.proc.pid) if observed is not None else None
    fleet_rss = [s[0] for w in list(fleet.workers) if (s := proc_status(w.proc.pid))]
    table = db.table()
    return fig.Sample(
        jobs_done=done,
        t=time.time(),
        rss_bytes=mine[0] if mine else None,
        threads=mine[1] if mine else None,
        fleet_rss_bytes=sum(fleet_rss) if fleet_rss else None,
        connections=db.connections(),
        dead_tuples=table[0] if table else None,
        live_tuples=table[1] if table else None,
        table_bytes=table[2] if table else None,
        backlog=db.backlog(),
    )


def _drain(db: Database, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if db.backlog() == 0:
            return True
        time.sleep(0.2)
    return False


_TIMING_CODES = frozenset({"RECOVERY_SLOW", "DRAIN_OVERRUN"})
"""The checker's time bounds, judged apart from the delivery contract (lost, twice, stale)."""


def _checker_verdict(codes: dict[str, int], *, timing: bool) -> fig.Verdict:
    found = {c: n for c, n in codes.items() if (c in _TIMING_CODES) == timing}
    what = ", ".join(f"{c} {n}" for c, n in sorted(found.items())) or "0 violations"
    if timing:
        return fig.Verdict("checker: recovery and drain times", what, "none", not found)
    return fig.Verdict("checker: nothing lost, nothing twice unattributed", what, "none", not found)


def _verdicts(soak: Soak, samples: list[fig.Sample], extra: list[fig.Verdict]) -> list[fig.Verdict]:
    steady = [s for s in samples if s.jobs_done >= soak.warmup * soak.jobs]
    slopes = [
        fig.SlopeBound("rss_bytes", "observed worker RSS", soak.rss_mib_per_100k,
                       soak.rss_floor_mib, _MiB, "MiB"),
        fig.SlopeBound("threads", "observed worker threads", soak.threads_per_100k,
                       soak.threads_floor, 1, "threads"),
        fig.SlopeBound("connections", "workers' connections", soak.connections_per_100k,
                       soak.connections_floor * soak.workers, 1, "conns"),
    ]  # fmt: skip
    found = [fig.slope_verdict(steady, b) for b in slopes]
    found.append(
        fig.ceiling_verdict(steady, "table_bytes", "jobs table size", factor=soak.table_factor,
                            floor=8, unit=_MiB, unit_name="MiB")
    )  # fmt: skip
    found.append(
        fig.ceiling_verdict(steady, "dead_tuples", "jobs table dead tuples",
                            factor=soak.table_factor, floor=soak.max_backlog, unit_name="tuples")
    )  # fmt: skip
    return found + extra


def run(soak: Soak) -> tuple[bool, dict[str, Any]]:
    """Run the soak end to end; return whether every bound held, and the JSON report.

    Blocks for the whole run (minutes to tens of minutes) on a cluster of its
    own, so it needs no database and touches none. Not thread-safe. Whatever
    ends it early (an error, Ctrl-C), no worker process outlives it and the
    cluster is stopped and deleted; ``out`` keeps the history only.

    Raises:
        drover.ConfigError: fewer than 2 workers.
        drover.DroverError: the workers never started, or a probe job was not
            claimed within 10 s.
    """
    if soak.workers < 2:
        raise drover.ConfigError(f"Soak.workers must be 2 or more, not {soak.workers}")
    say = soak.log
    rng = random.Random(soak.seed)  # noqa: S311 - a seeded workload, not a secret
    settings = FleetSettings(
        workers=soak.workers,
        lease=soak.lease,
        heartbeat=soak.lease / 4,
        rescue=soak.rescue,
    )
    with workdir(soak.out) as work, Cluster(max_connections=100) as cluster:
        history_dir = work / "history"
        history_dir.mkdir(exist_ok=True)
        cluster.start()
        with psycopg.connect(cluster.url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE soak")
        dsn = cluster.url_for("soak")
        drover.migrate(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(EFFECTS_DDL.encode())
            conn.execute(ARCHIVE_DDL.encode())
            if soak.autovacuum_naptime is not None:
                conn.execute(
                    f"ALTER SYSTEM SET autovacuum_naptime = '{soak.autovacuum_naptime:g}s'".encode()
                )
                conn.execute("SELECT pg_reload_conf()")
        feeder = drover.Client(make_conninfo(dsn, application_name="soak-feeder"))
        db = Database(dsn)
        orchestrator = HistoryFile(history_dir / "orchestrator.jsonl")
        samples: list[fig.Sample] = []
        inserted = 0
        with TcpProxy(("127.0.0.1", cluster.port)) as proxy, contextlib.closing(feeder):
            route = proxy.via(dsn) if _PROXY_KINDS & set(soak.kinds) else dsn
            fleet = _SoakFleet(soak, settings, route, dsn, history_dir)
            with fleet:
                for _ in range(soak.workers):
                    fleet.spawn()
                # A warm-up batch first, so the start probe meets started, warm workers.
                warm = _items(rng, 200)
                _insert(feeder, warm)
                inserted += len(warm)
                if not _drain(db, 120):
                    raise drover.DroverError("the soak's workers did not start within 120 s")
                start = fig.Latency.of(probe_latencies(feeder, dsn, soak.probes))
                inserted += soak.probes
                say(f"start probe: p50 {start.p50 * 1000:.2f} ms; feeding {soak.jobs} jobs")
                nemesis = Nemesis(settings, fleet, cluster, proxy, dsn, orchestrator, rng)
                faults = _FaultLoop(nemesis, soak, random.Random(f"{soak.seed}/faults"))  # noqa: S311
                began = time.time()
                faults.start()
                fed, every = 0, max(1, soak.jobs // soak.samples)
                next_sample, drained, deadline = every, False, float("inf")
                try:
                    while time.monotonic() < deadline:
                        backlog = db.backlog()
                        if backlog is None:
                            time.sleep(0.2)
                            continue
                        done = fed - backlog
                        if done >= next_sample:
                            samples.append(_sample(db, fleet, done))
                            next_sample = (done // every + 1) * every
                            say(f"{done} jobs done, backlog {backlog}")
                        if fed >= soak.jobs and backlog == 0:
                            drained = True
                            break
                        if done >= _TAIL * soak.jobs and deadline == float("inf"):
                            # The tail drains with the faults stopped, as the suite's does.
                            faults.halt()
                            deadline = time.monotonic() + soak.quiesce_timeout
                        if fed < soak.jobs and backlog + soak.batch <= soak.max_backlog:
                            batch = _items(rng, min(soak.batch, soak.jobs - fed))
                            _insert(feeder, batch)
                            fed += len(batch)
                        else:
                            time.sleep(0.05)
                finally:
                    faults.stop()
                elapsed = time.time() - began
                observed = fleet.observed
                alive = observed is not None and observed.proc.poll() is None
                end = fig.Latency.of(probe_latencies(feeder, dsn, soak.probes))
                inserted += fed + soak.probes
                say(f"end probe: p50 {end.p50 * 1000:.2f} ms; stopping the workers")
                for w in fleet.workers:
                    w.proc.send_signal(signal.SIGCONT)
                codes = fleet.stop_all(timeout=30)
        orchestrator.close()
        db.close()
        say("snapshot and check")
        with psycopg.connect(dsn, autocommit=True) as conn:
            # Every row retention deleted during the run (the archive's trigger
            # copied it): the exact measure of pruning, where the table's
            # n_live_tup is an estimate that a server restart resets.
            counted = conn.execute("SELECT count(*) FROM soak_archive").fetchone()
        pruned = int(counted[0]) if counted is not None else 0
        snapshot(dsn, history_dir / "db.jsonl")
        params = Params(lease=soak.lease, rescue_interval=settings.rescue,
                        heartbeat=settings.heartbeat, poll_interval=settings.poll,
                        drain_slack=soak.drain_slack)  # fmt: skip
        report = check(load_history(history_dir, params))
        extra = [
            fig.latency_verdict(start, end, tolerance=soak.latency_tolerance,
                                floor=soak.latency_floor),
            fig.Verdict("jobs accounted", f"{report.jobs} of {inserted} inserted",
                        "all, and all terminal", report.jobs == inserted and drained),
            _checker_verdict(report.codes(), timing=False),
            _checker_verdict(report.codes(), timing=True),
            fig.Verdict("observed worker", "alive" if alive else "exited", "alive to the end",
                        alive),
            fig.Verdict("nemesis", f"{sum(report.faults.values())} faults, "
                        f"{len(faults.errors)} error(s)", "no error", not faults.errors),
        ]  # fmt: skip
        verdicts = _verdicts(soak, samples, extra)
        ok = all(v.ok for v in verdicts)
        figures: dict[str, Any] = {
            "soak": {k: v for k, v in asdict(soak).items() if k not in ("log", "out")},
            "ok": ok,
            "jobs": fed,
            "seconds": round(elapsed, 1),
            "jobs_per_second": round(fed / max(elapsed, 1e-9), 1),
            "faults_by_kind": report.faults,
            "pruned": pruned,
            "nemesis_errors": faults.errors,
            "worker_exit_codes": codes,
            "verdicts": [v.to_json() for v in verdicts],
            "samples": [s.to_json() for s in samples],
            "checker": report.to_json(),
        }
        if soak.out is not None:
            (work / "report.json").write_text(json.dumps(figures, indent=2, default=str))
    return ok, figures


def main(argv: list[str] | None = None) -> int:
    """``python -m faults soak``: run a soak, print the table, write the JSON report."""
    parser = argparse.ArgumentParser(
        prog="python -m faults soak",
        description="Run many jobs through drover under periodic faults and check nothing grows.",
    )
    defaults = Soak()
    parser.add_argument("--jobs", type=int, default=defaults.jobs)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--fault-every", type=float, default=defaults.fault_every)
    parser.add_argument(
        "--kinds",
        default=",".join(SOAK_KINDS),
        help=f"comma-separated fault kinds, of {', '.join(FAULT_KINDS)}",
    )
    parser.add_argument("--max-backlog", type=int, default=defaults.max_backlog)
    parser.add_argument("--retention", type=float, default=defaults.retention)
    parser.add_argument("--lease", type=float, default=defaults.lease)
    parser.add_argument(
        "--autovacuum-naptime", type=float, help="seconds (default: the server's, 60)"
    )
    parser.add_argument("--report", type=Path, default=Path("soak-report.json"))
    parser.add_argument("--out", type=Path, help="keep the history here")
    options = parser.parse_args(argv)
    kinds = tuple(k for k in options.kinds.split(",") if k)
    unknown = sorted(set(kinds) - set(FAULT_KINDS))
    if unknown or not kinds:
        parser.error(f"unknown fault kind(s): {', '.join(unknown) or '(none given)'}")
    if options.jobs < 1000:
        parser.error(f"--jobs must be at least 1000, not {options.jobs}")
    for name in ("fault_every", "lease", "max_backlog"):
        if not getattr(options, name) > 0:
            parser.error(
                f"--{name.replace('_', '-')} must be positive, not {getattr(options, name)}"
            )
    for name in ("retention", "autovacuum_naptime"):
        value = getattr(options, name)
        if value is not None and not value >= 0:
            parser.error(f"--{name.replace('_', '-')} must not be negative, not {value}")
    soak = Soak(
        jobs=options.jobs,
        seed=options.seed,
        fault_every=options.fault_every,
        kinds=kinds,
        max_backlog=options.max_backlog,
        retention=options.retention,
        lease=options.lease,
        autovacuum_naptime=options.autovacuum_naptime,
        out=options.out,
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )
    ok, figures = run(soak)
    options.report.write_text(json.dumps(figures, indent=2, default=str))
    print(fig.table([fig.Verdict(**_row(v)) for v in figures["verdicts"]]))
    print(f"{figures['jobs']} jobs in {figures['seconds']} s; report: {options.report}")
    return 0 if ok else 1


def _row(v: dict[str, Any]) -> dict[str, Any]:
    return {k: v[k] for k in ("name", "measured", "bound", "ok")}
