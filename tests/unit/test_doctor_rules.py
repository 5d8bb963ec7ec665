"""The queue doctor's rules on facts: the conditions this test server cannot create for real.

A prepared transaction needs ``max_prepared_transactions > 0`` and a slot
holding xmin needs ``wal_level = logical`` or a standby with
``hot_standby_feedback``; both need a server restart, so their rules are
checked here on the facts ``drover._db.health`` would read.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

import drover
from drover.health import (
    BackendHolder,
    HealthFacts,
    PreparedHolder,
    SessionVisibility,
    Severity,
    SlotHolder,
    TableFacts,
    diagnose,
)

DEFAULT = drover.HealthThresholds()


def _facts(**kw: object) -> HealthFacts:
    return HealthFacts(schema_current=15, schema_latest=15, **kw)  # type: ignore[arg-type]


def test_no_facts_is_healthy() -> None:
    report = diagnose(_facts(), DEFAULT)
    assert report.healthy and report.codes() == []


def test_a_role_that_cannot_see_other_sessions_is_never_healthy() -> None:
    blind = SessionVisibility("shop_jobs", sees_all=False, hidden=3, hidden_holding_xmin=1,
                              oldest_hidden_xmin_age_xids=812)  # fmt: skip
    report = diagnose(_facts(sessions=blind), DEFAULT)
    [finding] = report.findings
    assert not report.healthy and finding.code == "CANNOT_SEE_SESSIONS"
    assert finding.severity is Severity.WARNING
    assert "role shop_jobs cannot see other roles' sessions" in finding.summary
    assert "3 session(s)" in finding.summary and "812 transactions old" in finding.summary
    assert finding.remedy.startswith("GRANT pg_read_all_stats TO shop_jobs")
    assert finding.evidence == {
        "role": "shop_jobs",
        "hidden_sessions": 3,
        "hidden_holding_xmin": 1,
        "oldest_hidden_xmin_age_xids": 812,
    }
    seeing = SessionVisibility("shop_jobs", sees_all=True)
    assert diagnose(_facts(sessions=seeing), DEFAULT).healthy


def test_a_prepared_transaction_is_named_with_its_gid_and_how_to_end_it() -> None:
    report = diagnose(
        _facts(prepared=[PreparedHolder("tx-42", "app", 900.0, 1234)]),
        DEFAULT,
    )
    [finding] = report.findings
    assert finding.code == "XMIN_PREPARED_TRANSACTION"
    assert finding.severity is Severity.CRITICAL
    assert "ROLLBACK PREPARED 'tx-42'" in finding.remedy
    assert finding.line().startswith("XMIN_PREPARED_TRANSACTION  prepared transaction 'tx-42'")


def test_a_slot_holding_xmin_is_named_before_an_inactive_one() -> None:
    logical = SlotHolder("cdc", "logical", "app", False, None, 5000, 1 << 30)
    report = diagnose(_facts(slots=[logical]), DEFAULT)
    [finding] = report.findings
    assert finding.code == "XMIN_REPLICATION_SLOT"
    assert "5000 transactions old" in finding.summary
    assert "pg_drop_replication_slot('cdc')" in finding.remedy
    active = SlotHolder("standby", "physical", "", True, None, None, 0)
    assert diagnose(_facts(slots=[active]), DEFAULT).healthy


def test_dead_tuples_under_either_threshold_are_not_named() -> None:
    few = TableFacts("drover_jobs", 10, 9_000, 1 << 20, None, 0)
    diluted = TableFacts("drover_jobs", 1_000_000, 20_000, 1 << 20, None, 0)
    assert diagnose(_facts(tables=[few, diluted]), DEFAULT).healthy


def test_dead_tuples_behind_a_holder_point_at_the_holder() -> None:
    table = TableFacts("drover_jobs", 1_000, 50_000, 1 << 24, None, 0)
    holder = BackendHolder(7, "etl", "idle in transaction", "client backend", "u", 600, None, 99)
    alone = diagnose(_facts(tables=[table]), DEFAULT).findings[0]
    assert "VACUUM drover_jobs" in alone.remedy
    report = diagnose(_facts(tables=[table], backends=[holder]), DEFAULT)
    assert report.codes() == ["XMIN_IDLE_IN_TRANSACTION", "DEAD_TUPLES"]
    assert "xmin holders" in report.findings[1].remedy


def test_every_finding_is_one_line() -> None:
    holder = BackendHolder(7, "etl", "idle in transaction", "client backend", "u", 600, None, 99)
    report = diagnose(
        HealthFacts(schema_current=3, schema_latest=15, backends=[holder]),
        DEFAULT,
    )
    assert report.codes() == ["SCHEMA_BEHIND", "XMIN_IDLE_IN_TRANSACTION"]
    assert all("\n" not in f.line() and " — " in f.line() for f in report.findings)


def test_thresholds_take_timedelta_or_seconds() -> None:
    t = drover.HealthThresholds(xmin_age=timedelta(minutes=2), lease_grace=30)
    assert t.xmin_age == timedelta(minutes=2)
    assert t.lease_grace == timedelta(seconds=30)
    assert t.unserved_grace == timedelta(minutes=1)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("xmin_age", -1),
        ("xmin_age", "5m"),
        ("lease_grace", float("nan")),
        ("dead_tuples_min", -1),
        ("dead_tuples_min", True),
        ("dead_tuples_ratio", 1.5),
    ],
)
def test_bad_thresholds_are_refused_by_name(field: str, value: object) -> None:
    with pytest.raises(drover.ConfigError, match=field):
        drover.HealthThresholds(**{field: value})  # type: ignore[arg-type]
