"""drover inside Django: an installable app, inserts in ``transaction.atomic()``, the admin, tasks.

Add ``"drover.contrib.django"`` to ``INSTALLED_APPS``; ``manage.py migrate``
then applies drover's schema to the database ``settings.DROVER["DATABASE"]``
names (``default``). Settings:

    DROVER = {
        "DATABASE": "default",            # the alias drover's tables live in
        "WORKERS": "myproject.jobs.workers",  # a drover.Workers, for manage.py drover worker
        "CONFIG": {"concurrency": 20, "queues": {"default": 1, "mail": 5}},  # drover.Config
    }

``insert`` joins the request's transaction; ``manage.py drover worker`` runs
the workers (and Django tasks sent to ``DroverTaskBackend``); every other
``manage.py drover ...`` command is the ``drover`` CLI pointed at the Django
database.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from drover.contrib.django.jobs import complete, insert, insert_many

if TYPE_CHECKING:
    from drover.contrib.django.tasks import DroverTaskBackend

__all__ = ["DroverTaskBackend", "complete", "insert", "insert_many"]


def __getattr__(name: str) -> Any:
    # The task backend needs django.tasks (Django 6.0+): imported only when named.
    if name == "DroverTaskBackend":
        from drover.contrib.django.tasks import DroverTaskBackend

        return DroverTaskBackend
    raise AttributeError(name)
