"""What a Django task call is stored as: the args of a drover job of kind ``django_task``.

Kept apart from the runner and the results, which need ``django.tasks``
(Django 6.0+): a worker on Django 5.2 registers the kind all the same.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

import drover

__all__ = ["TASK_KIND", "TASK_META", "DjangoTaskArgs"]

TASK_KIND = "django_task"
"""The drover job kind a Django task is stored as."""

TASK_META = "django_task"
"""The key of the job's metadata (``InsertOpts.meta``) that keeps what ``.using()`` set
and the job's own columns do not: ``{"run_after": "<ISO 8601>"}`` when a ``run_after``
was given. The queue and priority are the job's; the backend alias is in its args.
Metadata, not args: a worker of an older drover, which stored no run_after, still
decodes the args."""


class DjangoTaskArgs(drover.JobArgs, kind=TASK_KIND):
    """A Django task call: the task's import path, its JSON args, and its backend alias."""

    task: str
    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)
    backend: str = "default"
