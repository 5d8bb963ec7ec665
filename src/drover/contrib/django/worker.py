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

__all__ = ["build_client", "workers"]


def _import(path: str) -> Any:
    module_name, _, attribute = path.replace(":", ".").rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ImproperlyConfigured(f"DROVER cannot import {path!r}: {exc}") from exc


@functools.cache
def workers() -> drover.Workers:
    """The registry workers run: ``DROVER["WORKERS"]`` (a dotted path) plus Django tasks."""
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
