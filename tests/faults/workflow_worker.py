"""A worker process for the workflow tests in ``test_workflow_races.py``.

Run as ``python workflow_worker.py DSN [options]``. It starts a real
``drover.Client`` that works the one step kind below (``WfStep``), and
writes ``wf_ready`` once started. It runs until SIGTERM, then drains.

Every handler records its own execution in the side table ``wf_log``, on a
connection of this process's own pool, never through drover, each statement
committed before the handler goes on:

- first, a row with the database's ``clock_timestamp()`` as ``started_at``;
- then the dependencies' results it read (``job.parent_results()``; every
  step returns its own job id, so the list names the dependencies it found
  completed, and a null one it found not completed) as ``parents``;
- last, as it returns or raises, ``ended_at = clock_timestamp()``.

A SIGKILL leaves a started row without an end, never an end without its
start. A step returns before drover writes its completion (no
``complete_tx``), so a dependency's recorded end precedes the commit that
released its dependents. One clock (the server's) serves every process.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg_pool import ConnectionPool

import drover

WF_DDL = """
CREATE TABLE wf_log (
    id         bigserial   PRIMARY KEY,
    job_id     bigint      NOT NULL,
    attempt    integer     NOT NULL,
    pid        integer     NOT NULL,
    started_at timestamptz NOT NULL,
    parents    bigint[],
    ended_at   timestamptz
);
CREATE TABLE wf_ready (pid integer PRIMARY KEY, at timestamptz NOT NULL);
"""
"""The side tables the tests create before any worker starts."""


class WfStep(drover.JobArgs, kind="wf_race_step"):
    """One step of a chain or chord: works ``seconds``; ``poison`` always fails."""

    seconds: float = 0.0
    poison: bool = False


_START = (
    "INSERT INTO wf_log (job_id, attempt, pid, started_at) "
    "VALUES (%(id)s, %(attempt)s, %(pid)s, clock_timestamp()) RETURNING id"
)
_PARENTS = "UPDATE wf_log SET parents = %(parents)s WHERE id = %(row)s"
_END = "UPDATE wf_log SET ended_at = clock_timestamp() WHERE id = %(row)s"


class _RetrySoon:
    """A rescued or failed step is due again at once: the tests time releases, not back-off."""

    def next_retry(self, job: drover.JobRow) -> datetime:
        return datetime.now(UTC) - timedelta(seconds=1)


class Recorder:
    """The step handler: record start, read the parents' results, work, record end."""

    def __init__(self, pool: ConnectionPool[Any]) -> None:
        self._pool = pool
        self._pid = os.getpid()

    def _returning(self, statement: str, params: dict[str, Any]) -> int:
        with self._pool.connection() as conn:
            row = conn.execute(statement, params).fetchone()
        assert row is not None
        return int(row[0])

    def _write(self, statement: str, params: dict[str, Any]) -> None:
        with self._pool.connection() as conn:
            conn.execute(statement, params)

    def step(self, job: drover.Job[WfStep]) -> int:
        row = self._returning(_START, {"id": job.id, "attempt": job.attempt, "pid": self._pid})
        try:
            parents = [p if isinstance(p, int) else None for p in job.parent_results()]
            self._write(_PARENTS, {"parents": parents, "row": row})
            if job.args.poison:
                raise RuntimeError("this step always fails")
            if job.args.seconds > 0:
                job.context.wait(job.args.seconds)  # the work; cut short only by shutdown
        finally:
            self._write(_END, {"row": row})
        return job.id


def main(argv: list[str] | None = None) -> int:
    """Work steps until SIGTERM; exit 0 after a complete drain, 3 after an incomplete one."""
    parser = argparse.ArgumentParser(prog="workflow_worker.py")
    parser.add_argument("dsn")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--poll", type=float, default=0.1)
    parser.add_argument("--lease", type=float, default=1.5)
    parser.add_argument("--heartbeat", type=float, default=0.25)
    parser.add_argument("--rescue", type=float, default=0.25)
    options = parser.parse_args(argv)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda _signum, _frame: stop.set())
    pool: ConnectionPool[Any] = ConnectionPool(
        options.dsn,
        min_size=1,
        max_size=options.concurrency,
        kwargs={"autocommit": True, "application_name": "wf-recorder"},
        timeout=30,
        open=True,
    )
    workers = drover.Workers()
    workers.register(Recorder(pool).step)
    config = drover.Config(
        workers=workers,
        concurrency=options.concurrency,
        poll_interval=options.poll,
        lease_duration=options.lease,
        heartbeat_interval=options.heartbeat,
        rescue_interval=options.rescue,
        retry_policy=_RetrySoon(),
        shutdown_timeout=10,
    )
    client = drover.Client(options.dsn, config)
    code = 0
    try:
        client.start()
        with pool.connection() as conn:
            conn.execute(
                "INSERT INTO wf_ready (pid, at) VALUES (%s, clock_timestamp())", (os.getpid(),)
            )
        while not stop.wait(0.5):
            pass
        client.stop(config.shutdown_timeout)
    except drover.DrainIncomplete:
        code = 3
    finally:
        client.close()
        pool.close()
    return code


if __name__ == "__main__":
    sys.exit(main())
