"""The worker side under Django: the registry it runs, a client built from ``settings.DROVER``."""

from __future__ import annotations

import functools
import importlib
from typing import Any

from django.core.exceptions import ImproperlyConfigured

import drover
from drover.contrib.django.runner import run_django_task
from drover.contrib.django.settings import conninfo, drover_settings
from drover.contrib.django.task_args import DjangoTaskArgs
from drover.contrib.django.wording import django_remedy

__all__ = ["build_client", "build_config", "import_registry", "not_a_registry", "workers"]


def import_registry(path: object) -> object:
    """The object `DROVER["WORKERS"]` names (`"pkg.module.name"` or `"pkg.module:name"`).

    Raises:
        ImproperlyConfigured: `path` is not a dotted path, or importing it
            failed; the message names the path and what went wrong.
    """
    if not isinstance(path, str) or "." not in path.replace(":", "."):
        raise ImproperlyConfigured(
            f"DROVER['WORKERS'] must be a dotted path such as 'shop.jobs.workers', not {path!r}"
        )
    module_name, _, attribute = path.replace(":", ".").rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except Exception as exc:  # the project's module may raise anything while importing
        raise ImproperlyConfigured(
            f"DROVER['WORKERS'] = {path!r} cannot be imported: {type(exc).__name__}: {exc}"
        ) from exc


def not_a_registry(path: str, found: object) -> str:
    """The message for a `DROVER["WORKERS"]` path that names something else."""
    if isinstance(found, type):
        what = f"the class {found.__module__}.{found.__qualname__}"
    else:
        what = f"a {type(found).__module__}.{type(found).__qualname__}".replace("builtins.", "")
    return f"DROVER['WORKERS'] = {path!r} names {what}, not a drover.Workers"


@functools.cache
def workers() -> drover.Workers:
    """The registry workers run: `DROVER["WORKERS"]` (a dotted path) plus Django tasks."""
    path = drover_settings().get("WORKERS")
    registry = drover.Workers() if path is None else import_registry(path)
    if not isinstance(registry, drover.Workers):
        raise ImproperlyConfigured(not_a_registry(str(path), registry))
    if DjangoTaskArgs.kind not in registry:
        registry.register(args=DjangoTaskArgs)(run_django_task)
    return registry


class _DjangoClient(drover.Client):
    """A client whose start-up errors name Django's commands (`manage.py migrate`)."""

    def start(self) -> None:
        # run() and `with client:` start through here as well.
        with django_remedy():
            super().start()


def build_config(fields: object, registry: drover.Workers, **overrides: Any) -> drover.Config:
    """The `drover.Config` that `fields` (`DROVER["CONFIG"]`) describe, running `registry`.

    Raises:
        ImproperlyConfigured: `fields` is not a dict, or a field is unknown
            or out of range (the message is `drover.ConfigError`'s, naming it).
    """
    if not isinstance(fields, dict):
        raise ImproperlyConfigured(
            f"DROVER['CONFIG'] must be a dict of drover.Config fields, not {fields!r}"
        )
    try:
        return drover.Config(**{**fields, "workers": registry, **overrides})
    except (drover.ConfigError, TypeError) as exc:  # TypeError: a key that is not a str
        raise ImproperlyConfigured(f"DROVER['CONFIG']: {exc}") from exc


def build_client(**overrides: Any) -> drover.Client:
    """A new client on the Django database, from `DROVER["CONFIG"]` (the caller closes it).

    Starting it on a database without drover's schema raises
    `drover.SchemaMissing` naming `manage.py migrate`.

    Raises:
        ImproperlyConfigured: `DROVER` is wrong (`manage.py check` reports
            the same problems as `drover.E0xx` messages).
    """
    config = build_config(drover_settings().get("CONFIG", {}), workers(), **overrides)
    return _DjangoClient(conninfo(), config)
