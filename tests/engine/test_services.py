"""The engine's services as one list: start all or none, and a dead loop is reported, not hidden."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

import drover
from drover._kernel.fetcher import Fetcher
from drover._kernel.rescuer import Rescuer
from drover._kernel.service import ThreadService

MakeClient = Callable[..., drover.Client]
Poll = Callable[..., Any]


class Fatal(BaseException):
    """Escapes every ``except Exception`` in a loop, as a real bug in a loop body could."""


def _deaths(registry: CollectorRegistry, service: str) -> float | None:
    return registry.get_sample_value("drover_service_deaths_total", {"service": service})


def test_a_service_that_fails_to_start_stops_the_ones_already_running(
    make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[str] = []
    original = ThreadService.start

    def start(self: ThreadService) -> None:
        if isinstance(self, Fetcher):  # the last service to start
            raise RuntimeError("can't start new thread")
        original(self)
        started.append(self.name)

    monkeypatch.setattr(ThreadService, "start", start)
    client = make_client(ops_addr="127.0.0.1:0")
    with pytest.raises(RuntimeError, match="can't start new thread"):
        client.start()
    assert started == [
        "completer",
        "heartbeat",
        "rescuer",
        "progress",
        "refresher",
        "pruner",
        "health",
        "listener",
        "registry",
    ]
    # Nothing keeps running (the autouse fixture fails the test on a surviving
    # drover-* thread), the ops port was released, and the client never started.
    assert not client.running
    assert client.ops_addr is None
    assert client.ready() == (False, "not started")


def test_a_dead_service_thread_makes_the_client_unready_and_is_counted(
    make_client: MakeClient,
    poll: Poll,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    entered = threading.Event()
    go = threading.Event()  # the rescuer dies only once the client was seen ready

    def run_once(self: Rescuer) -> int:
        go.wait(10)
        entered.set()
        raise Fatal("rescuer bug")

    monkeypatch.setattr(Rescuer, "run_once", run_once)
    registry = CollectorRegistry()
    client = make_client(
        rescue_interval=0.05,
        plugins=[drover.plugins.QueueStats(interval=0.1)],
        metrics_registry=registry,
    )
    assert _deaths(registry, "rescuer") == 0.0
    client.start()
    poll(lambda: client.ready() == (True, "ok"), message="client ready before the death")
    go.set()
    assert entered.wait(10)
    poll(lambda: client.ready()[0] is False, message="readiness to report the dead rescuer")
    assert client.ready() == (False, "service died: rescuer")
    assert _deaths(registry, "rescuer") == 1.0
    assert _deaths(registry, "fetcher") == 0.0
    record = next(r for r in caplog.records if r.levelno == logging.CRITICAL)
    assert "drover-rescuer-" in record.getMessage() and "rescuer" in record.getMessage()
    assert record.exc_info is not None and record.exc_info[0] is Fatal
    client.stop(timeout=5)  # the other services still stop cleanly


def test_a_loop_that_returns_before_stop_counts_as_dead(
    make_client: MakeClient, poll: Poll, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Fetcher, "_loop", lambda self: None)
    registry = CollectorRegistry()
    client = make_client(metrics_registry=registry)
    client.start()
    poll(lambda: client.ready() == (False, "service died: fetcher"))
    assert _deaths(registry, "fetcher") == 1.0
    client.stop(timeout=5)
    # A loop that returns because it was stopped is not a death.
    assert _deaths(registry, "completer") == 0.0
