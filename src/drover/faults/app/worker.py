"""The worker process of ``drover faults --app``: the user's registry, recorded by a middleware.

Run by the orchestrator as ``python -m drover.faults.app.worker --app SPEC
--history DIR`` with the URLs in its environment. It imports the user's module (the same
``--app`` spec ``drover worker`` takes), runs its ``drover.Workers`` in a
real client, and wraps every execution in a middleware that appends a
``start`` record before the handler runs and an ``end`` record after it
returns or raises: ``outcome`` is ``ok``, ``signal`` (a ``drover.Snooze`` or
``drover.Cancel``, raised or chained) or ``raised`` (anything else, with the
exception's type). The user's handlers are not touched: what they write,
they write where ``DROVER_FAULTS_DATABASE_URL`` (set by the orchestrator)
tells them.

One ``os.write`` per record to an ``O_APPEND`` file (``HistoryFile``): a
record written before a SIGKILL survives it; one written after never was.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from pathlib import Path

import typer

import drover
from drover.faults.harness.jsonl import HistoryFile
from drover.faults.harness.worker import QuickRetry, run_client

__all__ = ["DATABASE_URL_ENV", "DRIVER_URL_ENV", "main", "outcome_of", "recorder"]

DATABASE_URL_ENV = "DROVER_FAULTS_DATABASE_URL"
"""The environment variable that gives the user's code the throwaway database's URL."""

DRIVER_URL_ENV = "DROVER_FAULTS_WORKER_URL"
"""Where the worker's drover client connects (through the proxy), unless ``--dsn`` is given."""


def outcome_of(exc: BaseException | None) -> tuple[str, str | None]:
    """``("ok", None)``, ``("signal", name)`` for a drover job signal, else ``("raised", name)``.

    A signal counts when raised directly or anywhere in the exception's cause
    chain, as drover itself recognises it.
    """
    if exc is None:
        return "ok", None
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        if isinstance(link, drover.JobSignal):
            return "signal", type(link).__name__
        seen.add(id(link))
        link = link.__cause__
    return "raised", type(exc).__name__


def recorder(history: HistoryFile) -> drover.Middleware:
    """A middleware (with its async form) recording each execution's start and end in ``history``.

    It re-raises whatever the handler raised, so the attempt's verdict is the
    handler's own. Thread-safe: each record is one ``os.write``.
    """
    pid = os.getpid()

    def begin(row: drover.JobRow) -> float:
        t = time.time()
        history.write(ev="start", job=row.id, attempt=row.attempt, pid=pid, t=t, kind=row.kind)
        return t

    def finish(row: drover.JobRow, t_start: float, exc: BaseException | None) -> None:
        outcome, error = outcome_of(exc)
        history.write(
            ev="end", job=row.id, attempt=row.attempt, pid=pid, t=time.time(), t_start=t_start,
            kind=row.kind, outcome=outcome, error=error,
        )  # fmt: skip

    def middleware(next_handler: drover.Handler) -> drover.Handler:
        def handle(ctx: drover.JobContext, row: drover.JobRow) -> None:
            t_start = begin(row)
            try:
                next_handler(ctx, row)
            except BaseException as exc:
                finish(row, t_start, exc)
                raise
            finish(row, t_start, None)

        return handle

    def async_middleware(next_handler: drover.AsyncHandler) -> drover.AsyncHandler:
        async def handle(ctx: drover.JobContext, row: drover.JobRow) -> None:
            t_start = begin(row)
            try:
                await next_handler(ctx, row)
            except BaseException as exc:
                finish(row, t_start, exc)
                raise
            finish(row, t_start, None)

        return handle

    return drover.with_async_form(middleware, async_middleware)


def main(argv: list[str] | None = None) -> int:
    """Run the user's workers until SIGTERM; 0 after a complete drain, 3 after an incomplete one.

    2 when ``--app`` cannot be loaded (the message is on stderr).
    """
    parser = argparse.ArgumentParser(prog="python -m drover.faults.app.worker")
    parser.add_argument("--app", required=True, help="the user's Workers, as `drover worker`")
    parser.add_argument("--dsn", help=f"where drover connects (default: ${DRIVER_URL_ENV})")
    parser.add_argument("--history", type=Path, required=True, help="the history directory")
    parser.add_argument("--queues", required=True, help="comma-separated queues to work")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--heartbeat", type=float, default=0.5)
    parser.add_argument("--rescue", type=float, default=0.5)
    parser.add_argument("--poll", type=float, default=0.2)
    parser.add_argument("--shutdown-timeout", type=float, default=1.0)
    options = parser.parse_args(argv)
    dsn = options.dsn or os.environ.get(DRIVER_URL_ENV)
    if not dsn:
        parser.error(f"give --dsn or set {DRIVER_URL_ENV}")

    # The same loader (and messages) as `drover worker --app`; it exits 2 on a bad spec.
    from drover.cli.common import load_workers

    try:
        workers = load_workers(options.app)
    except typer.Exit as exc:
        return int(exc.exit_code)
    pid = os.getpid()
    history = HistoryFile(options.history / f"worker-{pid}.jsonl")
    logging.basicConfig(level=logging.WARNING, format="%(created).3f %(levelname)s %(message)s")
    config = drover.Config(
        workers=workers,
        queues=dict.fromkeys(options.queues.split(","), 1),
        concurrency=options.concurrency,
        lease_duration=options.lease,
        heartbeat_interval=options.heartbeat,
        rescue_interval=options.rescue,
        poll_interval=options.poll,
        shutdown_timeout=options.shutdown_timeout,
        retry_policy=QuickRetry(),
        middleware=[recorder(history)],
    )
    history.write(ev="process", pid=pid, t=time.time(), what="started")
    code = 0
    try:
        run_client(dsn, config, history)
    except drover.DrainIncomplete:
        code = 3
    finally:
        history.write(ev="process", pid=pid, t=time.time(), what="stopped", code=code)
        history.close()
    return code


if __name__ == "__main__":
    threading.current_thread().name = "fault-app-worker"
    sys.exit(main())
