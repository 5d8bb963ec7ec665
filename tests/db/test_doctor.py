"""The queue doctor against real conditions: each one is created for real and must be named.

The embedded server is shared by the tests of one xdist worker, so every
assertion looks for the finding this test caused (by pid, slot name, queue
or table), never for a globally healthy report; and every holder of the
horizon is released in ``finally`` so it cannot pin vacuum for later tests.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import drover
from drover.health import HealthFinding, Severity

Conn = psycopg.Connection[tuple[Any, ...]]
MakeClient = Callable[..., drover.Client]
Poll = Callable[..., Any]

NOW = drover.HealthThresholds(xmin_age=0, lease_grace=0, unserved_grace=0)
"""Thresholds that name a condition as soon as it exists: no test waits for an age."""


@pytest.fixture
def inspector(db_url: str) -> Iterator[drover.Inspector]:
    with drover.Inspector(db_url) as i:
        yield i


def _with(report: drover.HealthReport, code: str, **evidence: object) -> list[HealthFinding]:
    return [
        f
        for f in report.findings
        if f.code == code and all(f.evidence.get(k) == v for k, v in evidence.items())
    ]


def _named(
    inspector: drover.Inspector, thresholds: drover.HealthThresholds, code: str, **evidence: object
) -> drover.HealthReport | None:
    report = inspector.health(thresholds)
    return report if _with(report, code, **evidence) else None


def _put(conn: Conn, queue: str, state: str = "available", *, ago: float = 120.0) -> int:
    row = conn.execute(
        "INSERT INTO drover_jobs (kind, queue, args, state, scheduled_at, leased_until, attempt) "
        "VALUES ('doctor_job', %(q)s, '{}', %(s)s::drover_job_state, "
        "  now() - make_interval(secs => %(ago)s), "
        "  CASE WHEN %(s)s = 'running' THEN now() - make_interval(secs => %(ago)s) END, "
        "  CASE WHEN %(s)s = 'running' THEN 1 ELSE 0 END) RETURNING id",
        {"q": queue, "s": state, "ago": ago},
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_an_open_transaction_is_named_with_pid_application_state_and_age(
    db_url: str, inspector: drover.Inspector
) -> None:
    app = f"doctor-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(db_url, application_name=app) as holder:
        holder.execute("SELECT txid_current()")  # an xid of its own: held until the end
        pid = holder.info.backend_pid
        report = inspector.health(NOW)
        holder.rollback()
    [finding] = _with(report, "XMIN_IDLE_IN_TRANSACTION", pid=pid)
    assert finding.severity is Severity.CRITICAL
    assert finding.evidence["application"] == app
    assert finding.evidence["state"] == "idle in transaction"
    assert finding.evidence["xact_age_seconds"] >= 0
    assert f"pid {pid} ({app})" in finding.summary
    assert f"pg_terminate_backend({pid})" in finding.remedy
    assert not report.healthy
    # Released, it is no longer named.
    assert not _with(inspector.health(NOW), "XMIN_IDLE_IN_TRANSACTION", pid=pid)


def test_a_young_transaction_is_under_the_age_threshold(
    db_url: str, inspector: drover.Inspector
) -> None:
    with psycopg.connect(db_url) as holder:
        holder.execute("SELECT txid_current()")
        pid = holder.info.backend_pid
        report = inspector.health(drover.HealthThresholds(xmin_age=timedelta(hours=1)))
        holder.rollback()
    assert not [f for f in report.findings if f.evidence.get("pid") == pid]


def test_a_long_query_is_named(db_url: str, inspector: drover.Inspector, poll: Poll) -> None:
    app = f"doctor-{uuid.uuid4().hex[:8]}"
    runner = psycopg.connect(db_url, application_name=app, autocommit=True)
    pid = runner.info.backend_pid
    finished = threading.Event()

    def long_query() -> None:
        try:
            runner.execute("SELECT pg_sleep(60)")
        except psycopg.errors.QueryCanceled:
            pass
        finally:
            finished.set()

    thread = threading.Thread(target=long_query)
    thread.start()
    try:
        report = poll(
            lambda: _named(inspector, NOW, "XMIN_LONG_QUERY", pid=pid),
            message="the long query is named",
        )
    finally:
        with psycopg.connect(db_url, autocommit=True) as admin:

            def cancelled() -> bool:
                # Cancel until it ends: a cancel sent before the query began is lost.
                admin.execute("SELECT pg_cancel_backend(%s)", (pid,))
                return finished.wait(0.05)

            poll(cancelled, timeout=30, message="the long query ends")
        thread.join()
        runner.close()
    [finding] = _with(report, "XMIN_LONG_QUERY", pid=pid)
    assert finding.evidence["state"] == "active"
    assert finding.evidence["application"] == app
    assert f"pg_cancel_backend({pid})" in finding.remedy


def test_an_inactive_replication_slot_is_named(db_url: str, inspector: drover.Inspector) -> None:
    # A physical slot reserving WAL is what this server can create for real; a slot
    # holding xmin needs a standby with hot_standby_feedback or wal_level=logical
    # (see tests/unit/test_health.py for that rule).
    slot = f"doctor_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(db_url, autocommit=True) as admin:
        admin.execute("SELECT pg_create_physical_replication_slot(%s, true)", (slot,))
        try:
            report = inspector.health(NOW)
        finally:
            admin.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    [finding] = _with(report, "REPLICATION_SLOT_INACTIVE", slot=slot)
    assert finding.evidence["active"] is False
    assert finding.evidence["slot_type"] == "physical"
    assert f"pg_drop_replication_slot('{slot}')" in finding.remedy
    assert not _with(inspector.health(NOW), "REPLICATION_SLOT_INACTIVE", slot=slot)


def test_dead_tuples_of_drover_jobs_are_named(
    db_url: str, conn: Conn, inspector: drover.Inspector, poll: Poll
) -> None:
    conn.execute("ALTER TABLE drover_jobs SET (autovacuum_enabled = off)")
    conn.execute(
        "INSERT INTO drover_jobs (kind, queue, args) "
        "SELECT 'doctor_job', 'dead_tuples', '{}' FROM generate_series(1, 500)"
    )
    conn.execute("DELETE FROM drover_jobs WHERE queue = 'dead_tuples'")
    conn.execute("SELECT pg_stat_force_next_flush()")
    thresholds = drover.HealthThresholds(dead_tuples_min=400, dead_tuples_ratio=0.5)
    report = poll(
        lambda: _named(inspector, thresholds, "DEAD_TUPLES", table="drover_jobs"),
        message="the deleted rows reach the statistics",
    )
    [finding] = _with(report, "DEAD_TUPLES", table="drover_jobs")
    assert finding.evidence["dead_tuples"] >= 500
    assert "VACUUM drover_jobs" in finding.remedy
    conn.execute("VACUUM drover_jobs")
    conn.execute("SELECT pg_stat_force_next_flush()")
    poll(
        lambda: not _with(inspector.health(thresholds), "DEAD_TUPLES", table="drover_jobs"),
        message="vacuum clears the finding",
    )


def test_a_running_job_with_an_expired_lease_is_named(
    conn: Conn, inspector: drover.Inspector
) -> None:
    lost = _put(conn, "leases", "running", ago=120)
    _put(conn, "fresh", "running", ago=-3600)  # its lease runs another hour
    report = inspector.health(drover.HealthThresholds(lease_grace=60))
    [finding] = _with(report, "LEASE_EXPIRED", queue="leases")
    assert finding.evidence["sample_ids"] == [lost]
    assert finding.evidence["count"] == 1
    assert finding.evidence["oldest_expired_seconds"] >= 120
    assert not _with(report, "LEASE_EXPIRED", queue="fresh")
    # Within the grace (the rescuer has not had its turn yet) it is not named.
    assert not _with(inspector.health(drover.HealthThresholds(lease_grace=600)), "LEASE_EXPIRED")


def test_a_queue_whose_worker_stopped_is_named(
    conn: Conn, inspector: drover.Inspector, make_client: MakeClient, poll: Poll
) -> None:
    client = make_client(queues={"mail": 1})
    client.start()
    poll(lambda: inspector.workers(), message="the client registers")
    _put(conn, "mail", "scheduled", ago=-3600)  # not due: nothing to claim yet
    assert not _with(inspector.health(NOW), "QUEUE_UNSERVED", queue="mail")
    client.stop(timeout=10)
    assert not inspector.workers()
    _put(conn, "mail", ago=120)
    _put(conn, "paused_one", ago=120)
    inspector.pause_queue("paused_one")
    report = inspector.health(drover.HealthThresholds(unserved_grace=60))
    [finding] = _with(report, "QUEUE_UNSERVED", queue="mail")
    assert finding.evidence["waiting"] == 1
    assert finding.evidence["oldest_age_seconds"] >= 120
    assert "--queue mail" in finding.remedy
    assert not _with(report, "QUEUE_UNSERVED", queue="paused_one")  # paused on purpose


def test_a_live_worker_on_the_queue_serves_it(conn: Conn, inspector: drover.Inspector) -> None:
    _put(conn, "served", ago=120)
    conn.execute(
        "INSERT INTO drover_clients (id, client_id, host, pid, version, queues, concurrency, "
        "  expires_at) VALUES ('x', 'abc123', 'h', 1, 'v', ARRAY['served'], 1, "
        "  now() + interval '1 minute')"
    )
    assert not _with(inspector.health(NOW), "QUEUE_UNSERVED", queue="served")
    conn.execute("UPDATE drover_clients SET expires_at = now() - interval '1 second'")
    assert _with(inspector.health(NOW), "QUEUE_UNSERVED", queue="served")


def test_periodic_jobs_without_a_leader_are_named(
    db_url: str, conn: Conn, inspector: drover.Inspector
) -> None:
    conn.execute(
        "INSERT INTO drover_periodic_ticks (id, schedule, timezone, kind, queue, fired_through, "
        "  next_fire, defined_by) VALUES ('nightly', '0 3 * * *', 'UTC', 'k', 'default', now(), "
        "  now() - interval '10 minutes', 'abc123')"
    )
    [finding] = _with(inspector.health(NOW), "PERIODIC_NO_LEADER")
    assert finding.evidence["entries"] == 1
    assert finding.evidence["overdue_seconds"] >= 600
    with psycopg.connect(db_url, autocommit=True) as leader:
        row = leader.execute(
            "SELECT pg_try_advisory_lock(1685221238, "
            "('drover_periodic_ticks'::regclass::oid::bigint % 2147483647)::integer)"
        ).fetchone()
        assert row is not None and row[0]
        assert not _with(inspector.health(NOW), "PERIODIC_NO_LEADER")


def test_a_schema_behind_the_library_is_named(conn: Conn, inspector: drover.Inspector) -> None:
    latest = drover.migration_status(conn).applied[-1].version
    conn.execute("DELETE FROM drover_schema_version WHERE version = %s", (latest,))
    report = inspector.health()
    [finding] = _with(report, "SCHEMA_BEHIND")
    assert finding.evidence == {"current": latest - 1, "latest": latest}
    assert report.findings[0].severity is Severity.CRITICAL


def test_a_database_without_the_schema_is_named(empty_db_url: str) -> None:
    with drover.Inspector(empty_db_url) as inspector:
        report = inspector.health()
    assert "SCHEMA_MISSING" in report.codes()


def test_thresholds_must_be_a_health_thresholds(inspector: drover.Inspector) -> None:
    with pytest.raises(drover.InvalidArgument, match="HealthThresholds"):
        inspector.health({"xmin_age": 1})  # type: ignore[arg-type]


def test_the_doctor_does_not_name_its_own_session(inspector: drover.Inspector) -> None:
    # Its own statement is an active query holding a snapshot; with every age
    # threshold at zero it would be named if it were not left out.
    assert not _with(inspector.health(NOW), "XMIN_LONG_QUERY")


def _slow_client(conn: Conn, p99: float) -> None:
    # A live client's row as its refresh writes it (ADR 0060): the rule under test
    # reads these columns, whatever made the claims slow.
    conn.execute(
        "INSERT INTO drover_clients (id, client_id, host, pid, version, queues, concurrency, "
        "expires_at, claims, claim_p50_seconds, claim_p99_seconds, claim_max_seconds, "
        "walk_max_seconds) VALUES ('slow', 'a1b2c3', 'w1', 4242, '9.9', ARRAY['default'], 4, "
        "now() + interval '1 minute', 800, 0.003, %s, %s, NULL)",
        (p99, p99),
    )


def test_slow_claims_name_the_session_pinning_the_horizon(
    db_url: str, conn: Conn, inspector: drover.Inspector
) -> None:
    _slow_client(conn, 0.8)
    app = f"doctor-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(db_url, application_name=app) as holder:
        holder.execute("SELECT txid_current()")
        pid = holder.info.backend_pid
        report = inspector.health(NOW)
        holder.rollback()
    [finding] = _with(report, "CLAIMS_SLOWED")
    assert finding.severity is Severity.WARNING
    assert f"pinned by pid {pid} ({app}), idle in transaction" in finding.summary
    assert "claim p99 of up to 800 ms, over 250 ms" in finding.summary
    assert f"pid {pid} ({app}), idle in transaction" in finding.evidence["pinned_by"]
    [client] = finding.evidence["clients"]
    assert client["client"] == "a1b2c3 (pid 4242 on w1)" and client["claims"] == 800
    assert client["walk_max_seconds"] is None
    # Released, the claims are still slow, but the finding no longer blames a pin.
    [alone] = _with(inspector.health(NOW), "CLAIMS_SLOWED")
    assert "with no pinned horizon named" in alone.summary
    assert alone.evidence["pinned_by"] == []
    # Under the threshold, nothing is named.
    relaxed = drover.HealthThresholds(xmin_age=0, claim_p99=1)
    assert not _with(inspector.health(relaxed), "CLAIMS_SLOWED")


def test_an_expired_client_s_slow_claims_are_not_named(
    conn: Conn, inspector: drover.Inspector
) -> None:
    _slow_client(conn, 0.8)
    conn.execute("UPDATE drover_clients SET expires_at = now() - interval '1 second'")
    assert not _with(inspector.health(NOW), "CLAIMS_SLOWED")
