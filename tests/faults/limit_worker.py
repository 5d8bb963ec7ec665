"""A worker process for the limits' race tests in ``test_limit_races.py``.

Run as ``python limit_worker.py DSN KIND [options]``. It starts a real
``drover.Client`` that works the one limited kind named (``capped``,
``paced`` or ``keyed``, the args classes below, imported by the tests), and
writes ``race_ready`` once started. It runs until SIGTERM, then drains.

Every handler records its own execution in the side table ``race_log``, on a
connection of this process's own pool, never through drover:

- first, one row with the database's ``clock_timestamp()`` as ``started_at``
  and the claim's time (the row's ``attempted_at`` for this attempt, the
  instant a rate limit counts) as ``claimed_at``;
- last, before returning, ``ended_at = clock_timestamp()``.

Both statements commit before the handler goes on, so a SIGKILL leaves a
started row without an end, never an end without its start. The handler
runs only after its claim committed and returns before its outcome is
written, so a recorded interval lies inside the span the database counted
the job as running: more than N overlapping recorded intervals means the
limit admitted more than N. One clock (the server's) serves every process.

With ``--hold`` every handler blocks after recording its start until the
process is killed (the SIGKILL test).
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

RACE_DDL = """
CREATE TABLE race_log (
    job_id     bigint      NOT NULL,
    attempt    integer     NOT NULL,
    pid        integer     NOT NULL,
    part       text        NOT NULL,
    claimed_at timestamptz,
    counted_at timestamptz,
    entered_at timestamptz,
    started_at timestamptz NOT NULL,
    ended_at   timestamptz,
    PRIMARY KEY (job_id, attempt)
);
CREATE TABLE race_ready (pid integer PRIMARY KEY, at timestamptz NOT NULL);
"""
"""The side tables the tests create before any worker starts."""

CAPPED_LIMIT = 3
PACED_RATE = 20
STARTED_RATE = 20


class Capped(drover.JobArgs, kind="race_capped", limits=drover.Limit(concurrency=CAPPED_LIMIT)):
    """At most three running in the whole cluster."""

    n: int
    seconds: float = 0.0


class Paced(drover.JobArgs, kind="race_paced", limits=drover.Limit(rate=PACED_RATE, per="second")):
    """At most twenty starts in any second of the database clock."""

    n: int


class Keyed(
    drover.JobArgs, kind="race_keyed", limits=drover.Limit(concurrency=1, partition_by="key")
):
    """At most one running per value of ``key``."""

    key: int
    seconds: float = 0.0


class Started(
    drover.JobArgs,
    kind="race_started",
    limits=drover.Limit(rate=STARTED_RATE, per="second", counts="starts"),
):
    """At most twenty handler starts in any second of the database clock."""

    n: int


KINDS: dict[str, type[drover.JobArgs]] = {
    "capped": Capped,
    "paced": Paced,
    "keyed": Keyed,
    "started": Started,
}

_START = (
    "INSERT INTO race_log "
    "(job_id, attempt, pid, part, claimed_at, counted_at, entered_at, started_at) "
    "SELECT %(id)s, %(attempt)s, %(pid)s, %(part)s, "
    "(SELECT j.attempted_at FROM drover_jobs j WHERE j.id = %(id)s AND j.attempt = %(attempt)s), "
    "%(counted)s, %(entered)s, clock_timestamp()"
)
_END = (
    "UPDATE race_log SET ended_at = clock_timestamp() "
    "WHERE job_id = %(id)s AND attempt = %(attempt)s"
)


class _RetrySoon:
    """A rescued job is due again at once: the tests time the slots, not the back-off."""

    def next_retry(self, job: drover.JobRow) -> datetime:
        return datetime.now(UTC) - timedelta(seconds=1)


class Recorder:
    """The handlers: record start, work (or hold), record end."""

    def __init__(self, pool: ConnectionPool[Any], hold: bool) -> None:
        self._pool = pool
        self._hold = hold
        self._pid = os.getpid()

    def _write(
        self, statement: str, job: drover.Job[Any], part: str, entered: datetime | None = None
    ) -> None:
        params = {
            "id": job.id,
            "attempt": job.attempt,
            "pid": self._pid,
            "part": part,
            # The start a rate that counts starts took for this handler (drover's time).
            "counted": job.context.values.get("drover.started_at"),
            "entered": entered,
        }
        with self._pool.connection() as conn:
            conn.execute(statement, params)

    def _run(self, job: drover.Job[Any], part: str, seconds: float) -> None:
        # The host's clock as the handler is entered, before the recorder finds
        # a connection: on the test's one machine, the same clock as the
        # server's, without the recorder's own delay (shown by the rate tests).
        entered = datetime.now(UTC)
        self._write(_START, job, part, entered)
        if self._hold:
            threading.Event().wait()  # until the test kills this process
        if seconds > 0:
            job.context.wait(seconds)  # the work; cut short only by shutdown
        self._write(_END, job, part)

    def capped(self, job: drover.Job[Capped]) -> None:
        self._run(job, "", job.args.seconds)

    def paced(self, job: drover.Job[Paced]) -> None:
        self._run(job, "", 0.0)

    def keyed(self, job: drover.Job[Keyed]) -> None:
        self._run(job, str(job.args.key), job.args.seconds)

    def started(self, job: drover.Job[Started]) -> None:
        self._run(job, "", 0.0)

    def workers(self, kind: str) -> drover.Workers:
        registry = drover.Workers()
        if kind == "capped":
            registry.register(self.capped)
        elif kind == "paced":
            registry.register(self.paced)
        elif kind == "started":
            registry.register(self.started)
        else:
            registry.register(self.keyed)
        return registry


def main(argv: list[str] | None = None) -> int:
    """Work one kind until SIGTERM; exit 0 after a complete drain, 3 after an incomplete one."""
    parser = argparse.ArgumentParser(prog="limit_worker.py")
    parser.add_argument("dsn")
    parser.add_argument("kind", choices=sorted(KINDS))
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--poll", type=float, default=0.05)
    parser.add_argument("--lease", type=float, default=30.0)
    parser.add_argument("--heartbeat", type=float, default=None)
    parser.add_argument("--rescue", type=float, default=None)
    parser.add_argument("--hold", action="store_true")
    options = parser.parse_args(argv)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda _signum, _frame: stop.set())
    # One side connection per handler thread at most; opened only when needed.
    pool: ConnectionPool[Any] = ConnectionPool(
        options.dsn,
        min_size=1,
        max_size=options.concurrency,
        kwargs={"autocommit": True, "application_name": "race-recorder"},
        timeout=30,
        open=True,
    )
    config = drover.Config(
        workers=Recorder(pool, options.hold).workers(options.kind),
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
                "INSERT INTO race_ready (pid, at) VALUES (%s, clock_timestamp())", (os.getpid(),)
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
