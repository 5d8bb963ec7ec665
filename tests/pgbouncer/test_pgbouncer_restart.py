"""PgBouncer killed and started again on the same port in the middle of a drain: nothing is
lost, and a job runs again only after a lease expiry the job's history records (ADR 0040)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from bouncer import Bouncer, require_pgbouncer

import drover

Conn = psycopg.Connection[tuple[Any, ...]]
Poll = Callable[..., Any]

JOBS = 300


class Step(drover.JobArgs, kind="pgb_step"):
    n: int


@pytest.fixture
def own_bouncer(pg_server: str) -> Iterator[Bouncer]:
    """A pgbouncer of this test's own: it is killed and restarted."""
    b = Bouncer(require_pgbouncer(), pg_server)
    b.start()
    yield b
    b.stop()


@pytest.mark.slow
def test_pgbouncer_restart_mid_drain_loses_nothing(
    own_bouncer: Bouncer, db_url: str, conn: Conn, poll: Poll
) -> None:
    runs: list[tuple[int, int]] = []
    lock = threading.Lock()
    hold = threading.Event()  # set: handlers wait at the gate
    gate = threading.Event()
    waiting: list[int] = []
    workers = drover.Workers()

    @workers.register
    def step(job: drover.Job[Step]) -> None:
        if hold.is_set():
            with lock:
                waiting.append(job.id)
            gate.wait(30)
        with lock:
            runs.append((job.id, job.attempt))

    url = own_bouncer.url(str(psycopg.conninfo.conninfo_to_dict(db_url)["dbname"]))
    client = drover.Client(
        url,
        drover.Config(
            workers=workers,
            concurrency=4,
            poll_interval=0.05,
            # Short leases, so a claim whose reply the kill swallowed is
            # rescued within the test (the history records it).
            lease_duration=2.0,
            heartbeat_interval=0.3,
            rescue_interval=0.5,
        ),
    )
    try:
        client.insert_many([Step(n=i) for i in range(JOBS)])
        client.start()
        poll(lambda: len(runs) >= JOBS // 3, timeout=30, message="a third of the jobs ran")
        hold.set()
        poll(lambda: len(waiting) >= 4, message="every pool thread holds a claimed job")
        own_bouncer.kill()
        ran_before = len(runs)
        # The held handlers end now: their outcomes wait while pgbouncer is down,
        # along with the heartbeat, the claims and the registry.
        hold.clear()
        gate.set()
        poll(lambda: len(runs) >= ran_before + 4, message="the held jobs end meanwhile")
        own_bouncer.start()

        def completed() -> int:
            row = conn.execute(
                "SELECT count(*) FROM drover_jobs WHERE state = 'completed'"
            ).fetchone()
            return 0 if row is None else int(row[0])

        poll(lambda: completed() == JOBS, timeout=60, message="every job completed")
    finally:
        if client.running:
            client.stop(timeout=10)
        client.close()

    rows = conn.execute("SELECT id, state::text, attempt, errors FROM drover_jobs").fetchall()
    assert len(rows) == JOBS
    assert {r[1] for r in rows} == {"completed"}
    assert len(runs) == len(set(runs)), "a claim was run twice"
    per_job: dict[int, int] = {}
    for job_id, _attempt in runs:
        per_job[job_id] = per_job.get(job_id, 0) + 1
    for job_id, _state, attempt, errors in rows:
        ran = per_job.get(job_id, 0)
        assert ran >= 1, f"job {job_id} completed without running"
        # A second run only after a lease expiry recorded in the job's errors.
        assert ran <= attempt, (job_id, ran, attempt)
        explained = [e for e in errors if "lease expired" in str(e.get("error", ""))]
        assert ran - 1 <= len(explained), (job_id, ran, errors)
