"""The orchestrator of ``drover faults --app``: your workers, a throwaway database, faults.

It runs on the harness (``Cluster``, ``TcpProxy``, the ``Fleet`` and the
``Nemesis`` of ``drover.faults.harness.fleet``) and brings only what the
workers run (``drover.faults.app.worker``: the user's registry, recorded by a
middleware) and what is checked (``drover.faults.app.report``).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

import drover
from drover._durations import Duration, to_seconds
from drover.faults.app.report import AppReport, analyse, read_executions, read_faults
from drover.faults.app.sample import SampledJob, check_args_source, effect_checks, sample_args
from drover.faults.app.worker import DATABASE_URL_ENV, DRIVER_URL_ENV
from drover.faults.harness.cluster import Cluster
from drover.faults.harness.fleet import (
    FAULT_KINDS,
    SERVER_FAULTS,
    Fleet,
    FleetSettings,
    Nemesis,
    Worker,
    chunks,
    feed,
    schedule,
    workdir,
)
from drover.faults.harness.history import JobFinal, Params
from drover.faults.harness.jsonl import HistoryFile
from drover.faults.harness.proxy import TcpProxy, proxy_target

__all__ = ["SERVER_FAULTS", "AppRunFailed", "AppScenario", "run_app"]

_READY_TIMEOUT = 60.0


class AppRunFailed(drover.DroverError):
    """The run could not go on: a worker process could not start, or the database is not empty."""


@dataclass
class AppScenario:
    """One ``drover faults --app`` run's inputs.

    ``app`` is the spec the worker processes import (``module:attr``, as
    ``drover worker --app``) and ``workers`` what it names, loaded by the
    caller. Exactly one of ``args`` (a factory or mapping, see
    ``drover.faults.app.sample``) and ``sampled`` (args already read, e.g.
    by ``sample_from``) is given. ``effects`` is the effect check (or a
    mapping kind → check), ``setup`` a callable given the throwaway
    database's URL once, before any job runs (to create the tables the
    handlers write to). ``database_url`` replaces the embedded server with an
    empty database of the caller's (PostgreSQL restarts are then left out).
    """

    app: str
    workers: drover.Workers
    per_kind: int = 20
    args: object = None
    sampled: dict[str, list[drover.JobArgs]] | None = None
    effects: object = None
    setup: Callable[[str], object] | None = None
    database_url: str | None = None
    faults: int = 8
    kinds: tuple[str, ...] = FAULT_KINDS
    seed: int = 1
    processes: int = 2
    concurrency: int = 4
    lease: Duration = 2.0
    """The workers' lease (a ``timedelta`` or seconds); a SIGSTOP lasts two of them."""
    quiesce_timeout: Duration = 120.0
    """How long the final drain may take before unfinished jobs count as lost."""
    out: Path | None = None
    log: Callable[[str], None] = field(default=print, repr=False)


_SETTLE = 0.5
"""Seconds the workers must have been busy before a fault lands (``_AppFleet.await_busy``)."""


