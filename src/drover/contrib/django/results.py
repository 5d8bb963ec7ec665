"""A Django task's result, read from its drover job and the stored return value."""

from __future__ import annotations

import json
from typing import Any

from django.db import connections
from django.tasks import TaskResult, TaskResultStatus
from django.tasks.base import TaskError
from django.tasks.exceptions import TaskResultDoesNotExist
from django.utils.module_loading import import_string

from drover.contrib.django.settings import alias
from drover.contrib.django.task_args import TASK_KIND

__all__ = ["result_for"]

_STATUS = {
    "available": TaskResultStatus.READY,
    "scheduled": TaskResultStatus.READY,
    "retryable": TaskResultStatus.READY,
    "running": TaskResultStatus.RUNNING,
    "completed": TaskResultStatus.SUCCESSFUL,
    "cancelled": TaskResultStatus.FAILED,
    "dead": TaskResultStatus.FAILED,
}
_FINISHED = (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED)


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def result_for(job_id: int, *, status: str | None = None) -> TaskResult:
    """The ``TaskResult`` of the task stored as job ``job_id``.

    drover states map to Django's statuses: waiting → READY, running →
    RUNNING, completed → SUCCESSFUL, cancelled or dead → FAILED (a retryable
    job is READY again: it has attempts left). ``status`` overrides the mapped
    one while a worker is inside the attempt (for the signals it sends).
    """
    with connections[alias()].cursor() as cur:
        cur.execute(
            "SELECT j.state::text, j.kind, j.args, j.attempt, j.errors, j.created_at, "
            "j.finalized_at, j.leased_by, r.return_value, r.exception_paths, r.started_at, "
            "r.last_attempted_at "
            "FROM drover_jobs j LEFT JOIN drover_django_task_results r ON r.job_id = j.id "
            "WHERE j.id = %s",
            [job_id],
        )
        row = cur.fetchone()
    if row is None or row[1] != TASK_KIND:
        raise TaskResultDoesNotExist(str(job_id))
    state, _, args, attempt, errors, created, finalized, holder, value, paths, started, last = row
    args, errors, paths, value = _json(args), _json(errors), _json(paths) or [], _json(value)
    final = TaskResultStatus(status) if status else _STATUS[state]
    result = TaskResult(
        task=import_string(args["task"]),
        id=str(job_id),
        status=final,
        enqueued_at=created,
        started_at=started,
        finished_at=(finalized or last) if final in _FINISHED else None,
        last_attempted_at=last,
        args=list(args.get("args", [])),
        kwargs=dict(args.get("kwargs", {})),
        backend=args.get("backend", "default"),
        errors=[
            TaskError(
                exception_class_path=paths[i] if i < len(paths) else "builtins.Exception",
                traceback=str(entry.get("trace") or entry.get("error") or ""),
            )
            for i, entry in enumerate(errors)
        ],
        worker_ids=[holder or "drover"] * int(attempt),
    )
    object.__setattr__(result, "_return_value", value)
    return result
