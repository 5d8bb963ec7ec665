"""Builds the services of a started client's plugins (ADR 0046).

``build_plugins(wiring)`` turns ``Config.effective_plugins`` into services:
drover's own plugins into the engine's services (``QueueStats`` into the
``StatsRefresher``, ``Pruner`` into the ``Pruner``, ``HealthProbe`` into the
``HealthProbe``, ``Periodic`` into the ``Ticker``), each only when it has
work (a retention with states to prune, a non-zero probe interval, periodic
entries), and any other plugin into a ``PluginService`` that calls its
``run_once`` every interval. The engine lists them in its start order; the
client asks ``Plugins.not_ready`` for readiness.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

from drover import plugins as builtin
from drover._db import Connection
from drover._kernel.service import IntervalService, ThreadService
from drover._runtime.healthprobe import HealthProbe
from drover._runtime.pruner import Pruner
from drover._runtime.refresher import StatsRefresher
from drover._runtime.ticker import Ticker
from drover._runtime.wiring import Wiring
from drover.plugins import Plugin, PluginContext, PluginStatus

__all__ = ["Mounted", "PluginService", "Plugins", "build_plugins"]


class PluginService(IntervalService):
    """A plugin of the application's: its ``run_once(context)`` every interval, on its own thread.

    Named after the plugin (``drover-<name>-<client id>``, ``/readyz``,
    ``drover_service_deaths_total{service}``). A failure is the interval
    service's: a transient database failure (through
    ``PluginContext.connection``) is logged once per episode and makes the
    client not ready until a run succeeds; anything else is logged at ERROR
    with its traceback, and the next interval tries again. ``run_at_start``
    runs it once as the thread starts.
    """

    def __init__(self, wiring: Wiring, plugin: Plugin) -> None:
        interval = plugin.interval
        assert interval is not None  # Config refuses a plugin of the application's without one
        super().__init__(
            interval=interval.total_seconds(), client_id=wiring.client_id, logger=wiring.log
        )
        self.name = plugin.name
        self.action = f"run plugin {plugin.name}"
        self._plugin = plugin
        self._store = wiring.store
        self.last_success: float | None = None
        """``time.monotonic()`` of the last ``run_once`` that returned."""
        self.context = PluginContext(
            client_id=wiring.client_id,
            logger=wiring.log,
            schema=wiring.config.schema,
            queues=list(wiring.config.queues),
            lend=self._lend,
            stopping=self._stopping,
        )

    def _lend(self, timeout: float | None) -> AbstractContextManager[Connection]:
        return self._store.lend(f"plugin {self.name!r}", timeout)

    def run_once(self) -> object:
        """One run of the plugin; raises what it raises (the loop logs it)."""
        result = self._plugin.run_once(self.context)
        self.last_success = time.monotonic()
        return result

    def _loop(self) -> None:
        if self._plugin.run_at_start and not self._stopping.is_set():
            try:
                self.run_once()
            except Exception as exc:
                if not self._failed(exc):
                    self._log.error("%s failed", self.action, exc_info=True)
            else:
                self._ok()
        super()._loop()


@dataclass(frozen=True, slots=True)
class Mounted:
    """One plugin in one started client: its services (none when it has no work) and
    where its last success is read."""

    plugin: Plugin
    services: tuple[ThreadService, ...]
    last_success: Callable[[], float | None]


def _never() -> float | None:
    return None


class Plugins:
    """A started client's plugins, in ``Config.effective_plugins`` order."""

    def __init__(self, mounted: list[Mounted], logger: logging.Logger) -> None:
        self.mounted = mounted
        self._log = logger
        self._since = time.monotonic()
        self._broken: set[str] = set()

    def services(self, *, intake: bool) -> list[ThreadService]:
        """The plugins' services that bring work in (``intake``: the ticker) or the others."""
        return [s for m in self.mounted for s in m.services if s.intake is intake]

    def service(self, name: str) -> ThreadService | None:
        """The running service named ``name`` (``"refresher"``, ``"periodic"``...), or None."""
        return next((s for m in self.mounted for s in m.services if s.name == name), None)

    def not_ready(self) -> str | None:
        """The first reason a plugin with services gives for not being ready, else None.

        A memory read on the caller's thread. A ``not_ready`` that raises
        counts as not ready (``<name>: readiness check failed``), logged once.
        """
        now = time.monotonic()
        for mounted in self.mounted:
            if not mounted.services:
                continue
            last = mounted.last_success()
            status = PluginStatus(
                running_for=now - self._since,
                since_success=None if last is None else now - last,
            )
            plugin = mounted.plugin
            try:
                reason = plugin.not_ready(status)
            except Exception:
                if plugin.name not in self._broken:
                    self._broken.add(plugin.name)
                    self._log.error(
                        "the readiness check of plugin %s failed",
                        plugin.name,
                        exc_info=True,
                        extra={"plugin": plugin.name},
                    )
                return f"{plugin.name}: readiness check failed"
            if reason is not None:
                return str(reason)
        return None


def _mount(wiring: Wiring, plugin: Plugin) -> Mounted:
    if isinstance(plugin, builtin.QueueStats):
        interval = plugin.interval
        assert interval is not None
        refresher = StatsRefresher(wiring, interval=interval)
        return Mounted(plugin, (refresher,), lambda: refresher.last_success)
    if isinstance(plugin, builtin.Pruner):
        retention = plugin.retention
        interval = plugin.interval
        assert interval is not None
        if retention is None or not retention.by_state():
            return Mounted(plugin, (), _never)
        return Mounted(plugin, (Pruner(wiring, retention=retention, interval=interval),), _never)
    if isinstance(plugin, builtin.HealthProbe):
        interval = plugin.interval
        if not interval:
            return Mounted(plugin, (), _never)
        probe = HealthProbe(wiring, interval=interval, thresholds=plugin.thresholds)
        return Mounted(plugin, (probe,), _never)
    if isinstance(plugin, builtin.Periodic):
        if not plugin.jobs:
            return Mounted(plugin, (), _never)
        return Mounted(plugin, (Ticker(wiring, jobs=plugin.jobs),), _never)
    service = PluginService(wiring, plugin)
    wiring.metrics.known_service(service.name)
    return Mounted(plugin, (service,), lambda: service.last_success)


def build_plugins(wiring: Wiring) -> Plugins:
    """The services of ``wiring.config``'s effective plugins, built but not started."""
    return Plugins(
        [_mount(wiring, plugin) for plugin in wiring.config.effective_plugins], wiring.log
    )