class _AppFleet(Fleet):
    """The harness's fleet running the user's workers; faults pick the busiest worker."""

    def __init__(
        self,
        settings: FleetSettings,
        app: str,
        dsn: str,
        effects_dsn: str,
        queues: list[str],
        history: Path,
    ) -> None:
        super().__init__(settings, dsn, effects_dsn, history)
        self._app = app
        self._queues = queues
        self._spawned = 0
        self._logs: dict[int, Path] = {}

    def spawn(self) -> Worker:
        s = self.settings
        self._spawned += 1
        log = self.history / f"process-{self._spawned}.log"
        command = [
            sys.executable, "-m", "drover.faults.app.worker", "--app", self._app,
            "--history", str(self.history),
            "--queues", ",".join(self._queues), "--concurrency", str(s.concurrency),
            "--lease", str(s.lease), "--heartbeat", str(s.heartbeat), "--rescue", str(s.rescue),
            "--poll", str(s.poll), "--shutdown-timeout", str(s.drain_budget),
        ]  # fmt: skip
        # The user's code reaches the throwaway database directly, not through
        # the proxy: the network faults are drover's to ride out.
        # URLs in the environment, not the command line: a --database-url may carry a
        # password, and a process's arguments are visible to every local user.
        env = {
            **os.environ,
            DATABASE_URL_ENV: self.effects_dsn,
            DRIVER_URL_ENV: self.dsn,
            "PYTHONFAULTHANDLER": "1",
        }
        with log.open("ab") as out:
            proc = subprocess.Popen(
                command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=os.getcwd()
            )
        worker = Worker(proc, time.time())
        self._logs[proc.pid] = log
        self.workers.append(worker)
        return worker

    def pick(self, rng: random.Random) -> Worker:
        """The worker with the most executions in flight (the seeded draw breaks ties)."""
        load = {w.proc.pid: _in_flight(self.history, w.proc.pid) for w in self.workers}
        most = max(load.values())
        return rng.choice([w for w in self.workers if load[w.proc.pid] == most])

    def await_busy(self, timeout: float, settle: float = _SETTLE) -> None:
        """Until the workers have been busy for ``settle`` seconds and are now, or ``timeout``.

        Returning at the first start record would let a fault land before
        the handler has done anything (its first lines are often its
        effect), and a run of such faults says nothing about idempotency. So
        the wait goes on until executions have been seen in flight for
        ``settle`` seconds and one is in flight still: a long handler is
        then past its first lines, a short one has run many times.
        """
        deadline = time.monotonic() + timeout
        busy_since: float | None = None
        while time.monotonic() < deadline:
            if any(_in_flight(self.history, w.proc.pid) > 0 for w in self.workers):
                now = time.monotonic()
                if busy_since is None:
                    busy_since = now
                if now - busy_since >= settle:
                    return
            time.sleep(0.02)

    def await_ready(self, timeout: float) -> None:
        """Wait until every worker has loaded the app; raise ``AppRunFailed`` if one exits first."""
        deadline = time.monotonic() + timeout
        for w in self.workers:
            path = self.history / f"worker-{w.proc.pid}.jsonl"
            while not path.exists():
                if w.proc.poll() is not None:
                    tail = self._logs[w.proc.pid].read_text(errors="replace")[-1500:]
                    raise AppRunFailed(
                        f"a worker process exited ({w.proc.returncode}) before it started: {tail}"
                    )
                if time.monotonic() > deadline:
                    raise AppRunFailed(f"a worker process had not started after {timeout:g} s")
                time.sleep(0.05)


def _in_flight(history: Path, pid: int) -> int:
    """Executions ``pid`` started and has not ended (from its history file)."""
    path = history / f"worker-{pid}.jsonl"
    if not path.exists():
        return 0
    open_ = 0
    for line in path.read_text(errors="replace").splitlines():
        if '"ev":"start"' in line:
            open_ += 1
        elif '"ev":"end"' in line:
            open_ -= 1
    return open_


@contextlib.contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


@contextlib.contextmanager
def _database(scenario: AppScenario) -> Iterator[tuple[str, Cluster | None]]:
    """The throwaway database's URL, and the cluster when it is the run's own."""
    if scenario.database_url is not None:
        yield scenario.database_url, None
        return
    with Cluster(max_connections=100) as cluster:
        cluster.start()
        with psycopg.connect(cluster.url, autocommit=True) as conn:
            conn.execute("CREATE DATABASE drover_faults_app")
        yield cluster.url_for("drover_faults_app"), cluster


def _count(dsn: str, sql: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(sql.encode()).fetchone()
    return int(row[0]) if row else 0


def _final_jobs(dsn: str, kinds: list[str]) -> list[JobFinal]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT id, kind, state::text, attempt, max_attempts,"
            " extract(epoch FROM finalized_at)::float8, errors, queue, args"
            " FROM drover_jobs WHERE kind = ANY(%s) ORDER BY id",
            (kinds,),
        ).fetchall()
    return [
        JobFinal(
            id=r[0],
            workload=f"app:{r[1]}",
            state=r[2],
            attempt=r[3],
            max_attempts=r[4],
            finalized_at=r[5],
            errors=list(r[6] or []),
            kind=r[1],
            queue=r[7],
            args=r[8],
        )
        for r in rows
    ]


