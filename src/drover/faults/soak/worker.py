"""A soak worker process: the fault suite's workload, with a short retention that prunes as it runs.

Run by the soak as ``python -m drover.faults.soak.worker --dsn ... --history DIR
--retention 5 --prune-interval 1``. Its handlers are the fault suite's own
(``drover.faults.suite.workload``: a ``start`` and an ``end`` record per
attempt in this process's history file, an effect row per success); only the
client's configuration differs, so that finished jobs leave the jobs table
while the soak runs and the table measures steady state.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from psycopg_pool import ConnectionPool

import drover
from drover.faults.suite.workload import (
    FaultWorker,
    HistoryFile,
    _configure_logging,
    _QuickRetry,
    _run,
)

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run one worker until SIGTERM; exit 0 after a complete drain, 3 after an incomplete one."""
    parser = argparse.ArgumentParser(prog="python -m drover.faults.soak.worker")
    parser.add_argument("--dsn", required=True, help="where drover connects (may be a proxy)")
    parser.add_argument("--effects-dsn", required=True, help="where effects are written")
    parser.add_argument("--history", type=Path, required=True, help="the history directory")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--lease", type=float, default=4.0)
    parser.add_argument("--heartbeat", type=float, default=0.5)
    parser.add_argument("--rescue", type=float, default=0.5)
    parser.add_argument("--poll", type=float, default=0.2)
    parser.add_argument("--shutdown-timeout", type=float, default=1.0)
    parser.add_argument("--retention", type=float, default=5.0, help="seconds, every state")
    parser.add_argument("--prune-interval", type=float, default=1.0)
    options = parser.parse_args(argv)

    pid = os.getpid()
    history = HistoryFile(options.history / f"worker-{pid}.jsonl")
    _configure_logging(history, options.history / f"worker-{pid}.log")
    effects: ConnectionPool[Any] = ConnectionPool(
        options.effects_dsn,
        min_size=1,
        max_size=options.concurrency + 1,
        kwargs={"autocommit": True, "application_name": "fault-effects"},
        timeout=10,
        open=True,
    )
    workers = drover.Workers()
    workers.add(FaultWorker(effects, history, "plain"))
    keep = options.retention
    config = drover.Config(
        workers=workers,
        concurrency=options.concurrency,
        lease_duration=options.lease,
        heartbeat_interval=options.heartbeat,
        rescue_interval=options.rescue,
        poll_interval=options.poll,
        shutdown_timeout=options.shutdown_timeout,
        retry_policy=_QuickRetry(),
        retention=drover.Retention(completed=keep, cancelled=keep, dead=keep),
        prune_interval=options.prune_interval,
    )
    history.write(ev="process", pid=pid, t=time.time(), what="started")
    code = 0
    try:
        _run(options.dsn, config, history)
    except drover.DrainIncomplete:
        code = 3
    finally:
        history.write(ev="process", pid=pid, t=time.time(), what="stopped", code=code)
        effects.close(timeout=1)
        history.close()
    return code


if __name__ == "__main__":
    threading.current_thread().name = "soak-worker"
    sys.exit(main())
