"""The fault suite's worker process: a real drover client whose handlers record their own history.

Run by the orchestrator as ``python -m faults.suite.workload --dsn ... --history DIR``.
Every handler appends a ``start`` record to this process's history file
before it does anything and an ``end`` record as it returns or raises, and
records its side effect (an ``effect`` row in the ``fault_effects`` table)
only when it succeeds, independently of drover:

- mode ``plain``: the effect row is committed on a connection of the
  workload's own, then the handler returns and drover completes the job;
  a crash between the two is the classic at-least-once duplicate;
- mode ``tx``: the effect row and ``job.complete_tx`` share one transaction,
  so an effect exists only if the completion committed.

Workflow steps (``FaultStep``, see ``faults.suite.workflows``) also
read their dependencies' results as they begin (``job.parent_results()``;
every step returns its own job id as its result) and record what they read
in their ``start`` record, so the checker can see a step that began before
a dependency completed.

drover's own refusals of a stale claim's write (the ``outcome_discarded``
and ``complete_tx_refused`` log events) are appended as ``refused`` records.
One ``os.write`` per record to an ``O_APPEND`` file (the harness's
``HistoryFile``): a record written before a SIGKILL survives it.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

from psycopg_pool import ConnectionPool

import drover
from drover.faults.harness.jsonl import HistoryFile
from drover.faults.harness.worker import QuickRetry, run_client

__all__ = [
    "EFFECTS_DDL",
    "LIMITED_CONCURRENCY",
    "LIMITED_PARTS",
    "WORKLOADS",
    "FaultJob",
    "FaultLimited",
    "FaultStep",
    "main",
]

WORKLOADS = ("fast", "slow", "flaky", "snooze", "cancel", "poison", "limited", "step")

LIMITED_CONCURRENCY = 3
"""At most this many ``limited`` jobs run at once in the whole cluster (of 3 x 4 slots)."""

LIMITED_PARTS = 4
"""``limited`` jobs spread over this many values of ``part``, one running per value."""

EFFECTS_DDL = """
CREATE TABLE IF NOT EXISTS fault_effects (
    job_id bigint NOT NULL,
    attempt int NOT NULL,
    pid int NOT NULL,
    t_start double precision NOT NULL,
    t_end double precision NOT NULL,
    db_at double precision NOT NULL DEFAULT extract(epoch FROM clock_timestamp()),
    tx boolean NOT NULL
);
CREATE TABLE IF NOT EXISTS fault_marks (job_id bigint PRIMARY KEY);
"""


class FaultJob(drover.JobArgs, kind="fault_job"):
    """One job of the workload; ``workload`` says how its handler behaves."""

    workload: str
    seconds: float = 0.0
    """How long the handler works (``slow`` outlives the lease; the heartbeat keeps it)."""
    fail_times: int = 0
    """``flaky``: the first attempts that fail before one succeeds."""


class FaultLimited(
    drover.JobArgs,
    kind="fault_limited",
    limits=[
        drover.Limit(concurrency=LIMITED_CONCURRENCY),
        drover.Limit(concurrency=1, partition_by="part"),
    ],
):
    """A job of the ``limited`` workload: runs like a ``fast`` one, under two concurrency limits."""

    workload: str = "limited"
    part: int = 0
    seconds: float = 0.0


class FaultStep(drover.JobArgs, kind="fault_step"):
    """A step of a workflow (a chain's step, a chord's member or callback).

    ``workload`` is ``step`` (succeeds, after ``fail_times`` failed attempts)
    or ``poison`` (always fails: its dependents must be cancelled, never run).
    The handler's result is its own job id, so a dependent's
    ``parent_results()`` names the dependencies it found completed.
    """

    workload: str = "step"
    seconds: float = 0.0
    fail_times: int = 0


class _RefusalRecorder(logging.Handler):
    """Turns drover's refusal log events into ``refused`` history records."""

    _EVENTS: ClassVar[dict[str, str]] = {
        "outcome_discarded": "outcome",
        "complete_tx_refused": "complete_tx",
    }

    def __init__(self, history: HistoryFile) -> None:
        super().__init__(logging.DEBUG)
        self._history = history

    def emit(self, record: logging.LogRecord) -> None:
        event = getattr(record, "event", None)
        if event not in self._EVENTS:
            return
        reason = str(getattr(record, "reason", None) or self._EVENTS[str(event)])
        if "client stopped" in reason:
            return  # discarded at shutdown without a database write: not a fence refusal
        self._history.write(
            ev="refused",
            job=int(getattr(record, "job_id", 0)),
            attempt=int(getattr(record, "attempt", 0)),
            pid=os.getpid(),
            t=record.created,
            reason=reason,
        )


