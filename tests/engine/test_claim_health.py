"""Claim health over time (ADR 0060) against real PostgreSQL.

A started client's claim sessions time their claims, its registry refresh
writes the window into its row, and once a minute one client writes a
health sample. No sleeps: the registry is driven by ``run_once`` and a
started client is polled with a deadline.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from jobdb import Conn, MakeClient, Poll, wiring

import drover
from drover._db.store import Store
from drover._runtime.registry import Registry


class _Tick(drover.JobArgs, kind="claim_health_tick"):
    n: int


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = Store.open(db_url, who="test", max_size=2)
    yield s
    s.close()


@pytest.fixture
def inspector(db_url: str) -> Iterator[drover.Inspector]:
    with drover.Inspector(db_url) as i:
        yield i


def _plant(conn: Conn, name: str, *, claims: int, p50: float, p99: float, walk: float) -> None:
    conn.execute(
        "INSERT INTO drover_clients (id, client_id, host, pid, version, queues, concurrency, "
        "expires_at, claims, claim_p50_seconds, claim_p99_seconds, claim_max_seconds, "
        "walk_max_seconds) VALUES (%s, %s, 'elsewhere', 4242, '9.9', ARRAY['default'], 4, "
        "now() + interval '1 minute', %s, %s, %s, %s, %s)",
        (f"planted-{name}", name, claims, p50, p99, max(p99, walk), walk),
    )


def _samples(conn: Conn) -> list[tuple[object, ...]]:
    return conn.execute(
        "SELECT sampled_at, claims, claim_p50_seconds, claim_p99_seconds, walk_max_seconds, "
        "dead_tuples FROM drover_health_samples ORDER BY sampled_at"
    ).fetchall()


def _minute(conn: Conn) -> datetime:
    row = conn.execute("SELECT date_trunc('minute', now())").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def test_a_started_client_writes_its_claims_window_into_its_row(
    make_client: MakeClient, inspector: drover.Inspector, poll: Poll
) -> None:
    workers = drover.Workers()
    done: list[int] = []

    @workers.register
    def tick(job: drover.Job[_Tick]) -> None:
        done.append(job.args.n)

    client = make_client(
        workers=workers, lease_duration=3, heartbeat_interval=0.2, poll_interval=0.05
    )
    client.start()
    client.insert_many([_Tick(n=i) for i in range(20)])
    poll(lambda: len(done) == 20, message="the jobs run")
    [row] = poll(
        lambda: [w for w in inspector.workers() if w.claims],
        message="a refresh writes the claims of its window",
    )
    assert row.claims is not None and row.claims > 0
    assert row.claim_p50_seconds is not None and row.claim_p99_seconds is not None
    assert row.claim_max_seconds is not None
    assert 0 < row.claim_p50_seconds <= row.claim_p99_seconds <= row.claim_max_seconds < 10
    # Its first claim of the queue walked (ADR 0059); walks are timed on their own.
    client.stop(timeout=5)


def test_the_store_sums_its_claim_sessions_and_each_take_starts_a_new_window(
    store: Store,
) -> None:
    sessions = [store.kernel.claim_session() for _ in range(2)]
    try:
        for session in sessions:
            for _ in range(3):
                session.claim("default", 10, 30.0, "test")
        times = store.kernel.shared.times()
        assert times.claims == 6
        assert times.walks >= 2  # each session's first claim of the queue walks
        assert 0 < times.walk_max_seconds <= times.max_seconds
        assert store.kernel.shared.times().claims == 0
    finally:
        for session in sessions:
            session.release()


def test_the_sampler_writes_one_row_a_minute_and_never_two(
    store: Store, conn: Conn, inspector: drover.Inspector
) -> None:
    _plant(conn, "slow01", claims=100, p50=0.004, p99=0.3, walk=1.5)
    _plant(conn, "fast01", claims=300, p50=0.002, p99=0.01, walk=0.02)
    conn.execute(
        "INSERT INTO drover_health_samples (sampled_at, claims) "
        "VALUES (now() - interval '8 days', 0), (now() - interval '2 days', 0)"
    )
    registry = Registry(wiring(store, heartbeat_interval=2, lease_duration=10))
    for _ in range(3):  # twice in one minute: retried if a minute boundary fell between
        before = _minute(conn)
        registry.run_once()
        registry.run_once()
        if _minute(conn) == before:
            break
        conn.execute("DELETE FROM drover_health_samples WHERE sampled_at >= %s", (before,))
    rows = _samples(conn)
    assert len(rows) == 2, rows  # this minute's, and the one two days old
    kept = rows[0][0]  # two days old; the writer deleted the one eight days old
    assert isinstance(kept, datetime)
    assert datetime.now(UTC) - timedelta(days=3) < kept < datetime.now(UTC) - timedelta(days=1)
    at, claims, p50, p99, walk, dead = rows[1]
    assert at == before
    assert claims == 400  # the planted clients'; the registry's own claimed nothing
    assert p50 == pytest.approx((100 * 0.004 + 300 * 0.002) / 400)
    assert (p99, walk) == (0.3, 1.5)
    assert dead is not None
    assert registry.sample() is False  # another call in the minute writes nothing
    [sample] = inspector.health_samples(datetime.now(UTC) - timedelta(hours=1))
    assert sample.sampled_at == before and sample.claims == 400
    assert sample.claim_p99_seconds == 0.3 and sample.walk_max_seconds == 1.5
    assert len(inspector.health_samples(datetime.now(UTC) - timedelta(days=3))) == 2


def test_health_samples_need_an_aware_datetime(inspector: drover.Inspector) -> None:
    with pytest.raises(drover.InvalidArgument, match="timezone-aware"):
        inspector.health_samples(datetime(2026, 1, 1))
    with pytest.raises(drover.InvalidArgument, match="timezone-aware"):
        inspector.health_samples(3600)  # type: ignore[arg-type]
