"""A Django Tasks backend (``django.tasks``, Django 6.0+) that stores tasks as drover jobs.

Configured like this:

    TASKS = {
        "default": {
            "BACKEND": "drover.contrib.django.DroverTaskBackend",
            "QUEUES": ["default", "mail"],        # [] any queue; missing: "default" only
            "OPTIONS": {"max_attempts": 5},        # drover attempts per task
        }
    }

``@task def f(...)`` then ``f.enqueue(...)`` inserts a drover job of kind
``django_task`` on the Django database, **in the caller's transaction** (it
exists only if the surrounding ``atomic()`` commits), and ``manage.py drover
worker`` runs it. What drover honours: ``queue_name`` (the drover queue),
``run_after`` (the job's due time), ``takes_context`` (the context carries the
result and its attempt count), async task functions, ``priority`` (the job's
priority, one to one: Django's range, -100 to 100 with higher more important
and 0 the default, is drover's) and ``get_result`` (from the job row and the
stored return value).

The ``TaskResult`` that ``enqueue()``, ``get_result()`` and ``refresh()`` give
carries the task as enqueued: what ``.using()`` set (priority, queue_name,
run_after, backend) is stored with the job and rebuilt on read, so
``result.refresh()`` asks the backend the task went to. ``manage.py check`` warns
(``drover.W001``) about a queue in ``QUEUES`` that ``DROVER["CONFIG"]["queues"]``
does not work.
"""

from __future__ import annotations

from typing import Any

from django.tasks import TaskResult, TaskResultStatus
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.exceptions import TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils.json import normalize_json

import drover
from drover.contrib.django.jobs import insert
from drover.contrib.django.results import result_for
from drover.contrib.django.task_args import TASK_META, DjangoTaskArgs

__all__ = ["DroverTaskBackend"]


class DroverTaskBackend(BaseTaskBackend):
    """Django tasks as drover jobs: transactional enqueue, retries, leases, results."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> TaskResult:
        """Insert the call as a drover job in the current transaction; return its READY result.

        Django's own ``InvalidTask`` (``validate_task``) refuses what this backend
        cannot take, a ``queue_name`` outside ``QUEUES`` among it. The result's
        ``task`` is ``task`` as given, with this backend's alias.
        """
        self.validate_task(task)
        if task.backend != self.alias:  # sent here directly, not through task.enqueue()
            task = task.using(backend=self.alias)
        stored_args = normalize_json(list(args))
        stored_kwargs = normalize_json(dict(kwargs))
        meta = None
        if task.run_after is not None:
            meta = {TASK_META: {"run_after": task.run_after.isoformat()}}
        row = insert(
            DjangoTaskArgs(
                task=task.module_path, args=stored_args, kwargs=stored_kwargs, backend=self.alias
            ),
            drover.InsertOpts(
                queue=task.queue_name,
                scheduled_at=task.run_after,
                max_attempts=self.options.get("max_attempts"),
                # Django checked it is in TASK_MIN_PRIORITY..TASK_MAX_PRIORITY
                # (-100..100), drover's own range: the value maps one to one.
                priority=task.priority,
                meta=meta,
            ),
        )
        result = TaskResult(
            task=task,
            id=str(row.id),
            status=TaskResultStatus.READY,
            enqueued_at=row.created_at,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=stored_args,
            kwargs=stored_kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: Any) -> TaskResult:
        """The task's result as the database has it now (``TaskResultDoesNotExist`` if none)."""
        text = str(result_id)
        if not (text.isascii() and text.isdigit()):
            raise TaskResultDoesNotExist(text)
        return result_for(int(text))
