"""Workers, notifications, results and the periodic leader through a real PgBouncer in
transaction mode (ADR 0040)."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from jobdb import plugin_service

import drover
from drover._db.ticks import lock_holders

Conn = psycopg.Connection[tuple[Any, ...]]
MakeClient = Callable[..., drover.Client]
Poll = Callable[..., Any]


class Work(drover.JobArgs, kind="pgb_work", max_attempts=3):
    n: int
    fail_first: bool = False


class Slow(drover.JobArgs, kind="pgb_slow"):
    pass


class Beat(drover.JobArgs, kind="pgb_beat"):
    pass


def _work_workers(runs: Counter[int]) -> drover.Workers:
    workers = drover.Workers()
    lock = threading.Lock()

    @workers.register
    def work(job: drover.Job[Work]) -> int:
        with lock:
            runs[job.args.n] += 1
        if job.args.fail_first and job.attempt == 1:
            raise RuntimeError("first attempt fails")
        return job.args.n * 2

    return workers


class RetryNow:
    """A failed attempt is claimable again at once."""

    def next_retry(self, job: drover.JobRow) -> datetime:
        return datetime.now(UTC)


def _states(conn: Conn) -> dict[str, int]:
    rows = conn.execute("SELECT state::text, count(*) FROM drover_jobs GROUP BY 1").fetchall()
    return {str(s): int(n) for s, n in rows}


def test_workers_drain_with_retries_through_pgbouncer(
    make_pgb_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    runs: Counter[int] = Counter()
    client = make_pgb_client(
        workers=_work_workers(runs),
        poll_interval=0.05,
        concurrency=4,
        retry_policy=RetryNow(),
    )
    client.insert_many([Work(n=i, fail_first=i % 10 == 0) for i in range(200)])
    client.start()
    assert client._engine is not None and client._engine.listener is None  # no session: polls
    poll(lambda: _states(conn) == {"completed": 200}, timeout=60, message="all 200 completed")
    client.stop(timeout=10)
    assert runs == Counter({i: 2 if i % 10 == 0 else 1 for i in range(200)})
    retried = conn.execute(
        "SELECT count(*) FROM drover_jobs WHERE attempt = 2 AND jsonb_array_length(errors) = 1"
    ).fetchone()
    assert retried == (20,)


def test_heartbeat_renews_leases_through_pgbouncer(
    make_pgb_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    release = threading.Event()
    workers = drover.Workers()

    @workers.register
    def slow(job: drover.Job[Slow]) -> None:
        release.wait(30)

    client = make_pgb_client(
        workers=workers, poll_interval=0.05, lease_duration=1.0, heartbeat_interval=0.1
    )
    job = client.insert(Slow())
    client.start()

    def leased_until() -> Any:
        row = conn.execute(
            "SELECT leased_until FROM drover_jobs WHERE id = %s AND state = 'running'", (job.id,)
        ).fetchone()
        return None if row is None else row[0]

    first = poll(leased_until, message="the job is claimed")
    poll(lambda: (leased_until() or first) > first + timedelta(seconds=0.3), message="renewed")
    release.set()
    poll(lambda: _states(conn) == {"completed": 1}, message="the job completes")
    row = conn.execute("SELECT attempt FROM drover_jobs WHERE id = %s", (job.id,)).fetchone()
    assert row == (1,)  # never rescued: the renewals went through


def test_without_session_url_notifications_are_off_and_logged(
    make_pgb_client: MakeClient, conn: Conn, poll: Poll, caplog: pytest.LogCaptureFixture
) -> None:
    runs: Counter[int] = Counter()
    caplog.set_level(logging.INFO, logger="drover")
    client = make_pgb_client(workers=_work_workers(runs), poll_interval=0.05)
    client.start()
    assert client._engine is not None and client._engine.listener is None
    assert any(getattr(r, "event", None) == "pooler_without_sessions" for r in caplog.records)
    job = client.insert(Work(n=7))
    assert client.result(job, timeout=10) == 14  # polls: no LISTEN behind the pooler
    assert client._awaiter.listening.is_set() is False
    assert not client._awaiter.alive


def test_session_url_carries_listen_past_pgbouncer(
    make_pgb_client: MakeClient, db_url: str, conn: Conn
) -> None:
    runs: Counter[int] = Counter()
    # A poll interval no test waits out: only a notification can wake the fetcher.
    client = make_pgb_client(workers=_work_workers(runs), poll_interval=60, session_url=db_url)
    client.start()
    engine = client._engine
    assert engine is not None and engine.listener is not None
    assert engine.listener.listening.wait(10)
    job = client.insert(Work(n=3))
    assert client.result(job, timeout=10) == 6
    assert client._awaiter.listening.is_set()
    # The listener's session is direct: its backend is one PostgreSQL itself reports.
    listeners = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name = 'drover-listener' AND query ILIKE 'LISTEN%%'"
    ).fetchone()
    assert listeners is not None and listeners[0] >= 1


def _beat() -> drover.PeriodicJob:
    return drover.PeriodicJob(
        "beat", "@every 250ms", Beat(), drover.InsertOpts(queue="parked"), run_on_start=True
    )


def _ticker(client: drover.Client) -> Any:
    ticker = plugin_service(client, "periodic")
    assert ticker is not None
    return ticker


def _periodic() -> list[drover.Plugin]:
    return [drover.plugins.Periodic(jobs=[_beat()])]


def _lease(conn: Conn) -> tuple[Any, ...] | None:
    return conn.execute("SELECT holder, leased_until > now() FROM drover_periodic_lease").fetchone()


def test_periodic_leader_holds_a_lease_row_and_hands_it_over(
    make_pgb_client: MakeClient, conn: Conn, poll: Poll, pgb_url: str
) -> None:
    first = make_pgb_client(plugins=_periodic(), poll_interval=0.1)
    second = make_pgb_client(plugins=_periodic(), poll_interval=0.1)
    first.start()
    poll(lambda: _ticker(first).leading, message="the first client leads")
    second.start()
    assert _lease(conn) == (first._id, True)
    assert lock_holders(conn) == []  # no session lock left on a pooled server session
    poll(
        lambda: (
            conn.execute("SELECT count(*) FROM drover_jobs WHERE kind = 'pgb_beat'").fetchone()[0]  # type: ignore[index]
            >= 3
        ),
        message="ticks inserted by the lease holder",
    )
    assert not _ticker(second).leading
    first.stop(timeout=5)  # deletes the lease row: the other takes over on its next turn
    poll(lambda: _ticker(second).leading, message="the second client takes over")
    assert _lease(conn) == (second._id, True)
    with drover.Inspector(pgb_url) as inspector:
        listed = {p.id: p for p in inspector.periodic()}
        # The doctor sees the lease holder as the leader.
        assert "PERIODIC_NO_LEADER" not in inspector.health().codes()
    assert listed["beat"].leader is not None and second._id in listed["beat"].leader
    keys = [
        str(r[0])
        for r in conn.execute("SELECT unique_key FROM drover_jobs WHERE kind = 'pgb_beat'")
    ]
    assert len(keys) == len(set(keys)), "a fire time was inserted twice"


def test_an_expired_lease_is_taken_over_on_the_database_clock(
    make_pgb_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    # A holder that crashed: its row stays until leased_until passes.
    conn.execute(
        "INSERT INTO drover_periodic_lease (holder, leased_until) "
        "VALUES ('crashed', now() + interval '1.5 seconds')"
    )
    client = make_pgb_client(plugins=_periodic(), poll_interval=0.1)
    started = time.monotonic()
    client.start()
    poll(lambda: _ticker(client).leading, timeout=10, message="takes over after expiry")
    assert time.monotonic() - started >= 1.0, "took the lease before it expired"
    assert _lease(conn) == (client._id, True)


def test_the_hold_on_handed_back_jobs_works_through_pgbouncer_and_ends_with_its_client(
    make_pgb_client: MakeClient, db_url: str, poll: Poll
) -> None:
    """``drover worker``'s hold (ADR 0053) through a transaction pooler: its open transaction
    keeps one server session, and the pooler ends that transaction (releasing the locks) when
    the hold's client connection goes, as it does when the process exits."""
    from drover._db.store import Store

    inside = threading.Event()
    release = threading.Event()
    workers = drover.Workers()

    @workers.register
    def slow(job: drover.Job[Slow]) -> None:
        inside.set()
        release.wait(30)  # deaf to its context

    client = make_pgb_client(workers=workers, poll_interval=0.05, concurrency=1)
    hold = client._hold_hand_backs()
    rival = Store.open(db_url, who="the rival worker", max_size=2)

    def rival_claims() -> list[tuple[int, int]]:
        session = rival.kernel.claim_session()
        try:
            return [(r.id, r.attempt) for r in session.claim("default", 10, 60.0, "rival").rows]
        finally:
            session.release()

    try:
        client.start()
        job = client.insert(Slow())
        assert inside.wait(30)
        hold.open()
        assert hold.ready(30)
        with pytest.raises(drover.DrainIncomplete):
            client.stop(0.1)
        assert hold.held == [job.id]
        assert rival_claims() == []
        hold.close()
        claimed = poll(rival_claims, timeout=30, message="claimable once the hold's client left")
        assert claimed == [(job.id, 2)]
    finally:
        hold.close()
        release.set()
        rival.close()
