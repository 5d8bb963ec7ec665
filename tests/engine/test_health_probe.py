"""The health probe: a started client runs the queue doctor and publishes its findings."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from jobdb import idle_workers
from prometheus_client import CollectorRegistry

import drover
from drover.health import CODES


def _findings(registry: CollectorRegistry, code: str) -> float:
    return registry.get_sample_value("drover_health_findings", {"code": code}) or 0.0


def test_the_probe_names_a_session_idle_in_transaction_and_clears_when_it_ends(
    make_client: Callable[..., drover.Client], db_url: str, poll: Callable[..., Any]
) -> None:
    registry = CollectorRegistry()
    client = make_client(
        metrics_registry=registry,
        plugins=[
            drover.plugins.HealthProbe(
                interval=0.05, thresholds=drover.HealthThresholds(xmin_age=0)
            )
        ],
    )
    assert _findings(registry, "XMIN_IDLE_IN_TRANSACTION") == 0
    assert registry.get_sample_value("drover_health_checked_timestamp_seconds") == 0
    with client:
        holder = psycopg.connect(db_url)
        try:
            # A snapshot held by a transaction left open: what pins vacuum.
            holder.execute("SELECT txid_current()")
            poll(
                lambda: _findings(registry, "XMIN_IDLE_IN_TRANSACTION") >= 1,
                message="the probe never named the session idle in transaction",
            )
            assert (registry.get_sample_value("drover_health_checked_timestamp_seconds") or 0) > 0
        finally:
            holder.rollback()
            holder.close()
        poll(
            lambda: _findings(registry, "XMIN_IDLE_IN_TRANSACTION") == 0,
            message="the finding stayed after the transaction ended",
        )
    # Every code is published, found or not, so `> 0` alerts never see a gap.
    for code in CODES:
        assert registry.get_sample_value("drover_health_findings", {"code": code}) is not None


def test_the_probe_runs_by_default_every_minute(make_client: Callable[..., drover.Client]) -> None:
    probe = drover.Config().plugin("health")
    assert probe == drover.plugins.HealthProbe()
    assert isinstance(probe, drover.plugins.HealthProbe)
    assert probe.interval == timedelta(seconds=60)
    assert probe.thresholds == drover.HealthThresholds()
    with make_client() as client:
        assert f"drover-health-{client._id}" in {t.name for t in threading.enumerate()}


def test_zero_turns_the_probe_off(make_client: Callable[..., drover.Client]) -> None:
    registry = CollectorRegistry()
    client = make_client(
        metrics_registry=registry, plugins=[drover.plugins.HealthProbe(interval=0)]
    )
    with client:
        names = {t.name for t in threading.enumerate()}
        assert not any(n.startswith("drover-health") for n in names), names
        assert any(n.startswith("drover-refresher") for n in names), names


def test_the_deprecated_fields_still_configure_the_probe(
    make_client: Callable[..., drover.Client],
) -> None:
    with pytest.warns(DeprecationWarning, match="HealthProbe") as caught:
        config = drover.Config(
            health_interval=0, health_thresholds=drover.HealthThresholds(xmin_age=1)
        )
    assert [str(w.message).split(" is ")[0] for w in caught] == [
        "Config.health_interval",
        "Config.health_thresholds",
    ]
    assert all(w.filename == __file__ for w in caught), "the warning names the caller's line"
    assert config.plugin("health") == drover.plugins.HealthProbe(
        interval=0, thresholds=drover.HealthThresholds(xmin_age=1)
    )
    with make_client(config.replace(workers=idle_workers())) as client:
        names = {t.name for t in threading.enumerate()}
        assert f"drover-health-{client._id}" not in names, names


@pytest.mark.parametrize(
    ("build", "named"),
    [
        (lambda: drover.plugins.HealthProbe(interval=-1), "plugin 'health': interval must not"),
        (
            lambda: drover.plugins.HealthProbe(thresholds={"xmin_age": 1}),  # type: ignore[arg-type]
            "plugin 'health': thresholds must be a drover.HealthThresholds",
        ),
        (lambda: drover.plugins.HealthProbe(intervall=1), "did you mean 'interval'"),  # type: ignore[call-arg]
    ],
)
def test_bad_probe_settings_are_refused(build: Callable[[], object], named: str) -> None:
    with pytest.raises(drover.ConfigError, match=named):
        build()


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"health_interval": -1}, "Config.health_interval"),
        ({"health_thresholds": {"xmin_age": 1}}, "Config.health_thresholds"),
    ],
)
def test_bad_deprecated_probe_settings_are_refused(fields: dict[str, Any], named: str) -> None:
    with (
        pytest.warns(DeprecationWarning, match=f"{named} is deprecated"),
        pytest.raises(drover.ConfigError, match=named),
    ):
        drover.Config(**fields)
