"""A Django task (Django 6.0+ ``django.tasks``), stored and run by drover."""

from __future__ import annotations

from typing import Any

try:
    from django.tasks import task
except ImportError:  # Django < 6: no task API; drover jobs (shop.jobs) still work
    task = None

if task is not None:

    @task(queue_name="mail")
    def shout(text: str) -> str:
        """Return the text in capitals (a result get_result can read back)."""
        return text.upper()

    @task(takes_context=True)
    def which_attempt(context: Any) -> int:
        """Return the attempt number the context reports."""
        return int(context.attempt)

    @task()
    def explode() -> None:
        """Always fail, for the error path."""
        raise ValueError("exploded on purpose")
