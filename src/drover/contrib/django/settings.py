"""Reading ``settings.DROVER`` and the Django database it points at."""

from __future__ import annotations

from typing import Any

import psycopg
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from drover._db.namespace import check_schema_name
from drover.errors import InvalidArgument
from drover.insert_middleware import InsertMiddleware, checked_insert_chain

__all__ = [
    "KNOWN_KEYS",
    "alias",
    "conninfo",
    "database_problem",
    "drover_settings",
    "insert_middleware",
    "jobs_table",
    "schema",
]

KNOWN_KEYS = frozenset({"DATABASE", "CONFIG", "WORKERS"})
"""The keys `settings.DROVER` may have."""


def drover_settings() -> dict[str, Any]:
    """``settings.DROVER``, checked: ``DATABASE``, ``CONFIG`` and ``WORKERS`` keys only."""
    value = getattr(settings, "DROVER", {})
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"settings.DROVER must be a dict, not {type(value).__name__}")
    unknown = set(value) - KNOWN_KEYS
    if unknown:
        raise ImproperlyConfigured(
            f"settings.DROVER has unknown key(s) {sorted(unknown)}; use {sorted(KNOWN_KEYS)}"
        )
    return value


def database_problem(name: object) -> str | None:
    """What is wrong with `name` as drover's database alias, or None when it is usable.

    Usable means: a string that `DATABASES` has, whose backend is PostgreSQL.
    Opens no connection (the system checks call it too).
    """
    if not isinstance(name, str) or not name:
        return f"DROVER['DATABASE'] must be a database alias (a string), not {name!r}"
    if name not in settings.DATABASES:
        known = ", ".join(sorted(settings.DATABASES)) or "none"
        return f"DROVER uses database {name!r}, which is not in DATABASES (aliases: {known})"
    if connections[name].vendor != "postgresql":
        engine = settings.DATABASES[name].get("ENGINE", "?")
        return f"DROVER needs a PostgreSQL database; {name!r} is {engine}"
    return None


def alias(using: str | None = None) -> str:
    """The Django database alias drover uses (``DROVER["DATABASE"]``, default ``default``)."""
    name = using or drover_settings().get("DATABASE", "default")
    problem = database_problem(name)
    if problem is not None:
        raise ImproperlyConfigured(problem)
    return str(name)


def schema() -> str | None:
    """The schema of drover's tables: ``DROVER["CONFIG"]["schema"]`` (checked), else ``None``
    (the default installation). Inserts, migrations, the admin and ``manage.py drover``
    all use it, as the worker's ``Config`` does."""
    fields = drover_settings().get("CONFIG") or {}
    value = fields.get("schema") if isinstance(fields, dict) else None
    if value is None:
        return None
    try:
        return check_schema_name("DROVER['CONFIG']['schema']", value)
    except InvalidArgument as exc:
        raise ImproperlyConfigured(str(exc)) from None


def jobs_table() -> str:
    """``drover_jobs`` as SQL on the Django connection: qualified with ``DROVER["CONFIG"]
    ["schema"]`` when one is set (a checked plain name, so no quoting is needed), else
    unqualified, resolved by the connection's ``search_path`` as drover's own SQL is."""
    name = schema()
    return "drover_jobs" if name in (None, "public") else f"{name}.drover_jobs"


def insert_middleware() -> tuple[InsertMiddleware, ...]:
    """The insert middleware of ``DROVER["CONFIG"]["middleware"]`` (the worker's
    ``Config.middleware``), which the ``insert`` helpers go through too (ADR 0047)."""
    fields = drover_settings().get("CONFIG") or {}
    listed = fields.get("middleware") if isinstance(fields, dict) else None
    if not listed:
        return ()
    try:
        return checked_insert_chain(listed, "DROVER['CONFIG']['middleware']")
    except InvalidArgument as exc:
        raise ImproperlyConfigured(str(exc)) from None


def conninfo(using: str | None = None) -> str:
    """A libpq conninfo string for the Django database (for drover's own pools and the CLI)."""
    db = settings.DATABASES[alias(using)]
    params: dict[str, Any] = {
        "dbname": db.get("NAME") or None,
        "user": db.get("USER") or None,
        "password": db.get("PASSWORD") or None,
        "host": db.get("HOST") or None,
        "port": str(db["PORT"]) if db.get("PORT") else None,
    }
    for key, option in (db.get("OPTIONS") or {}).items():
        if isinstance(option, str | int) and key not in ("pool", "server_side_binding"):
            params[key] = option
    return psycopg.conninfo.make_conninfo(**{k: v for k, v in params.items() if v is not None})
