"""The orchestrator: a cluster, a workload, worker processes, a nemesis, then the checker.

``python -m faults --jobs 5000 --faults 30 --seed 1`` runs one scenario
end to end and prints the figures; ``--out DIR`` keeps the history, the
server log and ``report.json`` for replay. Everything is seeded: the job mix,
which fault comes when and which worker it hits.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

import drover
from drover.faults.harness.checker import Report, check
from drover.faults.harness.cluster import Cluster
from drover.faults.harness.fleet import (
    FAULT_KINDS,
    Fleet,
    FleetSettings,
    Nemesis,
    Worker,
    chunks,
    feed,
    schedule,
    workdir,
)
from drover.faults.harness.history import Params, load_history
from drover.faults.harness.jsonl import HistoryFile
from drover.faults.harness.proxy import TcpProxy
from faults import worker_environment
from faults.suite import workflows
from faults.suite.workload import EFFECTS_DDL, LIMITED_PARTS, FaultJob, FaultLimited

__all__ = ["FAULT_KINDS", "Scenario", "main", "run"]

_MIX = (
    # workload, share of the jobs
    ("fast", 0.72),
    ("limited", 0.08),
    ("slow", 0.01),
    ("flaky", 0.08),
    ("snooze", 0.05),
    ("cancel", 0.03),
    ("poison", 0.03),
)


@dataclass
class Scenario(FleetSettings):
    """One run's knobs. The defaults are the fast tier's (small, a few minutes at most).

    The processes' and the faults' own (``workers``, ``lease``, ``kinds``,
    ...) are the harness's ``FleetSettings``; these are the suite's.
    """

    jobs: int = 5000
    mode: str = "plain"
    """``plain`` (handlers return; drover completes) or ``tx`` (``job.complete_tx``)."""
    drain_slack: float | None = None
    """Slack on each drain's budget (SIGTERM to exit); None: the checker's epsilon (1 s)."""
    workflows: int | None = None
    """Chains and chords inserted beside the jobs (``workflows.py``); None: one per 40 jobs."""
    quiesce_timeout: float = 240.0
    out: Path | None = None
    log: Callable[[str], None] = field(default=print, repr=False)


class _SuiteFleet(Fleet):
    """The harness's fleet running the suite's workload (``faults.suite.workload``)."""

    def __init__(self, scenario: Scenario, dsn: str, effects_dsn: str, history: Path) -> None:
        super().__init__(scenario, dsn, effects_dsn, history)
        self._scenario = scenario

    def spawn(self) -> Worker:
        s = self._scenario
        command = [
            sys.executable, "-m", "faults.suite.workload",
            "--dsn", self.dsn, "--effects-dsn", self.effects_dsn,
            "--history", str(self.history), "--mode", s.mode,
            "--concurrency", str(s.concurrency), "--lease", str(s.lease),
            "--heartbeat", str(s.heartbeat), "--rescue", str(s.rescue), "--poll", str(s.poll),
            "--shutdown-timeout", str(s.drain_budget),
        ]  # fmt: skip
        env = worker_environment(PYTHONFAULTHANDLER="1")
        proc = subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        worker = Worker(proc, time.time())
        self.workers.append(worker)
        return worker


def _workload(scenario: Scenario, rng: random.Random) -> list[drover.InsertItem]:
    """The scenario's jobs, drawn from the mix with the seeded generator."""
    items: list[drover.InsertItem] = []
    names = [w for w, _ in _MIX]
    weights = [share for _, share in _MIX]
    for _ in range(scenario.jobs):
        workload = rng.choices(names, weights)[0]
        if workload == "slow":
            item: drover.InsertItem = FaultJob(workload="slow", seconds=scenario.lease * 1.3)
        elif workload == "fast":
            item = FaultJob(workload="fast", seconds=rng.uniform(0.002, 0.02))
        elif workload == "flaky":
            fails = rng.randint(1, 2)
            item = (FaultJob(workload="flaky", fail_times=fails), drover.InsertOpts(max_attempts=8))
        elif workload == "poison":
            item = (FaultJob(workload="poison"), drover.InsertOpts(max_attempts=2))
        elif workload == "limited":
            item = FaultLimited(part=rng.randrange(LIMITED_PARTS), seconds=rng.uniform(0.01, 0.05))
        else:
            item = FaultJob(workload=workload)
        items.append(item)
    return items


