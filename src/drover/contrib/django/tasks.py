"""A Django Tasks backend (``django.tasks``, Django 6.0+) that stores tasks as drover jobs.

::

    TASKS = {
        "default": {
            "BACKEND": "drover.contrib.django.DroverTaskBackend",
            "QUEUES": ["default", "mail"],        # empty or missing: any queue
            "OPTIONS": {"max_attempts": 5},        # drover attempts per task
        }
    }

``@task def f(...)`` then ``f.enqueue(...)`` inserts a drover job of kind
``django_task`` on the Django database, **in the caller's transaction** (it
exists only if the surrounding ``atomic()`` commits), and ``manage.py drover
worker`` runs it. What drover honours: ``queue_name`` (the drover queue),
``run_after`` (the job's due time), ``takes_context`` (the context carries the
result and its attempt count), async task functions, and ``get_result`` (from
the job row and the stored return value). What it cannot: a ``priority`` other
than the default, refused by Django's own ``InvalidTask`` (drover orders by
due time, not priority).
"""

from __future__ import annotations

import json
from typing import Any

from django.db import connections
from django.tasks import TaskResult, TaskResultStatus
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import TaskError
from django.tasks.exceptions import TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

import drover
from drover.contrib.django import insert
from drover.contrib.django.runner import DjangoTaskArgs
from drover.contrib.django.settings import alias

__all__ = ["DroverTaskBackend", "result_for"]

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


class DroverTaskBackend(BaseTaskBackend):
    """Django tasks as drover jobs: transactional enqueue, retries, leases, results."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = False

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> TaskResult:
        """Insert the call as a drover job in the current transaction; return its READY result."""
        self.validate_task(task)
        row = insert(
            DjangoTaskArgs(
                task=task.module_path,
                args=normalize_json(list(args)),
                kwargs=normalize_json(dict(kwargs)),
                backend=self.alias,
            ),
            drover.InsertOpts(
                queue=task.queue_name,
                scheduled_at=task.run_after,
                max_attempts=self.options.get("max_attempts"),
            ),
        )
        result = result_for(row.id)
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: Any) -> TaskResult:
        """The task's result as the database has it now (``TaskResultDoesNotExist`` if none)."""
        text = str(result_id)
        if not (text.isascii() and text.isdigit()):
            raise TaskResultDoesNotExist(text)
        return result_for(int(text))


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def result_for(job_id: int, *, status: str | None = None) -> TaskResult:
    """The :class:`TaskResult` of the task stored as job ``job_id``.

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
    if row is None or row[1] != DjangoTaskArgs.kind:
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
