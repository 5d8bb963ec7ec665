"""Running Django tasks (``django.tasks``, Django 6.0+) as drover jobs of kind ``django_task``."""

from __future__ import annotations

import json
import traceback
from typing import Any

import drover
from drover.contrib.django.task_args import DjangoTaskArgs

__all__ = ["DjangoTaskArgs", "run_django_task"]

_RESULTS = "drover_django_task_results"

# One statement per write, each atomic on its own: two executions of one job (a
# superseded one still running) append to the lists rather than overwrite them.
_STARTED = (
    f"INSERT INTO {_RESULTS} AS r (job_id, return_value, exception_paths, errors, "
    "worker_ids, started_at, last_attempted_at, updated_at) "
    "SELECT j.id, NULL, '[]'::jsonb, '[]'::jsonb, jsonb_build_array(COALESCE(j.leased_by, "
    "'drover')), %(now)s, %(now)s, %(now)s FROM {jobs} j WHERE j.id = %(id)s "
    "ON CONFLICT (job_id) DO UPDATE SET last_attempted_at = EXCLUDED.last_attempted_at, "
    "updated_at = EXCLUDED.updated_at, worker_ids = r.worker_ids || EXCLUDED.worker_ids"
)
_RAISED = (
    f"UPDATE {_RESULTS} SET errors = errors || jsonb_build_array(%(error)s::jsonb), "
    "exception_paths = exception_paths || jsonb_build_array(%(path)s::text), "
    "updated_at = %(now)s WHERE job_id = %(id)s"
)
_RETURNED = (
    f"UPDATE {_RESULTS} SET return_value = %(value)s::jsonb, updated_at = %(now)s "
    "WHERE job_id = %(id)s"
)


def _write(sql: str, **params: Any) -> None:
    from django.db import connections

    from drover.contrib.django.settings import alias, jobs_table

    with connections[alias()].cursor() as cursor:
        cursor.execute(sql.replace("{jobs}", jobs_table()), params)


def _backend_class(task: Any) -> type:
    """The sender of Django's task signals: the class of the backend the task went to."""
    from drover.contrib.django.tasks import DroverTaskBackend

    try:
        return type(task.get_backend())
    except Exception:  # that alias left TASKS since the enqueue
        return DroverTaskBackend


def run_django_task(job: drover.Job[DjangoTaskArgs]) -> None:
    """Call the task as enqueued (with its context if it takes one); keep what happened.

    Before the call, the attempt's start and its worker (the job's lease holder)
    go to ``drover_django_task_results``; after it, the return value, or the
    exception's class path and its traceback exactly as
    ``traceback.format_exception`` gives it (as Django's own backends keep it),
    so that ``get_result`` can answer as Django expects. The exception then fails
    the attempt like any drover job's (retried, then dead). Sends Django's
    ``task_started`` and ``task_finished`` signals, from the class of the backend
    the task was enqueued on.
    """
    from django.db import close_old_connections
    from django.tasks.signals import task_finished, task_started
    from django.utils import timezone
    from django.utils.json import normalize_json

    from drover.contrib.django.results import result_for

    close_old_connections()
    try:
        _write(_STARTED, id=job.id, now=timezone.now())
        result = result_for(job.id, status="RUNNING")
        task = result.task
        sender = _backend_class(task)
        task_started.send(sender, task_result=result)
        try:
            if task.takes_context:
                from django.tasks.base import TaskContext

                value = task.call(
                    TaskContext(task_result=result), *job.args.args, **job.args.kwargs
                )
            else:
                value = task.call(*job.args.args, **job.args.kwargs)
            value = normalize_json(value)
        except BaseException as exc:
            if not isinstance(exc, drover.Snooze):  # not a failure: the attempt is refunded
                path = f"{type(exc).__module__}.{type(exc).__qualname__}"
                error = {
                    "attempt": job.attempt,
                    "exception_class_path": path,
                    "traceback": "".join(traceback.format_exception(exc)),
                }
                _write(_RAISED, id=job.id, error=json.dumps(error), path=path, now=timezone.now())
            task_finished.send(sender, task_result=result_for(job.id, status="FAILED"))
            raise
        _write(_RETURNED, id=job.id, value=json.dumps(value), now=timezone.now())
        task_finished.send(sender, task_result=result_for(job.id, status="SUCCESSFUL"))
    finally:
        close_old_connections()