class FaultWorker(drover.Worker[FaultJob]):
    """Behaves as the job's ``workload`` says and records what it did."""

    def __init__(self, effects: ConnectionPool[Any], history: HistoryFile, mode: str) -> None:
        self._effects = effects
        self._history = history
        self._mode = mode
        self._pid = os.getpid()

    def work(self, job: drover.Job[FaultJob]) -> None:
        t_start = time.time()
        self._history.write(ev="start", job=job.id, attempt=job.attempt, pid=self._pid, t=t_start)
        try:
            self._behave(job, t_start)
        finally:
            # After the effect and any complete_tx, before drover writes the
            # outcome: the span the checker counts against a limit.
            self.ended(job)

    def ended(self, job: drover.Job[Any]) -> None:
        """Record that ``job``'s handler is done with this attempt."""
        self._history.write(ev="end", job=job.id, attempt=job.attempt, pid=self._pid, t=time.time())

    def limited(self, job: drover.Job[FaultLimited]) -> None:
        """The ``limited`` workload: a short run, then the effect, as a ``fast`` job."""
        t_start = time.time()
        self._history.write(ev="start", job=job.id, attempt=job.attempt, pid=self._pid, t=t_start)
        try:
            if job.context.wait(job.args.seconds):
                raise RuntimeError(f"interrupted: {job.context.reason}")
            self._record_effect(job, t_start)
        finally:
            self.ended(job)

    def step(self, job: drover.Job[FaultStep]) -> int:
        """A workflow step: read the dependencies' results, behave, record the effect."""
        t_start = time.time()
        read: list[int | None] | None = None
        try:
            # Before anything else, as a start record would be; the record is
            # written after the read so that it carries what was read.
            read = [r if isinstance(r, int) else None for r in job.parent_results()]
        finally:
            self._history.write(
                ev="start", job=job.id, attempt=job.attempt, pid=self._pid, t=t_start, deps=read
            )
        try:
            args = job.args
            if args.workload == "poison":
                raise RuntimeError("the workload always fails this step")
            if job.attempt <= args.fail_times:
                raise RuntimeError(f"the workload fails attempt {job.attempt} of this step")
            if args.seconds > 0 and job.context.wait(args.seconds):
                raise RuntimeError(f"interrupted: {job.context.reason}")
            self._record_effect(job, t_start, result=job.id)
            return job.id
        finally:
            self.ended(job)

    def _behave(self, job: drover.Job[FaultJob], t_start: float) -> None:
        args = job.args
        if args.workload == "cancel":
            raise drover.Cancel("the workload cancels this job")
        if args.workload == "poison":
            raise RuntimeError("the workload always fails this job")
        if args.workload == "flaky" and job.attempt <= args.fail_times:
            raise RuntimeError(f"the workload fails attempt {job.attempt} of this job")
        if args.workload == "snooze" and self._first_visit(job.id):
            raise drover.Snooze(0.2)
        if args.seconds > 0 and job.context.wait(args.seconds):
            # Shutdown or a lost lease interrupted the work: no effect happened.
            raise RuntimeError(f"interrupted: {job.context.reason}")
        self._record_effect(job, t_start)

    def _first_visit(self, job_id: int) -> bool:
        with self._effects.connection() as conn:
            marked = conn.execute(
                "INSERT INTO fault_marks (job_id) VALUES (%s) ON CONFLICT DO NOTHING "
                "RETURNING job_id",
                (job_id,),
            ).fetchone()
        return marked is not None

    def _record_effect(self, job: drover.Job[Any], t_start: float, result: object = None) -> None:
        insert = (
            "INSERT INTO fault_effects (job_id, attempt, pid, t_start, t_end, tx) "
            "VALUES (%s, %s, %s, %s, %s, %s)"
        )
        with self._effects.connection() as conn:
            if self._mode == "tx":
                with conn.transaction():
                    conn.execute(
                        insert, (job.id, job.attempt, self._pid, t_start, time.time(), True)
                    )
                    job.complete_tx(conn, result=result)
            else:
                conn.execute(insert, (job.id, job.attempt, self._pid, t_start, time.time(), False))


