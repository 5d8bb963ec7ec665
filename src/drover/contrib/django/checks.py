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
| `drover.W001` | a queue in the `QUEUES` of a drover `TASKS` backend is not in `CONFIG["queues"]` |

`drover.W001` is a warning (`check_task_queues`, registered by the app; Django's
own checks of `TASKS` backends run only once something imported `django.tasks`):
the worker works the queues of `DROVER["CONFIG"]["queues"]`, so a task sent to a
queue outside them waits forever. A project whose other workers (other settings)
work that queue adds `"drover.W001"` to `SILENCED_SYSTEM_CHECKS`.

The checks open no database connection.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

import drover
from drover.contrib.django.settings import KNOWN_KEYS, database_problem, drover_settings
from drover.contrib.django.worker import build_config, import_registry, not_a_registry

__all__ = [
    "check_settings",
    "check_task_queues",
    "drover_task_backends",
    "unworked_task_queues",
    "worked_queues",
]

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


def worked_queues() -> list[str] | None:
    """The queues a worker started from these settings works (``DROVER["CONFIG"]
    ["queues"]``, drover's default when absent), or ``None`` when ``DROVER`` is
    wrong (``drover.E0xx`` says how)."""
    try:
        config = build_config(drover_settings().get("CONFIG", {}), drover.Workers())
    except ImproperlyConfigured:
        return None
    return list(config.queues)


def unworked_task_queues(
    alias: str, queues: Iterable[str], worked: Collection[str] | None = None
) -> list[checks.CheckMessage]:
    """``drover.W001`` for each of ``queues`` (a ``TASKS`` backend's ``QUEUES``) that the
    worker does not work (``worked``, by default ``worked_queues()``); a near miss gets
    "did you mean". Empty ``queues`` (Django's "any queue") has nothing to compare."""
    if worked is None:
        worked = worked_queues()
        if worked is None:
            return []
    known = sorted(worked)
    messages: list[checks.CheckMessage] = []
    for name in sorted(set(queues) - set(known)):
        close = difflib.get_close_matches(name, known, n=1)
        guess = f"; did you mean {close[0]!r}?" if close else ""
        messages.append(
            checks.Warning(
                f"queue {name!r} of settings.TASKS[{alias!r}] is worked by no drover worker: "
                f"DROVER['CONFIG']['queues'] works {', '.join(map(repr, known))}, so a task "
                f"sent to {name!r} waits forever{guess}",
                hint=(
                    f"Add {name!r} to DROVER['CONFIG']['queues'], or take it out of "
                    f"TASKS[{alias!r}]['QUEUES']. If workers with other settings work it, "
                    "add 'drover.W001' to SILENCED_SYSTEM_CHECKS."
                ),
                obj=f"settings.TASKS[{alias!r}]",
                id="drover.W001",
            )
        )
    return messages


def drover_task_backends() -> list[tuple[str, set[str]]]:
    """``(alias, QUEUES)`` of each ``TASKS`` backend that is drover's, in the order of
    ``TASKS``; the queues as Django reads them (missing: ``{"default"}``; empty: any).
    None before Django 6.0, which has no ``django.tasks``."""
    try:
        from django.tasks import task_backends

        from drover.contrib.django.tasks import DroverTaskBackend
    except ImportError:
        return []
    found: list[tuple[str, set[str]]] = []
    for name in getattr(settings, "TASKS", None) or {}:
        try:
            backend = task_backends[name]
        except Exception:  # noqa: S112 (Django's own checks report a broken TASKS entry)
            continue
        if isinstance(backend, DroverTaskBackend):
            found.append((str(name), set(backend.queues)))
    return found


def check_task_queues(
    app_configs: Sequence[Any] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """``drover.W001`` for each queue a drover ``TASKS`` backend accepts and the worker
    does not work (``unworked_task_queues``). Opens no database connection."""
    worked = worked_queues()
    if worked is None:
        return []
    messages: list[checks.CheckMessage] = []
    for name, queues in drover_task_backends():
        messages += unworked_task_queues(name, queues, worked)
    return messages
