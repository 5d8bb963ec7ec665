"""``drover workers``: the live clients that run jobs, from the registry they keep."""

from __future__ import annotations

from typing import Any

import typer

from drover.cli import output as out
from drover.cli.common import emit, get_globals, open_inspector
from drover.inspector import WorkerInfo

__all__ = ["workers_command", "workers_dict"]


def workers_dict(worker: WorkerInfo) -> dict[str, Any]:
    """A live client as stable snake_case keys."""
    return {
        "client_id": worker.client_id,
        "host": worker.host,
        "pid": worker.pid,
        "version": worker.version,
        "queues": list(worker.queues),
        "concurrency": worker.concurrency,
        "running": worker.running,
        "started_at": out.timestamp(worker.started_at),
        "heartbeat_at": out.timestamp(worker.heartbeat_at),
    }


def workers_command(ctx: typer.Context) -> None:
    """Live workers: one per started client, with host, pid, queues and jobs running now."""
    g = get_globals(ctx)
    with open_inspector(g) as inspector:
        workers = inspector.workers()
    human = out.table(
        ["CLIENT", "HOST", "PID", "VERSION", "QUEUES", "RUNNING", "CONCURRENCY", "HEARTBEAT"],
        [
            (
                w.client_id,
                w.host,
                w.pid,
                w.version,
                ",".join(w.queues),
                w.running,
                w.concurrency,
                f"{w.heartbeat_age_seconds:.1f}s ago",
            )
            for w in workers
        ],
    )
    if not workers:
        human = "no live workers"
    emit(g, human, {"workers": [workers_dict(w) for w in workers]})