def _effect_counts(
    jobs: list[JobFinal], workers: drover.Workers, checks: dict[str, Any]
) -> dict[str, dict[int, int] | str]:
    """Each checked kind's count per job, or the error its check raised (then the kind stops)."""
    out: dict[str, dict[int, int] | str] = {}
    for job in jobs:
        check = checks.get(job.kind)
        if check is None or isinstance(out.get(job.kind), str):
            continue
        counts = out.setdefault(job.kind, {})
        assert isinstance(counts, dict)
        entry = workers.get(job.kind)
        assert entry is not None
        try:
            seen = SampledJob(
                id=job.id, kind=job.kind, args=entry[0].model_validate(job.args),
                state=job.state, attempt=job.attempt,
            )  # fmt: skip
            n = check(seen)
        except Exception as exc:  # the user's own check: report it, do not crash the report
            out[job.kind] = f"{type(exc).__name__}: {exc}"
            continue
        if isinstance(n, bool) or not isinstance(n, int):
            out[job.kind] = f"returned {n!r} for job {job.id}; an effect check returns an int"
            continue
        counts[job.id] = n
    return out


def _call_user(
    scenario: AppScenario, dsn: str, rng: random.Random
) -> dict[str, list[drover.JobArgs]]:
    """Run the user's setup, then their args factory (unless the args were sampled already)."""
    what = "--setup"
    try:
        if scenario.setup is not None:
            scenario.setup(dsn)
        if scenario.sampled is not None:
            return scenario.sampled
        what = "--args"
        return sample_args(scenario.args, scenario.workers, scenario.per_kind, rng)
    except drover.InvalidArgument:
        raise
    except Exception as exc:  # the user's own code: say whose, in one line
        raise AppRunFailed(f"{what} raised {type(exc).__name__}: {exc}") from exc


def run_app(scenario: AppScenario) -> AppReport:
    """Run ``scenario`` end to end (a minute or two by default) and return its report.

    Blocking; not thread-safe (it sets ``DROVER_FAULTS_DATABASE_URL`` in this
    process's environment for the run, restoring it after). Every worker
    process it starts is stopped (SIGTERM, then SIGKILL) when it returns or
    raises. Raises ``drover.InvalidArgument`` for bad inputs (before any
    server starts where it can), ``AppRunFailed`` when a worker cannot start
    or ``database_url`` already holds jobs, and ``drover.DatabaseError``
    when the database is unreachable.
    """
    checks = effect_checks(scenario.effects, scenario.workers) if scenario.effects else {}
    if scenario.args is not None:
        check_args_source(scenario.args, scenario.workers)
    if (scenario.args is None) == (scenario.sampled is None):
        raise drover.InvalidArgument("give exactly one source of args: --args or --sample-from")
    kinds = tuple(
        k for k in scenario.kinds if scenario.database_url is None or k not in SERVER_FAULTS
    )
    unknown = sorted(set(kinds) - set(FAULT_KINDS))
    if unknown or not kinds:
        raise drover.InvalidArgument(
            f"unknown fault kind(s): {', '.join(unknown) or '(none left)'}; "
            f"the kinds are {', '.join(FAULT_KINDS)}"
        )
    rng = random.Random(scenario.seed)  # noqa: S311 - a seeded schedule, not a secret
    lease = to_seconds(scenario.lease, "AppScenario.lease")
    if not 0.1 <= lease <= 60:
        raise drover.InvalidArgument(f"the lease must be from 0.1 to 60 seconds, not {lease:g}")
    settings = FleetSettings(
        faults=scenario.faults, seed=scenario.seed, workers=scenario.processes,
        concurrency=scenario.concurrency, kinds=kinds, lease=lease,
    )  # fmt: skip
    with workdir(scenario.out) as work, _database(scenario) as (dsn, cluster):
        history_dir = work / "history"
        history_dir.mkdir(exist_ok=True)
        drover.migrate(dsn)
        present = _count(dsn, "SELECT count(*) FROM drover_jobs")
        if present:
            raise AppRunFailed(
                f"the database holds {present} job(s): drover faults needs an empty, throwaway "
                "database (its faults re-run jobs)"
            )
        with _environment(DATABASE_URL_ENV, dsn):
            sampled = _call_user(scenario, dsn, rng)
            if not sampled:
                raise drover.InvalidArgument("no kind was sampled: the args source gave no args")
            items: list[drover.InsertItem] = [a for args in sampled.values() for a in args]
            rng.shuffle(items)
            began = time.time()
            faults_done, codes = _exercise(
                scenario, settings, dsn, cluster, items, history_dir, rng
            )
            jobs = _final_jobs(dsn, sorted(sampled))
            counts = _effect_counts(jobs, scenario.workers, checks)
        params = Params(
            lease=settings.lease, rescue_interval=settings.rescue, heartbeat=settings.heartbeat,
            poll_interval=settings.poll,
        )  # fmt: skip
        executions = read_executions(history_dir)
        report = AppReport(
            kinds=analyse(jobs, executions, read_faults(history_dir), params, counts),
            faults=faults_done,
            not_sampled=[k for k in scenario.workers.kinds() if k not in sampled],
            figures={
                "seconds": round(time.time() - began, 1),
                "seed": scenario.seed,
                "processes": scenario.processes,
                "concurrency": scenario.concurrency,
                "lease": settings.lease,
                "per_kind": scenario.per_kind,
                "worker_exit_codes": codes,
            },
        )
        (work / "report.json").write_text(json.dumps(report.to_json(), indent=2, default=str))
    return report


