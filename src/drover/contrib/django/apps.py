"""The Django app: ``INSTALLED_APPS = [..., "drover.contrib.django"]``."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.core import checks
from django.db.models.signals import post_migrate


class DroverConfig(AppConfig):
    """drover's Django app (label `drover`).

    When ready it registers the system checks of `settings.DROVER` and of the
    queues of drover's `TASKS` backends (tag `drover`: `manage.py check` reports
    `drover.E001`..., `drover.W001`) and the
    `post_migrate` hook that applies newer drover migrations.
    """

    name = "drover.contrib.django"
    label = "drover"
    verbose_name = "drover job queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Register the settings checks and the `post_migrate` hook."""
        from drover.contrib.django.checks import check_settings, check_task_queues

        checks.register(check_settings, "drover")
        checks.register(check_task_queues, "drover")
        post_migrate.connect(_bring_drover_up_to_date, sender=self)


def _bring_drover_up_to_date(using: str, **kwargs: Any) -> None:
    # The Django migration applied drover's schema once; a newer drover brings
    # newer drover migrations, applied here on every `manage.py migrate`
    # (drover's migrator is idempotent and takes its own lock).
    from drover.contrib.django.migrations_support import apply_drover_migrations
    from drover.contrib.django.settings import alias

    if using == alias():
        apply_drover_migrations(using)