def _configure_logging(history: HistoryFile, log_path: Path) -> None:
    logger = logging.getLogger("drover")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(_RefusalRecorder(history))
    to_file = logging.FileHandler(log_path)
    to_file.setLevel(logging.WARNING)
    to_file.setFormatter(logging.Formatter("%(created).3f %(levelname)s %(message)s"))
    logger.addHandler(to_file)


def _pruner(keep: float | None, interval: float) -> drover.plugins.Pruner:
    """The pruner plugin of ``--retention`` (every state kept that long; default
    ``Retention()``) and ``--prune-interval``."""
    if keep is None:
        return drover.plugins.Pruner(interval=interval)
    retention = drover.Retention(completed=keep, cancelled=keep, dead=keep)
    return drover.plugins.Pruner(retention=retention, interval=interval)


def main(argv: list[str] | None = None) -> int:
    """Run one worker until SIGTERM; exit 0 after a complete drain, 3 after an incomplete one."""
    parser = argparse.ArgumentParser(prog="python -m faults.suite.workload")
    parser.add_argument("--dsn", required=True, help="where drover connects (may be a proxy)")
    parser.add_argument("--effects-dsn", help="where effects are written (default: --dsn)")
    parser.add_argument("--history", type=Path, required=True, help="the history directory")
    parser.add_argument("--mode", choices=("plain", "tx"), default="plain")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--heartbeat", type=float, default=0.5)
    parser.add_argument("--rescue", type=float, default=0.5)
    parser.add_argument("--poll", type=float, default=0.2)
    parser.add_argument("--shutdown-timeout", type=float, default=1.0)
    parser.add_argument(
        "--retention",
        type=float,
        help="seconds every finished job is kept (the soak: the table measures steady state); "
        "default: drover's Retention()",
    )
    parser.add_argument("--prune-interval", type=float, default=60.0)
    options = parser.parse_args(argv)

    pid = os.getpid()
    history = HistoryFile(options.history / f"worker-{pid}.jsonl")
    _configure_logging(history, options.history / f"worker-{pid}.log")
    effects_dsn = options.effects_dsn or options.dsn
    # In tx mode the effect shares the completion's transaction, so it must use
    # the connection drover completes through: the same route as --dsn.
    if options.mode == "tx":
        effects_dsn = options.dsn
    effects: ConnectionPool[Any] = ConnectionPool(
        effects_dsn,
        min_size=1,
        max_size=options.concurrency + 1,
        kwargs={"autocommit": True, "application_name": "fault-effects"},
        timeout=10,
        open=True,
    )
    workers = drover.Workers()
    worker = FaultWorker(effects, history, options.mode)
    workers.add(worker)
    workers.register(worker.limited)
    workers.register(worker.step)
    config = drover.Config(
        workers=workers,
        concurrency=options.concurrency,
        lease_duration=options.lease,
        heartbeat_interval=options.heartbeat,
        rescue_interval=options.rescue,
        poll_interval=options.poll,
        shutdown_timeout=options.shutdown_timeout,
        retry_policy=QuickRetry(),
        plugins=[_pruner(options.retention, options.prune_interval)],
    )
    history.write(ev="process", pid=pid, t=time.time(), what="started")
    code = 0
    try:
        run_client(options.dsn, config, history)
    except drover.DrainIncomplete:
        code = 3
    finally:
        history.write(ev="process", pid=pid, t=time.time(), what="stopped", code=code)
        effects.close(timeout=1)
        history.close()
    return code


if __name__ == "__main__":
    threading.current_thread().name = "fault-workload"
    sys.exit(main())
