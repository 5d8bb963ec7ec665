"""What a Django task call is stored as: the args of a drover job of kind ``django_task``.

Kept apart from the runner and the results, which need ``django.tasks``
(Django 6.0+): a worker on Django 5.2 registers the kind all the same.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

import drover

__all__ = ["TASK_KIND", "DjangoTaskArgs"]

TASK_KIND = "django_task"
"""The drover job kind a Django task is stored as."""


class DjangoTaskArgs(drover.JobArgs, kind=TASK_KIND):
    """A Django task call: the task's import path, its JSON args, and its backend alias."""

    task: str
    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)
    backend: str = "default"
