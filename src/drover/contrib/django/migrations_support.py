"""Running drover's own migrator on a Django connection (from a migration or post_migrate)."""

from __future__ import annotations

from django.db import connections

import drover
from drover.contrib.django.settings import schema

__all__ = ["apply_drover_migrations"]


def apply_drover_migrations(using: str) -> list[str]:
    """Apply drover's pending migrations on the Django database ``using``; return their labels.

    Needs the connection outside any transaction (each drover migration commits
    on its own): Django's migration for this runs with ``atomic = False``.
    """
    connection = connections[using]
    connection.ensure_connection()
    if connection.in_atomic_block:
        raise RuntimeError("drover's migrations must run outside transaction.atomic()")
    return [m.label for m in drover.migrate(connection.connection, schema=schema())]
