"""Running Django tasks (``django.tasks``, Django 6.0+) as drover jobs of kind ``django_task``."""

from __future__ import annotations

import drover
from drover.contrib.django.task_args import DjangoTaskArgs

__all__ = ["DjangoTaskArgs", "run_django_task"]


def run_django_task(job: drover.Job[DjangoTaskArgs]) -> None:
    """Import the task and call it (with its context if it takes one); keep what it returned.

    The attempt's start time, the return value and, for a failure, the
    exception's class path go to ``drover_django_task_results`` so that
    ``get_result`` can answer as Django expects. The exception then fails the
    attempt like any drover job's (retried, then dead). Sends Django's
    ``task_started`` and ``task_finished`` signals.
    """
    from django.db import close_old_connections
    from django.tasks.signals import task_finished, task_started
    from django.utils import timezone
    from django.utils.json import normalize_json
    from django.utils.module_loading import import_string

    from drover.contrib.django.models import TaskResult
    from drover.contrib.django.results import result_for

    close_old_connections()
    try:
        task = import_string(job.args.task)
        backend_class = type(task.get_backend())
        now = timezone.now()
        stored, _ = TaskResult.objects.get_or_create(job_id=job.id, defaults={"started_at": now})
        stored.last_attempted_at = now
        stored.save(update_fields=["last_attempted_at", "updated_at"])
        result = result_for(job.id, status="RUNNING")
        task_started.send(backend_class, task_result=result)
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
            stored.exception_paths = [
                *stored.exception_paths,
                f"{type(exc).__module__}.{type(exc).__qualname__}",
            ]
            stored.save(update_fields=["exception_paths", "updated_at"])
            task_finished.send(backend_class, task_result=result_for(job.id, status="FAILED"))
            raise
        stored.return_value = value
        stored.save(update_fields=["return_value", "updated_at"])
        task_finished.send(backend_class, task_result=result_for(job.id, status="SUCCESSFUL"))
    finally:
        close_old_connections()
