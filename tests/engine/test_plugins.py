"""Plugins on a started client: an application's own plugin end to end, the start order, and
no thread for a feature that is not configured (ADR 0046)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

import drover
from drover._kernel.fetcher import Fetcher
from drover._kernel.service import ThreadService

Conn = psycopg.Connection[tuple[Any, ...]]
MakeClient = Callable[..., drover.Client]
Poll = Callable[..., Any]


class Beat(drover.JobArgs, kind="plugins_beat"):
    pass


class Audit(drover.Plugin):
    """Counts the queued jobs into a table of its own through the borrowed connection."""

    name = "audit"

    def __init__(self, *, interval: drover.Duration = 0.05) -> None:
        super().__init__(interval=interval)
        self.runs: list[drover.PluginContext] = []
        self.ran = threading.Event()

    def run_once(self, context: drover.PluginContext) -> int:
        with context.connection() as conn:
            row = conn.execute("SELECT count(*) FROM drover_jobs").fetchone()
            assert row is not None
            conn.execute("INSERT INTO plugin_audit (client_id, jobs) VALUES (%s, %s)",
                         (context.client_id, row[0]))  # fmt: skip
        self.runs.append(context)
        self.ran.set()
        return int(row[0])


def _threads(client: drover.Client) -> set[str]:
    suffix = f"-{client._id}"
    return {t.name.removesuffix(suffix) for t in threading.enumerate() if t.name.endswith(suffix)}


@pytest.fixture
def audit_table(conn: Conn) -> None:
    conn.execute("CREATE TABLE plugin_audit (client_id text NOT NULL, jobs bigint NOT NULL)")


@pytest.mark.usefixtures("audit_table")
def test_an_application_plugin_runs_on_its_own_thread_and_stops_with_the_client(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    audit = Audit()
    client = make_client(plugins=[audit], queues={"a": 1, "b": 1})
    client.insert(Beat(), drover.InsertOpts(queue="parked"))
    client.start()
    assert "drover-audit" in _threads(client)
    poll(lambda: len(audit.runs) >= 3, message="three runs of the plugin")
    context = audit.runs[0]
    assert context.client_id == client._id
    assert context.logger is client.config.logger
    assert context.schema is None
    assert context.queues == ("a", "b")
    assert not context.stopped
    rows = conn.execute("SELECT DISTINCT client_id, jobs FROM plugin_audit").fetchall()
    assert rows == [(client._id, 1)]
    client.stop(timeout=5)
    assert context.stopped
    assert "drover-audit" not in _threads(client)
    runs = len(audit.runs)
    # Nothing runs after the stop returned (no sleep can prove a negative for
    # long; the thread is gone, which is what makes it impossible).
    assert not [t for t in threading.enumerate() if t.name == f"drover-audit-{client._id}"]
    assert len(audit.runs) == runs


def test_a_long_run_once_returns_when_the_client_stops(make_client: MakeClient) -> None:
    entered = threading.Event()

    class Patient(drover.Plugin):
        name = "patient"
        run_at_start = True

        def run_once(self, context: drover.PluginContext) -> None:
            entered.set()
            while not context.wait(0.05):
                pass

    client = make_client(plugins=[Patient(interval=60)])
    client.start()
    assert entered.wait(10), "run_at_start: the first run starts with the client"
    started = time.monotonic()
    client.stop(timeout=5)
    # The stop event reached the plugin: under the 10 s join it would otherwise wait, with
    # room for a busy machine.
    assert time.monotonic() - started < 8
    assert "drover-patient" not in _threads(client)


def test_a_failing_run_is_logged_and_tried_again(
    make_client: MakeClient, poll: Poll, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[int] = []

    class Flaky(drover.Plugin):
        name = "flaky"

        def run_once(self, context: drover.PluginContext) -> None:
            calls.append(1)
            raise ValueError("plugin bug")

    client = make_client(plugins=[Flaky(interval=0.02)])
    with client:
        poll(lambda: len(calls) >= 3, message="the plugin tried again after failing")
        assert client.ready() == (True, "ok")
        assert "drover-flaky" in _threads(client)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR and "flaky" in r.getMessage()]
    assert errors and errors[0].exc_info is not None and errors[0].exc_info[0] is ValueError


def test_a_plugin_feeds_readiness(make_client: MakeClient, poll: Poll) -> None:
    go = threading.Event()

    class Warmup(drover.Plugin):
        name = "warmup"

        def run_once(self, context: drover.PluginContext) -> None:
            if not go.is_set():
                raise RuntimeError("not warm yet")

        def not_ready(self, status: drover.PluginStatus) -> str | None:
            assert status.running_for >= 0
            return "warmup: not warm yet" if status.since_success is None else None

    with make_client(plugins=[Warmup(interval=0.02)]) as client:
        poll(lambda: client.ready() == (False, "warmup: not warm yet"), message="not ready")
        go.set()
        poll(lambda: client.ready() == (True, "ok"), message="ready once the plugin succeeded")


@pytest.mark.usefixtures("audit_table")
def test_a_transient_database_failure_in_a_plugin_is_an_episode_not_a_bug(
    make_client: MakeClient, poll: Poll
) -> None:
    slow = threading.Event()
    slow.set()

    class Timed(drover.Plugin):
        name = "timed"

        def run_once(self, context: drover.PluginContext) -> None:
            with context.connection() as conn:
                if slow.is_set():
                    # The server's statement timeout: a transient failure (ADR 0044).
                    conn.execute("SET statement_timeout = 10")
                    try:
                        conn.execute("SELECT pg_sleep(1)")
                    finally:
                        conn.execute("RESET statement_timeout")
                conn.execute("SELECT 1")

    with make_client(plugins=[Timed(interval=0.05)]) as client:
        poll(
            lambda: client.ready()[1].startswith("database unavailable: timed: "),
            message="the plugin's timeout makes the client not ready, naming it",
        )
        slow.clear()
        poll(lambda: client.ready() == (True, "ok"), message="ready after the plugin's next run")


def test_a_plugin_whose_thread_dies_makes_the_client_unready(
    make_client: MakeClient, poll: Poll
) -> None:
    class Fatal(BaseException):
        pass

    class Doomed(drover.Plugin):
        name = "doomed"

        def run_once(self, context: drover.PluginContext) -> None:
            raise Fatal("bug")

    registry = CollectorRegistry()
    client = make_client(plugins=[Doomed(interval=0.02)], metrics_registry=registry)
    with client:
        # Published at 0 from the start, so an alert on its increase sees the death.
        poll(lambda: client.ready() == (False, "service died: doomed"), message="death reported")
        assert registry.get_sample_value("drover_service_deaths_total", {"service": "doomed"}) == 1


def test_a_readiness_check_that_raises_counts_as_not_ready(
    make_client: MakeClient, poll: Poll
) -> None:
    class Broken(drover.Plugin):
        name = "broken"

        def run_once(self, context: drover.PluginContext) -> None:
            return None

        def not_ready(self, status: drover.PluginStatus) -> str | None:
            raise KeyError("bug")

    with make_client(plugins=[Broken(interval=60)]) as client:
        # Once the stats are fresh (the first reason a loaded machine may give),
        # the broken check is what keeps the client not ready.
        poll(
            lambda: client.ready() == (False, "broken: readiness check failed"),
            message=f"the broken check's reason, not {client.ready()}",
        )


def test_start_order_places_plugins_before_the_listener_and_intake_plugins_after(
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
    beat = drover.PeriodicJob("beat", "@every 1h", Beat(), drover.InsertOpts(queue="parked"))
    client = make_client(
        plugins=[Audit(interval=60), drover.plugins.Periodic(jobs=[beat])], poll_interval=0.1
    )
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
        "audit",
        "listener",
        "periodic",
        "registry",
    ]


def test_a_feature_that_is_not_configured_starts_no_thread(make_client: MakeClient) -> None:
    everything = [
        "completer",
        "heartbeat",
        "rescuer",
        "progress",
        "listener",
        "registry",
        "fetcher",
    ]
    with make_client() as client:
        assert _threads(client) >= {f"drover-{n}" for n in everything}
        assert {"drover-refresher", "drover-pruner", "drover-health"} <= _threads(client)
        assert "drover-periodic" not in _threads(client)
    bare = make_client(
        plugins=[
            drover.plugins.Pruner(retention=None),
            drover.plugins.HealthProbe(interval=0),
            drover.plugins.Periodic(jobs=[]),
        ]
    )
    with bare:
        names = _threads(bare)
        assert "drover-refresher" in names
        assert not names & {"drover-pruner", "drover-health", "drover-periodic"}, names
