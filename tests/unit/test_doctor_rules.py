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
    ClientClaims,
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
    assert t.claim_p99 == timedelta(milliseconds=250)
    assert drover.HealthThresholds(claim_p99=0.5).claim_p99 == timedelta(milliseconds=500)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("xmin_age", -1),
        ("xmin_age", "5m"),
        ("lease_grace", float("nan")),
        ("dead_tuples_min", -1),
        ("dead_tuples_min", True),
        ("dead_tuples_ratio", 1.5),
        ("claim_p99", -0.1),
        ("claim_p99", "250ms"),
        ("claim_p99", float("inf")),
    ],
)
def test_bad_thresholds_are_refused_by_name(field: str, value: object) -> None:
    with pytest.raises(drover.ConfigError, match=field):
        drover.HealthThresholds(**{field: value})  # type: ignore[arg-type]


def _claims(
    p99: float, walk: float | None = None, client: str = "ab12cd (pid 7 on w1)"
) -> ClientClaims:
    return ClientClaims(client, 900, 0.002, p99, max(p99, walk or 0.0), walk)


def test_claims_under_the_threshold_are_not_named() -> None:
    assert diagnose(_facts(claims=[_claims(0.2, walk=0.24)]), DEFAULT).healthy


def test_slow_claims_behind_a_pinned_horizon_name_the_pin_as_the_likely_cause() -> None:
    holder = BackendHolder(7, "etl", "idle in transaction", "client backend", "u", 600, None, 99)
    table = TableFacts("drover_jobs", 1_000, 50_000, 1 << 24, None, 0)
    slow, fast = _claims(0.9, walk=3.0), _claims(0.01, client="ef34ab (pid 8 on w2)")
    report = diagnose(_facts(claims=[slow, fast], backends=[holder], tables=[table]), DEFAULT)
    assert report.codes() == ["XMIN_IDLE_IN_TRANSACTION", "DEAD_TUPLES", "CLAIMS_SLOWED"]
    finding = report.findings[2]
    assert finding.severity is Severity.WARNING
    assert "1 of 2 live client(s) report a claim p99 of up to 900 ms" in finding.summary
    assert "walks up to 3000 ms" in finding.summary
    assert "the MVCC horizon is pinned by pid 7 (etl), idle in transaction" in finding.summary
    assert "drover_jobs has 50000 dead tuples" in finding.summary
    assert "release the xmin holder" in finding.remedy
    assert finding.evidence["pinned_by"] == ["pid 7 (etl), idle in transaction"]
    assert [c["client"] for c in finding.evidence["clients"]] == ["ab12cd (pid 7 on w1)"]
    assert finding.evidence["threshold_seconds"] == 0.25


def test_a_slow_walk_alone_is_named_and_a_slot_or_prepared_transaction_is_a_pin() -> None:
    slot = SlotHolder("standby", "physical", "", True, 1_000, None, None)
    prepared = PreparedHolder("tx-1", "u", 900, 50)
    report = diagnose(
        _facts(claims=[_claims(0.01, walk=0.4)], slots=[slot], prepared=[prepared]), DEFAULT
    )
    [finding] = [f for f in report.findings if f.code == "CLAIMS_SLOWED"]
    assert finding.evidence["pinned_by"] == [
        "replication slot standby",
        "prepared transaction 'tx-1'",
    ]


def test_slow_claims_without_a_pin_say_so_and_point_at_vacuum() -> None:
    table = TableFacts("drover_jobs", 1_000, 5_000, 1 << 24, None, 0)
    report = diagnose(_facts(claims=[_claims(0.3)], tables=[table]), DEFAULT)
    [finding] = report.findings
    assert finding.code == "CLAIMS_SLOWED"
    assert "with no pinned horizon named" in finding.summary
    assert "5000 dead tuples, never vacuumed" in finding.summary
    assert finding.remedy.startswith("VACUUM drover_jobs")
    assert finding.evidence["pinned_by"] == []
    hidden = SessionVisibility("shop", sees_all=False, hidden=2, hidden_holding_xmin=1)
    report = diagnose(_facts(claims=[_claims(0.3)], sessions=hidden), DEFAULT)
    [slowed] = [f for f in report.findings if f.code == "CLAIMS_SLOWED"]
    assert "1 session(s) hidden from role shop hold an xmin" in slowed.summary
    assert diagnose(_facts(claims=[_claims(0.3)]), drover.HealthThresholds(claim_p99=1)).healthy
