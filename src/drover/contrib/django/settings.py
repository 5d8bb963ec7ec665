"""Reading ``settings.DROVER`` and the Django database it points at."""

from __future__ import annotations

from typing import Any

import psycopg
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

__all__ = ["alias", "conninfo", "drover_settings"]

_KNOWN = {"DATABASE", "CONFIG", "WORKERS"}


def drover_settings() -> dict[str, Any]:
    """``settings.DROVER``, checked: ``DATABASE``, ``CONFIG`` and ``WORKERS`` keys only."""
    value = getattr(settings, "DROVER", {})
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"settings.DROVER must be a dict, not {type(value).__name__}")
    unknown = set(value) - _KNOWN
    if unknown:
        raise ImproperlyConfigured(
            f"settings.DROVER has unknown key(s) {sorted(unknown)}; use {sorted(_KNOWN)}"
        )
    return value


def alias(using: str | None = None) -> str:
    """The Django database alias drover uses (``DROVER["DATABASE"]``, default ``default``)."""
    name = using or drover_settings().get("DATABASE", "default")
    if name not in settings.DATABASES:
        raise ImproperlyConfigured(f"DROVER uses database {name!r}, which is not in DATABASES")
    if connections[name].vendor != "postgresql":
        raise ImproperlyConfigured(f"DROVER needs a PostgreSQL database; {name!r} is not one")
    return name


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