def _unsettled(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT count(*) FROM drover_jobs WHERE state NOT IN ('completed', 'cancelled', 'dead')"
    ).fetchone()
    return int(row[0]) if row else 0


def _declare_limits(history: HistoryFile) -> None:
    """Record the concurrency limits the workload's code declares, for the checker.

    Taken from the args class, not from the database, so a limit the
    database lost or changed is still judged by what the code asked for.
    """
    for limit in FaultLimited.declared_limits:
        if limit.concurrency is not None:
            history.write(
                ev="limit",
                scope="kind",
                target=FaultLimited.kind,
                concurrency=limit.concurrency,
                partition_by=limit.partition_by,
            )


def _snapshot(dsn: str, history_dir: Path) -> None:
    """Write the database's truth (jobs and effects) next to the process histories."""
    out = HistoryFile(history_dir / "db.jsonl")
    with psycopg.connect(dsn) as conn:
        for row in conn.execute(
            "SELECT id, args->>'workload', state::text, attempt, max_attempts,"
            " extract(epoch FROM finalized_at)::float8, errors, kind, queue, args, workflow_id,"
            " ARRAY(SELECT e.depends_on FROM drover_job_deps e WHERE e.job_id = j.id ORDER BY 1),"
            " ledger FROM drover_jobs j ORDER BY id"
        ):
            out.write(
                ev="job", id=row[0], workload=row[1], state=row[2], attempt=row[3],
                max_attempts=row[4], finalized_at=row[5], errors=row[6], kind=row[7],
                queue=row[8], args=row[9], workflow_id=row[10], depends_on=row[11],
                ledger=row[12],
            )  # fmt: skip
        for row in conn.execute(
            "SELECT job_id, attempt, pid, t_start, t_end, db_at, tx FROM fault_effects"
        ):
            out.write(
                ev="effect", job=row[0], attempt=row[1], pid=row[2], t_start=row[3],
                t_end=row[4], db_at=row[5], tx=row[6],
            )  # fmt: skip
    out.close()


