"""Inspector reads and writes behind the status page: kind filter and paging, lease holder,
throughput per minute, and redriving every dead job of a kind."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from jobdb import db_now, table_snapshot

import drover
from drover._db.claims import job_claim

Conn = psycopg.Connection[tuple[Any, ...]]
MakeClient = Callable[..., drover.Client]


@pytest.fixture
def inspector(db_url: str) -> Iterator[drover.Inspector]:
    with drover.Inspector(db_url) as i:
        yield i


def _plant(
    conn: Conn,
    kind: str,
    state: str,
    *,
    queue: str = "default",
    key: str | None = None,
    finished_ago: float = 0.0,
    errors_ago: list[float] | None = None,
) -> int:
    now = db_now(conn)
    errors = [
        {"attempt": i + 1, "at": (now - timedelta(seconds=ago)).isoformat(), "error": "E"}
        for i, ago in enumerate(errors_ago or [])
    ]
    row = conn.execute(
        "INSERT INTO drover_jobs (kind, queue, state, unique_key, errors, finalized_at, attempt) "
        "VALUES (%s, %s, %s::drover_job_state, %s, %s::jsonb, "
        "CASE WHEN %s IN ('completed', 'cancelled', 'dead') "
        "THEN now() - make_interval(secs => %s) END, 1) RETURNING id",
        (kind, queue, state, key, json.dumps(errors), state, finished_ago),
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_list_jobs_filters_by_kind_and_pages_by_id(inspector: drover.Inspector, conn: Conn) -> None:
    ids = [_plant(conn, "a" if i % 2 else "b", "dead") for i in range(9)]
    a_ids = sorted((i for n, i in enumerate(ids) if n % 2), reverse=True)
    first = inspector.list_jobs(state="dead", kind="a", limit=2)
    assert [r.id for r in first] == a_ids[:2]
    second = inspector.list_jobs(state="dead", kind="a", limit=2, before_id=first[-1].id)
    assert [r.id for r in second] == a_ids[2:4]
    assert inspector.list_jobs(kind="a", before_id=a_ids[-1]) == []
    with pytest.raises(drover.InvalidArgument, match="kind must not be empty"):
        inspector.list_jobs(kind="")
    with pytest.raises(drover.InvalidArgument, match="job id must be between"):
        inspector.list_jobs(before_id=0)


def test_lease_holder_names_the_claiming_worker(
    inspector: drover.Inspector, conn: Conn, make_client: MakeClient
) -> None:
    job_id = _plant(conn, "k", "available")
    assert inspector.lease_holder(job_id) is None
    (claimed,) = job_claim(conn, "default", 1, 60, "abc123 (pid 7 on host)")
    assert inspector.lease_holder(claimed.id) == "abc123 (pid 7 on host)"
    with pytest.raises(drover.NotFound):
        inspector.lease_holder(job_id + 100)


def test_a_started_client_writes_its_name_as_lease_holder(
    inspector: drover.Inspector, conn: Conn, make_client: MakeClient
) -> None:
    import threading

    release = threading.Event()
    entered = threading.Event()

    class Hold(drover.JobArgs, kind="lease_hold"):
        pass

    workers = drover.Workers()

    @workers.register(args=Hold)
    def hold(job: drover.Job[Hold]) -> None:
        entered.set()
        release.wait(10)

    client = make_client(workers=workers, poll_interval=0.05)
    client.start()
    try:
        job = client.insert(Hold())
        assert entered.wait(10)
        holder = inspector.lease_holder(job.id)
        assert holder is not None and holder.startswith(f"{client._id} (pid ")
    finally:
        release.set()


def test_throughput_counts_completed_failed_and_dead_per_minute(
    inspector: drover.Inspector, conn: Conn
) -> None:
    _plant(conn, "k", "completed", finished_ago=1)
    _plant(conn, "k", "completed", finished_ago=1)
    _plant(conn, "k", "completed", finished_ago=7200)  # outside the hour
    _plant(conn, "k", "dead", finished_ago=1, errors_ago=[130, 1])
    _plant(conn, "k", "retryable", errors_ago=[1])
    _plant(conn, "k", "cancelled", finished_ago=5000, errors_ago=[5000])  # long ago
    points = inspector.throughput(60)
    assert len(points) == 60
    assert [b.minute - a.minute for a, b in itertools.pairwise(points)] == [
        timedelta(minutes=1)
    ] * 59
    assert sum(p.completed for p in points) == 2
    assert sum(p.dead for p in points) == 1
    assert sum(p.failed for p in points) == 3
    latest = [p for p in points if p.completed or p.failed or p.dead]
    assert latest and latest[-1].minute >= points[-1].minute - timedelta(minutes=3)
    with pytest.raises(drover.InvalidArgument, match="minutes must be"):
        inspector.throughput(0)


def test_retry_dead_redrives_every_dead_job_of_a_kind_and_keeps_unique_keys(
    inspector: drover.Inspector, conn: Conn
) -> None:
    plain = [_plant(conn, "report", "dead") for _ in range(3)]
    other_kind = _plant(conn, "mail", "dead")
    other_queue = _plant(conn, "report", "dead", queue="q2")
    held = _plant(conn, "report", "dead", key="day:1")
    _plant(conn, "report", "available", key="day:1")  # holds the key: held stays dead
    older_twin = _plant(conn, "report", "dead", key="day:2")
    newer_twin = _plant(conn, "report", "dead", key="day:2")

    assert inspector.retry_dead("report", queue="default") == 4
    states: dict[int, str] = dict(
        conn.execute("SELECT id, state::text FROM drover_jobs").fetchall()
    )
    assert [states[i] for i in plain] == ["available"] * 3
    assert states[newer_twin] == "available" and states[older_twin] == "dead"
    assert states[held] == "dead"
    assert states[other_kind] == "dead" and states[other_queue] == "dead"
    assert inspector.retry_dead("report") == 1  # the other queue's
    before = table_snapshot(conn)
    assert inspector.retry_dead("nothing_dead") == 0
    assert table_snapshot(conn) == before
    with pytest.raises(drover.InvalidArgument, match="kind must not be empty"):
        inspector.retry_dead("")
