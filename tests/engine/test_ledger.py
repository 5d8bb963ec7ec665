"""The duplicate ledger (ADR 0037) with real clients and threads: a job run twice says why."""

from __future__ import annotations

import json
import os
import socket
import threading
from datetime import UTC, datetime
from typing import Any

import pytest
from clihelp import cli, ok
from jobdb import Conn, MakeClient, Poll, start_client
from werkzeug.test import Client as WebClient

import drover
from drover.web import make_app

SAFETY = 20.0


class Twice(drover.JobArgs, kind="ledger_twice"):
    pass


class RetryNow:
    """Retry policy: claimable again immediately."""

    def next_retry(self, job: drover.JobRow) -> datetime:
        return datetime.now(UTC)


class Runs:
    """A handler whose first attempt blocks until released, ignoring ``lease_lost``
    (a handler that does not cooperate), and whose later attempts complete at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.attempts: list[int] = []
        self.first_inside = threading.Event()
        self.release = threading.Event()
        self.first_returned = threading.Event()

    def handle(self, job: drover.Job[Twice]) -> None:
        with self.lock:
            self.attempts.append(job.attempt)
        if job.attempt == 1:
            self.first_inside.set()
            assert self.release.wait(SAFETY)
            self.first_returned.set()

    def workers(self) -> drover.Workers:
        registry = drover.Workers()
        registry.register(args=Twice)(self.handle)
        return registry


def _holder(client: drover.Client) -> str:
    return f"{client._id} (pid {os.getpid()} on {socket.gethostname()})"


def _engine(client: drover.Client) -> Any:
    engine = client._engine
    assert engine is not None
    return engine


def _sample(client: drover.Client, name: str, **labels: str) -> float:
    return client.metrics_registry.get_sample_value(name, labels) or 0.0


def _ledger(conn: Conn, job_id: int) -> list[dict[str, Any]]:
    found = conn.execute("SELECT ledger FROM drover_jobs WHERE id = %s", (job_id,)).fetchone()
    assert found is not None
    return list(found[0] or [])


def test_a_job_rescued_while_its_handler_runs_records_the_rescue_and_the_late_completion(
    make_client: MakeClient, poll: Poll, conn: Conn, db_url: str
) -> None:
    runs = Runs()
    first = start_client(
        make_client, runs.workers(), concurrency=1, lease_duration=1, rescue_interval=60
    )
    job = first.insert(Twice())
    assert runs.first_inside.wait(SAFETY)
    # The first worker's heartbeat stalls: its lease runs out while its handler still runs.
    _engine(first).heartbeat.stop()
    second = start_client(
        make_client,
        runs.workers(),
        concurrency=1,
        lease_duration=1,
        rescue_interval=0.1,
        retry_policy=RetryNow(),
    )
    poll(
        lambda: (
            conn.execute(
                "SELECT state::text, attempt FROM drover_jobs WHERE id = %s", (job.id,)
            ).fetchone()
            == ("completed", 2)
        ),
        timeout=SAFETY,
        message="rescued by the second client and run again",
    )
    assert not runs.first_returned.is_set()
    assert [e["event"] for e in _ledger(conn, job.id)] == ["rescued"]

    runs.release.set()  # the first attempt ends now, and its worker writes its completion
    poll(lambda: len(_ledger(conn, job.id)) == 2, message="the late completion recorded")
    assert runs.attempts == [1, 2]

    with drover.Inspector(db_url) as inspector:
        row = inspector.get_job(job.id)
    assert (row.state, row.attempt) == (drover.JobState.COMPLETED, 2)
    rescued, stale = row.ledger
    assert (rescued.event, rescued.attempt, rescued.to) == ("rescued", 1, "retryable")
    assert rescued.worker == _holder(first), "rescued from the worker that held the lease"
    assert rescued.by == _holder(second)
    assert rescued.rerun
    assert "lease expired, rescued" in rescued.describe()
    assert f"from worker {_holder(first)}" in rescued.describe()
    assert (stale.event, stale.attempt, stale.worker) == ("stale_write", 1, _holder(first))
    assert (stale.write, stale.refused, stale.state, stale.state_attempt) == (
        "complete",
        "not running",
        "completed",
        2,
    )
    assert not stale.rerun
    # The database clock, in order.
    assert rescued.at is not None and stale.at is not None
    assert rescued.at <= stale.at
    now = conn.execute("SELECT now()").fetchone()
    assert now is not None and stale.at <= now[0]

    assert _sample(second, "drover_reruns_total", reason="lease_expired") == 1.0
    assert _sample(first, "drover_reruns_total", reason="lease_expired") == 0.0
    assert (
        _sample(first, "drover_stale_writes_refused_total", reason="not running", write="complete")
        == 1.0
    )
    assert _sample(first, "drover_writes_refused_total", reason="not running") == 1.0

    # `drover jobs get` shows it, in text and in JSON.
    shown = ok(cli(db_url, "jobs", "get", str(job.id)))
    assert "ledger (2):" in shown
    assert f"attempt 1: lease expired, rescued by {_holder(second)}" in shown
    assert f"stale complete write from worker {_holder(first)} refused (not running)" in shown
    as_json = json.loads(ok(cli(db_url, "--json", "jobs", "get", str(job.id))))
    assert [e["event"] for e in as_json["ledger"]] == ["rescued", "stale_write"]
    assert as_json["ledger"][0]["worker"] == _holder(first)

    # And the status page's job page.
    with drover.Inspector(db_url) as inspector:
        page = WebClient(make_app(inspector)).get(
            f"/jobs/{job.id}", headers={"Host": "status.example"}
        )
    assert page.status_code == 200
    assert "Duplicate ledger (2)" in page.text
    assert "lease expired, rescued" in page.text
    assert "stale complete write" in page.text

    second.stop(timeout=5)
    first.stop(timeout=5)


def test_a_job_that_ran_once_has_an_empty_ledger(
    make_client: MakeClient, poll: Poll, conn: Conn, db_url: str
) -> None:
    runs = Runs()
    runs.release.set()
    client = start_client(make_client, runs.workers(), concurrency=2)
    jobs = client.insert_many([Twice() for _ in range(20)])
    ids = [j.id for j in jobs]
    poll(
        lambda: (
            conn.execute(
                "SELECT count(*) FROM drover_jobs WHERE id = ANY(%s) AND state = 'completed'",
                (ids,),
            ).fetchone()
            == (20,)
        ),
        message="all completed",
    )
    assert client.get_job(ids[0]).ledger == ()
    client.stop(timeout=5)
    found = conn.execute(
        "SELECT count(*) FROM drover_jobs WHERE id = ANY(%s) AND ledger IS NOT NULL", (ids,)
    ).fetchone()
    assert found == (0,), "the normal claim -> complete path wrote a ledger"
    shown = ok(cli(db_url, "jobs", "get", str(ids[0])))
    assert "ledger (" not in shown
    counted = [
        sample.value
        for metric in client.metrics_registry.collect()
        if metric.name in ("drover_reruns", "drover_stale_writes_refused")
        for sample in metric.samples
        if sample.name.endswith("_total")
    ]
    assert len(counted) == 2 + 3 * 6, "every label combination published from the start"
    assert set(counted) == {0.0}


def test_a_job_handed_back_at_shutdown_records_the_hand_back(
    make_client: MakeClient, poll: Poll, db_url: str
) -> None:
    runs = Runs()
    client = start_client(make_client, runs.workers(), concurrency=1)
    job = client.insert(Twice())
    assert runs.first_inside.wait(SAFETY)
    with pytest.raises(drover.DrainIncomplete):
        client.stop(timeout=0.1)
    assert _sample(client, "drover_reruns_total", reason="handed_back") == 1.0
    with drover.Inspector(db_url) as inspector:
        row = inspector.get_job(job.id)
    [entry] = row.ledger
    assert (entry.event, entry.attempt, entry.worker, entry.to) == (
        "handed_back",
        1,
        _holder(client),
        "retryable",
    )
    assert entry.rerun and "handed back to the queue" in entry.describe()
    runs.release.set()
    poll(runs.first_returned.is_set, message="abandoned handler finished")


def test_a_heartbeat_that_finds_the_job_moved_on_records_a_stale_heartbeat(
    make_client: MakeClient, poll: Poll, conn: Conn
) -> None:
    runs = Runs()
    client = start_client(
        make_client, runs.workers(), concurrency=1, lease_duration=30, heartbeat_interval=0.1
    )
    job = client.insert(Twice())
    assert runs.first_inside.wait(SAFETY)
    # An operator (or another client's rescue) takes the job away.
    conn.execute(
        "UPDATE drover_jobs SET state = 'retryable', leased_until = NULL, "
        "scheduled_at = now() + interval '1 hour' WHERE id = %s",
        (job.id,),
    )
    poll(lambda: len(_ledger(conn, job.id)) == 1, message="the refused renewal recorded")
    [entry] = client.get_job(job.id).ledger
    assert (entry.event, entry.attempt, entry.write, entry.refused) == (
        "stale_write",
        1,
        "heartbeat",
        "lease lost",
    )
    assert entry.worker == _holder(client)
    assert (
        _sample(client, "drover_stale_writes_refused_total", reason="lease lost", write="heartbeat")
        == 1.0
    )
    runs.release.set()
    # Its late completion is refused too (not running), and recorded after the heartbeat's.
    poll(lambda: len(_ledger(conn, job.id)) == 2, message="the late completion recorded")
    assert [(e["write"], e["refused"]) for e in _ledger(conn, job.id)] == [
        ("heartbeat", "lease lost"),
        ("complete", "not running"),
    ]
    client.stop(timeout=5)


def test_a_progress_report_refused_is_recorded_once_per_execution(
    make_client: MakeClient, poll: Poll, conn: Conn
) -> None:
    reported, moved, again, finish = (threading.Event() for _ in range(4))

    def handle(job: drover.Job[Twice]) -> None:
        job.set_progress(0.1)
        reported.set()
        assert moved.wait(SAFETY)
        job.set_progress(0.5)  # refused: the job moved on
        assert again.wait(SAFETY)
        job.set_progress(0.6)  # refused again, but already in the ledger
        assert finish.wait(SAFETY)

    registry = drover.Workers()
    registry.register(args=Twice)(handle)
    client = start_client(make_client, registry, concurrency=1, lease_duration=30)
    writer = _engine(client).progress
    job = client.insert(Twice())
    assert reported.wait(SAFETY)
    poll(
        lambda: (
            conn.execute("SELECT progress FROM drover_jobs WHERE id = %s", (job.id,)).fetchone()
            == (pytest.approx(0.1),)
        ),
        message="the first report written",
    )
    # The job moves on under the running handler; the heartbeat (every 10 s) stays out of it.
    _engine(client).heartbeat.stop()
    conn.execute(
        "UPDATE drover_jobs SET state = 'retryable', leased_until = NULL, "
        "scheduled_at = now() + interval '1 hour' WHERE id = %s",
        (job.id,),
    )
    moved.set()
    poll(lambda: len(_ledger(conn, job.id)) == 1, message="the refused report recorded")
    sent = writer.statements
    again.set()
    poll(lambda: writer.statements > sent, message="the second report sent")
    [entry] = _ledger(conn, job.id)
    assert (entry["event"], entry["write"], entry["attempt"]) == ("stale_write", "progress", 1)
    assert (
        _sample(client, "drover_stale_writes_refused_total", reason="lease lost", write="progress")
        == 1.0
    )
    finish.set()
    client.stop(timeout=5)
    assert [e["write"] for e in _ledger(conn, job.id)] == ["progress", "complete"]