def run(scenario: Scenario) -> tuple[Report, dict[str, Any]]:
    """Run ``scenario`` end to end; return the checker's report and the run's figures."""
    say = scenario.log
    rng = random.Random(scenario.seed)  # noqa: S311 - a seeded schedule, not a secret
    with workdir(scenario.out) as work, Cluster(max_connections=100) as cluster:
        history_dir = work / "history"
        history_dir.mkdir(exist_ok=True)
        cluster.start()
        with psycopg.connect(cluster.url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE faults")
        dsn = cluster.url_for("faults")
        drover.migrate(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(EFFECTS_DDL.encode())
        # The jobs arrive in rounds, one before each fault, so every fault lands
        # on a working system rather than on one that already drained.
        rounds = chunks(_workload(scenario, rng), scenario.faults + 1)
        # Workflows draw from a generator of their own, so a seed's job mix and
        # fault schedule stay what they were before workflows joined the suite.
        count = scenario.workflows if scenario.workflows is not None else scenario.jobs // 40
        flows = workflows.build(random.Random(f"{scenario.seed}/workflows"), count)  # noqa: S311
        flow_rounds = chunks(flows, scenario.faults + 1)
        # Named apart from the workers' connections, so `terminate` never picks it.
        feeder = drover.Client(make_conninfo(dsn, application_name="fault-feeder"))
        orchestrator = HistoryFile(history_dir / "orchestrator.jsonl")
        _declare_limits(orchestrator)
        with (
            TcpProxy(("127.0.0.1", cluster.port)) as proxy,
            contextlib.closing(feeder),
            _SuiteFleet(scenario, proxy.via(dsn), dsn, history_dir) as fleet,
        ):
            feed(feeder, rounds[0])
            workflows.feed(feeder, dsn, flow_rounds[0])
            say(
                f"{scenario.jobs} jobs and {count} workflows in {len(rounds)} rounds; "
                f"{scenario.workers} workers"
            )
            nemesis = Nemesis(scenario, fleet, cluster, proxy, dsn, orchestrator, rng)
            began = time.time()
            for _ in range(scenario.workers):
                fleet.spawn()
            for n, kind in enumerate(schedule(scenario, rng)):
                feed(feeder, rounds[n + 1])
                workflows.feed(feeder, dsn, flow_rounds[n + 1])
                time.sleep(scenario.fault_every)
                nemesis.inject(kind)
                say(f"fault {n + 1}/{scenario.faults}: {kind}")
            faults_done = time.time()
            deadline = time.monotonic() + scenario.quiesce_timeout
            left = -1
            while time.monotonic() < deadline:
                with contextlib.suppress(psycopg.OperationalError), psycopg.connect(dsn) as conn:
                    left = _unsettled(conn)
                if left == 0:
                    break
                time.sleep(0.5)
            quiesced = time.time()
            codes = fleet.stop_all(timeout=scenario.drain_budget + 30)
        orchestrator.close()
        say(f"quiesced with {left} unsettled job(s); workers exited {codes}")
        _snapshot(dsn, history_dir)
        params = Params(
            lease=scenario.lease,
            rescue_interval=scenario.rescue,
            heartbeat=scenario.heartbeat,
            poll_interval=scenario.poll,
            mode=scenario.mode,
            drain_slack=scenario.drain_slack,
        )
        history = load_history(history_dir, params)
        report = check(history)
        server_log = cluster.log_text()
        figures = {
            "scenario": {k: v for k, v in asdict(scenario).items() if k not in ("log", "out")},
            "faults_by_kind": {k: v for k, v in nemesis.counts.items() if v},
            "seconds_under_faults": round(faults_done - began, 1),
            "seconds_to_quiesce": round(quiesced - faults_done, 1),
            "jobs_per_second": round(report.jobs / max(quiesced - began, 1e-9), 1),
            "worker_exit_codes": codes,
            "server_deadlocks": server_log.count("deadlock detected"),
            "server_panics": server_log.count("PANIC"),
            "report": report.to_json(),
        }
        (work / "report.json").write_text(json.dumps(figures, indent=2, default=str))
        if scenario.out is not None:
            shutil.copy(cluster.log, work / "server.log")
    return report, figures


def main(argv: list[str] | None = None) -> int:
    """``python -m faults``: run a scenario, print the figures, exit 1 on a violation."""
    parser = argparse.ArgumentParser(
        prog="python -m faults",
        description="Run drover under injected faults and check the history it leaves.",
    )
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--faults", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--mode", choices=("plain", "tx"), default="plain")
    parser.add_argument(
        "--kinds",
        default=",".join(FAULT_KINDS),
        help=f"comma-separated fault kinds (default: all of {', '.join(FAULT_KINDS)})",
    )
    parser.add_argument("--fault-every", type=float, default=1.0)
    parser.add_argument(
        "--workflows", type=int, default=None, help="chains and chords (default: jobs / 40)"
    )
    parser.add_argument("--out", type=Path, help="keep history, server log and report here")
    options = parser.parse_args(argv)
    kinds = tuple(k for k in options.kinds.split(",") if k)
    unknown = sorted(set(kinds) - set(FAULT_KINDS))
    if unknown or not kinds:
        parser.error(f"unknown fault kind(s): {', '.join(unknown) or '(none given)'}")
    scenario = Scenario(
        jobs=options.jobs,
        faults=options.faults,
        seed=options.seed,
        workers=options.workers,
        concurrency=options.concurrency,
        mode=options.mode,
        kinds=kinds,
        fault_every=options.fault_every,
        workflows=options.workflows,
        out=options.out,
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )
    report, figures = run(scenario)
    print(json.dumps(figures, indent=2, default=str))
    print(report.summary(), file=sys.stderr)
    return 0 if report.ok else 1
