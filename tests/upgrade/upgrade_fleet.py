"""Worker and producer processes for the upgrade test, runnable by today's drover or an older one.

Run as ``python upgrade_fleet.py work DSN RELEASE`` or
``python upgrade_fleet.py produce DSN --rate N``. Which drover runs is
whichever ``import drover`` finds: the test puts the previous release's
``src`` first on ``PYTHONPATH`` for the old processes. So this file uses only
the public API both releases have (``JobArgs``, ``Limit``, ``Workers``,
``Config``, ``Client.insert``), and must keep doing so as the previous
release moves on.

``work`` starts a ``drover.Client`` working two kinds, ``upgrade_plain`` and
``upgrade_capped`` (a cluster-wide concurrency limit, so the limited claim of
migrations 0008, 0012 and 0019 runs too), writes its pid to ``upgrade_ready`` once
started, and drains and exits 0 on SIGTERM (3 if the drain was incomplete).
Each execution inserts one ``upgrade_log`` row (job, attempt, pid, release,
the database's ``clock_timestamp()``) on a connection of its own before the
handler returns, so every execution drover ran is on record.

``produce`` inserts jobs one at a time, alternating the two kinds, at about
``--rate`` per second until SIGTERM, then prints how many it inserted.

Both log to stderr at WARNING: the test requires that stderr stays empty.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

import drover

SIDE_DDL = """
CREATE TABLE upgrade_log (
    job_id  bigint      NOT NULL,
    attempt integer     NOT NULL,
    pid     integer     NOT NULL,
    release text        NOT NULL,
    at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE upgrade_ready (pid integer PRIMARY KEY, release text NOT NULL);
"""
"""The side tables the test creates before any process starts."""

CAPPED = 3


class Plain(drover.JobArgs, kind="upgrade_plain"):
    """A job with no limit: the plain claim."""

    n: int


class Capped(drover.JobArgs, kind="upgrade_capped", limits=drover.Limit(concurrency=CAPPED)):
    """At most three running in the cluster: the limited claim (a plpgsql function)."""

    n: int


class Recorder:
    """The handlers: a little work, then one ``upgrade_log`` row per execution."""

    def __init__(self, pool: ConnectionPool[Any], release: str) -> None:
        self._pool = pool
        self._release = release
        self._pid = os.getpid()

    def _record(self, job: drover.Job[Any]) -> None:
        time.sleep(0.002)  # stands for the work: jobs are running when the migration starts
        with self._pool.connection() as conn:
            conn.execute(
                "INSERT INTO upgrade_log (job_id, attempt, pid, release) VALUES (%s, %s, %s, %s)",
                (job.id, job.attempt, self._pid, self._release),
            )

    def plain(self, job: drover.Job[Plain]) -> None:
        self._record(job)

    def capped(self, job: drover.Job[Capped]) -> None:
        self._record(job)


def _logging() -> None:
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )


def work(dsn: str, release: str, concurrency: int) -> int:
    """Work both kinds until SIGTERM; 0 after a complete drain, 3 after an incomplete one."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda _signum, _frame: stop.set())
    pool: ConnectionPool[Any] = ConnectionPool(
        dsn,
        min_size=1,
        max_size=concurrency,
        kwargs={"autocommit": True, "application_name": "upgrade-recorder"},
        timeout=30,
        open=True,
    )
    recorder = Recorder(pool, release)
    workers = drover.Workers()
    workers.register(recorder.plain)
    workers.register(recorder.capped)
    config = drover.Config(
        workers=workers,
        concurrency=concurrency,
        poll_interval=0.05,
        shutdown_timeout=20,
    )
    client = drover.Client(dsn, config)
    code = 0
    try:
        client.start()
        with pool.connection() as conn:
            conn.execute(
                "INSERT INTO upgrade_ready (pid, release) VALUES (%s, %s)", (os.getpid(), release)
            )
        while not stop.wait(0.2):
            pass
        client.stop(config.shutdown_timeout)
    except drover.DrainIncomplete:
        code = 3
    finally:
        client.close()
        pool.close()
    return code


def produce(dsn: str, rate: float) -> int:
    """Insert alternating jobs at about ``rate`` per second until SIGTERM; print the count."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda _signum, _frame: stop.set())
    client = drover.Client(dsn)
    inserted = 0
    try:
        while not stop.wait(1.0 / rate):
            args: drover.JobArgs = Plain(n=inserted) if inserted % 2 == 0 else Capped(n=inserted)
            client.insert(args)
            inserted += 1
    finally:
        client.close()
    print(inserted)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``work DSN RELEASE [--concurrency N]`` or ``produce DSN [--rate N]``."""
    parser = argparse.ArgumentParser(prog="upgrade_fleet.py")
    sub = parser.add_subparsers(dest="mode", required=True)
    w = sub.add_parser("work")
    w.add_argument("dsn")
    w.add_argument("release")
    w.add_argument("--concurrency", type=int, default=4)
    p = sub.add_parser("produce")
    p.add_argument("dsn")
    p.add_argument("--rate", type=float, default=200.0)
    options = parser.parse_args(argv)
    _logging()
    # A check that the process runs the drover the test meant (old or current).
    print(f"drover from {os.path.dirname(drover.__file__)}", file=sys.stdout, flush=True)
    if options.mode == "work":
        return work(options.dsn, options.release, options.concurrency)
    return produce(options.dsn, options.rate)


def create_side_tables(dsn: str) -> None:
    """The side tables, created by the test (today's psycopg) before any process starts."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SIDE_DDL.encode())


if __name__ == "__main__":
    sys.exit(main())
