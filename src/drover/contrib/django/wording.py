"""Errors in Django's words: a missing schema names `manage.py migrate`, not `drover migrate`.

drover's core names its own command in `drover.SchemaMissing`; it cannot know
that under Django the schema comes with `manage.py migrate` (the app's
migration runs drover's migrator, and the Django migration must be recorded
too). The Django layer re-raises the error at its own doors (`insert`,
`insert_many`, the worker's client) with Django's remedy.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from drover.errors import SchemaMissing

__all__ = ["MIGRATE_REMEDY", "django_remedy"]

MIGRATE_REMEDY = "run `python manage.py migrate` first (drover's app applies its schema)"
"""The remedy a `drover.SchemaMissing` names under Django."""


@contextlib.contextmanager
def django_remedy() -> Iterator[None]:
    """Re-raise a `drover.SchemaMissing` from the block naming `manage.py migrate`.

    The error keeps its problem (the action, the database, the versions found)
    and its cause; only the remedy changes. Every other exception passes as is.
    """
    try:
        yield
    except SchemaMissing as exc:
        raise exc.with_remedy(MIGRATE_REMEDY) from exc.__cause__
