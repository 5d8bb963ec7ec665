"""System checks of `settings.DROVER`: `manage.py check` names a wrong setting up front.

Without them a mistyped `WORKERS` path or a SQLite `DATABASE` surfaces as
a traceback when the worker starts. The app registers `check_settings` (tag
`drover`), so `manage.py check`, and every command that runs the checks
(`migrate`, `runserver`, `manage.py drover ...`), reports:

| id | what is wrong |
|---|---|
| `drover.E001` | `DROVER` is not a dict |
| `drover.E002` | `DROVER` has a key drover does not know |
| `drover.E003` | `DATABASE` is not an alias in `DATABASES` |
| `drover.E004` | `DATABASE` is not a PostgreSQL database |
| `drover.E005` | `WORKERS` is not a dotted path, or importing it failed |
| `drover.E006` | `WORKERS` names something that is not a `drover.Workers` |
| `drover.E007` | `CONFIG` is not a dict of valid `drover.Config` fields |

The checks open no database connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

import drover
from drover.contrib.django.settings import KNOWN_KEYS, database_problem
from drover.contrib.django.worker import build_config, import_registry, not_a_registry

__all__ = ["check_settings"]

_WHERE = "settings.DROVER"


def _error(id_: int, msg: str, hint: str | None = None) -> checks.Error:
    return checks.Error(msg, hint=hint, obj=_WHERE, id=f"drover.E{id_:03d}")


def _database(value: dict[str, Any]) -> list[checks.CheckMessage]:
    name = value.get("DATABASE", "default")
    problem = database_problem(name)
    if problem is None:
        return []
    if isinstance(name, str) and name in settings.DATABASES:
        hint = (
            "drover's tables live in PostgreSQL: point DROVER['DATABASE'] at a "
            "django.db.backends.postgresql database (on psycopg 3)."
        )
        return [_error(4, problem, hint)]
    return [_error(3, problem, "Set DROVER['DATABASE'] to an alias of DATABASES.")]


def _workers(value: dict[str, Any]) -> tuple[list[checks.CheckMessage], drover.Workers]:
    path = value.get("WORKERS")
    if path is None:
        return [], drover.Workers()
    hint = "Set DROVER['WORKERS'] to the dotted path of a drover.Workers, e.g. 'shop.jobs.workers'."
    try:
        found = import_registry(path)
    except ImproperlyConfigured as exc:
        return [_error(5, str(exc), hint)], drover.Workers()
    if not isinstance(found, drover.Workers):
        return [_error(6, not_a_registry(str(path), found), hint)], drover.Workers()
    return [], found


def _config(value: dict[str, Any], registry: drover.Workers) -> list[checks.CheckMessage]:
    try:
        build_config(value.get("CONFIG", {}), registry)
    except ImproperlyConfigured as exc:
        return [
            _error(
                7,
                str(exc),
                "DROVER['CONFIG'] takes drover.Config's fields by name, "
                "e.g. {'concurrency': 20, 'queues': {'default': 1}}.",
            )
        ]
    return []


def check_settings(
    app_configs: Sequence[Any] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """Check `settings.DROVER`; return one `drover.E0xx` error per problem found.

    Every problem is reported at once, so one `manage.py check` lists them
    all. Importing `WORKERS` runs the project's module, as the worker would;
    an exception it raises becomes `drover.E005` rather than a traceback.
    """
    value = getattr(settings, "DROVER", {})
    if not isinstance(value, dict):
        return [
            _error(
                1,
                f"settings.DROVER must be a dict, not {type(value).__name__}",
                "DROVER = {'DATABASE': 'default', 'WORKERS': 'myapp.jobs.workers', 'CONFIG': {}}",
            )
        ]
    errors: list[checks.CheckMessage] = []
    unknown = sorted(str(key) for key in set(value) - KNOWN_KEYS)
    if unknown:
        errors.append(
            _error(
                2,
                f"settings.DROVER has unknown key(s) {', '.join(map(repr, unknown))}",
                f"DROVER takes {', '.join(map(repr, sorted(KNOWN_KEYS)))}; "
                "drover.Config's fields go under 'CONFIG'.",
            )
        )
    errors += _database(value)
    found, registry = _workers(value)
    errors += found
    errors += _config(value, registry)
    return errors
