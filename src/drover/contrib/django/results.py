"""A Django task's result, read from its drover job and the task-results row the worker writes."""

from __future__ import annotations

import dataclasses
import json
from collections import deque
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db import connections
from django.tasks import Task, TaskResult, TaskResultStatus
from django.tasks.base import TaskError
from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
from django.utils.module_loading import import_string

from drover.contrib.django.settings import alias, jobs_table
from drover.contrib.django.task_args import TASK_KIND, TASK_META

__all__ = ["result_for", "stored_task"]

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
_UNKNOWN_CLASS = "builtins.Exception"
"""The class path of a failure the task did not raise (drover's own: a hand-back, a lease
that expired with its worker), whose exception class nobody recorded."""


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def stored_task(
    path: str, *, backend: str, queue_name: str, priority: int, run_after: datetime | None
) -> Task:
    """The task as it was enqueued: the module-level task at ``path`` with what
    ``.using()`` set (its priority, queue, run_after and backend alias).

    Built with ``.using()``, so Django validates it against the backend as at the
    enqueue. Should ``TASKS`` have changed since (the queue or the alias is gone),
    the task is still reported with what it was enqueued with, unvalidated: a stored
    result stays readable.
    """
    base = import_string(path)
    try:
        return base.using(
            priority=priority, queue_name=queue_name, run_after=run_after, backend=backend
        )
    except (InvalidTask, InvalidTaskBackend):
        task = object.__new__(type(base))
        for field in dataclasses.fields(base):
            object.__setattr__(task, field.name, getattr(base, field.name))
        changes = {"priority": priority, "queue_name": queue_name, "backend": backend}
        if run_after is not None:
            changes["run_after"] = run_after
        for name, value in changes.items():
            object.__setattr__(task, name, value)
        return task


def _run_after(meta: Any) -> datetime | None:
    stored = (meta or {}).get(TASK_META) if isinstance(meta, Mapping) else None
    value = stored.get("run_after") if isinstance(stored, Mapping) else None
    return datetime.fromisoformat(value) if isinstance(value, str) else None


def _errors(
    failures: Sequence[Mapping[str, Any]],
    raised: Sequence[Mapping[str, Any]],
    legacy_paths: Sequence[str],
) -> list[TaskError]:
    """One ``TaskError`` per failed attempt the job records (``failures``, oldest first).

    An attempt in which the task raised gets what the worker stored when it raised
    (``raised``): the class path and the traceback exactly. They are matched by attempt
    number, in order (an operator's retry starts the numbers again). A failure the task
    did not raise (a hand-back at shutdown, a lease that expired with its worker) keeps
    drover's message. Rows written by an older drover have only ``legacy_paths``, matched
    by position as they were.
    """
    by_attempt: dict[Any, deque[Mapping[str, Any]]] = {}
    for entry in raised:
        by_attempt.setdefault(entry.get("attempt"), deque()).append(entry)
    errors = []
    for index, failure in enumerate(failures):
        waiting = by_attempt.get(failure.get("attempt"))
        if waiting:
            entry = waiting.popleft()
            errors.append(
                TaskError(
                    exception_class_path=str(entry["exception_class_path"]),
                    traceback=str(entry["traceback"]),
                )
            )
            continue
        path = legacy_paths[index] if not raised and index < len(legacy_paths) else None
        errors.append(
            TaskError(
                exception_class_path=path or _UNKNOWN_CLASS,
                traceback=str(failure.get("trace") or failure.get("error") or ""),
            )
        )
    return errors


def result_for(job_id: int, *, status: str | None = None) -> TaskResult:
    """The ``TaskResult`` of the task stored as job ``job_id``.

    drover states map to Django's statuses: waiting → READY, running →
    RUNNING, completed → SUCCESSFUL, cancelled or dead → FAILED (a retryable
    job is READY again: it has attempts left). ``status`` overrides the mapped
    one while a worker is inside the attempt (for the signals it sends).
    ``result.task`` is the task as enqueued (``stored_task``): its queue and
    priority are the job's, its ``run_after`` and backend alias were stored with it.
    """
    with connections[alias()].cursor() as cur:
        cur.execute(
            "SELECT j.state::text, j.kind, j.queue, j.priority, j.args, j.meta, j.attempt, "
            "j.errors, j.created_at, j.finalized_at, j.leased_by, r.job_id, r.return_value, "
            "r.exception_paths, r.errors, r.worker_ids, r.started_at, r.last_attempted_at "
            f"FROM {jobs_table()} j "
            "LEFT JOIN drover_django_task_results r ON r.job_id = j.id WHERE j.id = %s",
            [job_id],
        )
        row = cur.fetchone()
    if row is None or row[1] != TASK_KIND:
        raise TaskResultDoesNotExist(str(job_id))
    state, _, queue, priority, args, meta, attempt, failures, created, finalized = row[:10]
    holder, stored, value, paths, raised, workers, started, last = row[10:]
    args, meta, failures, value = _json(args), _json(meta), _json(failures), _json(value)
    paths, raised, workers = _json(paths) or [], _json(raised) or [], _json(workers) or []
    if stored is not None and not workers:
        # Started by an older drover, which recorded no worker per attempt: the last holder.
        workers = [holder or "drover"] * int(attempt)
    backend = str(args.get("backend", "default"))
    final = TaskResultStatus(status) if status else _STATUS[state]
    result = TaskResult(
        task=stored_task(
            args["task"],
            backend=backend,
            queue_name=queue,
            priority=int(priority),
            run_after=_run_after(meta),
        ),
        id=str(job_id),
        status=final,
        enqueued_at=created,
        started_at=started,
        finished_at=(finalized or last) if final in _FINISHED else None,
        last_attempted_at=last,
        args=list(args.get("args", [])),
        kwargs=dict(args.get("kwargs", {})),
        backend=backend,
        errors=_errors(failures or [], raised, paths),
        worker_ids=[str(worker) for worker in workers],
    )
    object.__setattr__(result, "_return_value", value)
    return result