def _exercise(
    scenario: AppScenario,
    settings: FleetSettings,
    dsn: str,
    cluster: Cluster | None,
    items: list[drover.InsertItem],
    history_dir: Path,
    rng: random.Random,
) -> tuple[dict[str, int], list[int | None]]:
    """Feed ``items`` in rounds, a fault after each, then drain; the faults done and exit codes.

    Each fault waits (a few seconds at most) until a job runs, and a
    process fault picks the worker with the most in flight, so the faults
    land on the user's handlers rather than on idle processes.
    """
    say = scenario.log
    queues = sorted({getattr(type(a), "default_queue", None) or "default" for a in items})
    rounds = chunks(items, settings.faults + 1)
    # TCP or a Unix socket upstream; the workers always reach the proxy over loopback TCP.
    upstream = proxy_target(dsn)
    orchestrator = HistoryFile(history_dir / "orchestrator.jsonl")
    # Named apart from the workers' connections, so `terminate` never picks it.
    feeder = drover.Client(make_conninfo(dsn, application_name="fault-feeder"))
    with TcpProxy(upstream) as proxy, contextlib.closing(feeder), contextlib.closing(orchestrator):
        fleet = _AppFleet(settings, scenario.app, proxy.via(dsn), dsn, queues, history_dir)
        with fleet:
            for _ in range(settings.workers):
                fleet.spawn()
            fleet.await_ready(_READY_TIMEOUT)
            say(f"{len(items)} jobs in {len(rounds)} rounds; {settings.workers} worker processes")
            # Without a cluster of the run's own no server fault is scheduled (run_app).
            nemesis = Nemesis(settings, fleet, cluster, proxy, dsn, orchestrator, rng)
            feed(feeder, rounds[0])
            for n, kind in enumerate(schedule(settings, rng)):
                feed(feeder, rounds[n + 1])
                fleet.await_busy(settings.fault_every + 2)
                nemesis.inject(kind)
                say(f"fault {n + 1}/{settings.faults}: {kind}")
            left = _quiesce(
                dsn, to_seconds(scenario.quiesce_timeout, "AppScenario.quiesce_timeout")
            )
            codes = fleet.stop_all(timeout=settings.drain_budget + 30)
    say(f"quiesced with {left} unsettled job(s); workers exited {codes}")
    return {k: v for k, v in nemesis.counts.items() if v}, codes


def _quiesce(dsn: str, timeout: float) -> int:
    """Wait until every job is terminal or ``timeout``; the jobs still unsettled (-1: unknown)."""
    deadline = time.monotonic() + timeout
    left = -1
    while time.monotonic() < deadline:
        with contextlib.suppress(psycopg.OperationalError):
            left = _count(
                dsn,
                "SELECT count(*) FROM drover_jobs"
                " WHERE state NOT IN ('completed', 'cancelled', 'dead')",
            )
        if left == 0:
            break
        time.sleep(0.2)
    return left
