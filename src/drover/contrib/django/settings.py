"""Reading ``settings.DROVER`` and the Django database it points at."""

from __future__ import annotations

import functools
import importlib
import threading
from typing import Any

import psycopg
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

import drover

__all__ = ["alias", "build_client", "conninfo", "drover_settings", "shared_client", "workers"]

_KNOWN = {"DATABASE", "CONFIG", "WORKERS"}
_lock = threading.Lock()
_clients: dict[str, drover.Client] = {}


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


def _import(path: str) -> Any:
    module_name, _, attribute = path.replace(":", ".").rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ImproperlyConfigured(f"DROVER cannot import {path!r}: {exc}") from exc


@functools.cache
def workers() -> drover.Workers:
    """The registry workers run: ``DROVER["WORKERS"]`` (a dotted path) plus Django tasks."""
    from drover.contrib.django.runner import DjangoTaskArgs, run_django_task

    path = drover_settings().get("WORKERS")
    registry = _import(path) if path else drover.Workers()
    if not isinstance(registry, drover.Workers):
        raise ImproperlyConfigured(
            f"DROVER['WORKERS'] must name a drover.Workers, not {registry!r}"
        )
    if DjangoTaskArgs.kind not in registry:
        registry.register(args=DjangoTaskArgs)(run_django_task)
    return registry


def build_client(**overrides: Any) -> drover.Client:
    """A new client on the Django database, from ``DROVER["CONFIG"]`` (the caller closes it)."""
    fields = dict(drover_settings().get("CONFIG", {}))
    fields["workers"] = workers()
    fields.update(overrides)
    try:
        config = drover.Config(**fields)
    except drover.ConfigError as exc:
        raise ImproperlyConfigured(f"DROVER['CONFIG']: {exc}") from exc
    return drover.Client(conninfo(), config)


def shared_client() -> drover.Client:
    """One client per process for reads such as task results (not started)."""
    with _lock:
        key = conninfo()
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = build_client()
        return client
