"""Transactional completion and the lease a handler can see, on a started client.

Each handler writes its side effect to a table of its own, ``effects``, in the
transaction that carries ``job.complete_tx``: the test then reads both the
job and the effect and checks they committed (or rolled back) together.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

import psycopg
import pytest
from jobdb import (
    Conn,
    MakeClient,
    Poll,
    await_job_state,
    job_row,
    kit,
    sample_row,
    start_client,
)

import drover
from drover._db.store import Store
from drover._kernel.claims import Claim, InFlight
from drover._kernel.disposition import TX_NOT_COMMITTED
from drover._kernel.heartbeat import Heartbeat
from drover.ops.metrics import Metrics

SAFETY = 20.0
"""Longest a handler waits for the test on its own (a failing test never hangs)."""


class Effect(drover.JobArgs, kind="tx_effect"):
    mode: str = "commit"
    """commit | raise_after | swallow | lose | left_open | twice | autocommit"""


@dataclass
class Harness:
    db_url: str
    reached: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    errors: list[BaseException] = field(default_factory=list)
    leases: list[drover.Lease] = field(default_factory=list)
    open_conn: list[psycopg.Connection[tuple[object, ...]]] = field(default_factory=list)

    def effect(self, conn: psycopg.Connection[tuple[object, ...]], job: drover.Job[Effect]) -> None:
        conn.execute("INSERT INTO effects (job_id, attempt) VALUES (%s, %s)", (job.id, job.attempt))


class EffectWorker(drover.Worker[Effect]):
    def __init__(self, harness: Harness) -> None:
        self.h = harness

    def work(self, job: drover.Job[Effect]) -> None:
        h, mode = self.h, job.args.mode
        h.leases.append(job.lease)
        if mode == "left_open":
            conn = psycopg.connect(h.db_url)
            h.open_conn.append(conn)
            h.effect(conn, job)
            job.complete_tx(conn)
            return  # the transaction is still open: the test commits it
        with psycopg.connect(h.db_url) as conn:
            if mode == "autocommit":
                conn.autocommit = True
                try:
                    job.complete_tx(conn)
                except BaseException as exc:
                    h.errors.append(exc)
                    raise
                return
            if mode == "lose":
                h.reached.set()
                assert h.release.wait(SAFETY)
            try:
                with conn.transaction():
                    h.effect(conn, job)
                    job.complete_tx(conn)
                    if mode == "twice":
                        job.complete_tx(conn)
                    if mode in ("raise_after", "swallow"):
                        raise RuntimeError("the handler failed after complete_tx")
            except RuntimeError:
                if mode == "raise_after":
                    raise
            except BaseException as exc:
                h.errors.append(exc)
                raise


@pytest.fixture
def harness(db_url: str, conn: Conn) -> Iterator[Harness]:
    conn.execute(
        "CREATE TABLE effects (job_id bigint NOT NULL, attempt int NOT NULL, "
        "at timestamptz NOT NULL DEFAULT clock_timestamp())"
    )
    h = Harness(db_url)
    yield h
    h.release.set()
    for c in h.open_conn:
        c.close()


def _effects(conn: Conn, job_id: int) -> list[int]:
    rows = conn.execute(
        "SELECT attempt FROM effects WHERE job_id = %s ORDER BY attempt", (job_id,)
    ).fetchall()
    return [int(r[0]) for r in rows]


def _client(make_client: MakeClient, harness: Harness, **fields: object) -> drover.Client:
    workers = drover.Workers()
    workers.add(EffectWorker(harness))
    return start_client(make_client, workers, **fields)


def _refused(client: drover.Client) -> float:
    registry = client.metrics_registry
    return sum(
        registry.get_sample_value("drover_writes_refused_total", {"reason": reason}) or 0.0
        for reason in ("not running", "lease lost", "not found")
    )


def test_the_effect_and_the_completion_commit_together(
    make_client: MakeClient,
    harness: Harness,
    conn: Conn,
    poll: Poll,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="drover")
    client = _client(make_client, harness)
    job = client.insert(Effect())
    row = await_job_state(poll, conn, job.id, "completed")
    assert _effects(conn, job.id) == [1]
    assert row["errors"] == []
    assert row["finalized_at"] is not None and row["leased_until"] is None
    # The engine's own settling write was refused quietly: no warning, no refusal counted.
    client.stop(timeout=5)
    assert _refused(client) == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], [
        r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING
    ]


@pytest.mark.parametrize(
    ("mode", "error"),
    [
        ("raise_after", "RuntimeError: the handler failed after complete_tx"),
        ("swallow", TX_NOT_COMMITTED),
    ],
)
def test_a_rolled_back_transaction_takes_the_completion_with_it(
    make_client: MakeClient, harness: Harness, conn: Conn, poll: Poll, mode: str, error: str
) -> None:
    client = _client(make_client, harness)
    job = client.insert(Effect(mode=mode), drover.InsertOpts(max_attempts=1))
    row = await_job_state(poll, conn, job.id, "dead")
    assert _effects(conn, job.id) == []
    assert [e["error"] for e in row["errors"]] == [error]


def test_a_lost_lease_refuses_the_completion_and_the_handlers_writes_roll_back(
    make_client: MakeClient,
    harness: Harness,
    conn: Conn,
    poll: Poll,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = _client(make_client, harness)
    job = client.insert(Effect(mode="lose"))
    assert harness.reached.wait(SAFETY)
    # Another worker's rescue and re-claim, as the database would see it.
    conn.execute(
        "UPDATE drover_jobs SET attempt = attempt + 1, leased_until = now() + interval '1 hour' "
        "WHERE id = %s",
        (job.id,),
    )
    before = job_row(conn, job.id)
    harness.release.set()
    poll(lambda: harness.errors, message="complete_tx refused")
    [refusal] = harness.errors
    assert isinstance(refusal, drover.LeaseLost)
    assert (refusal.job_id, refusal.attempt) == (job.id, 1)
    assert (refusal.state, refusal.current_attempt) == ("running", 2)
    assert "no longer this worker's to complete" in str(refusal)
    poll(lambda: not client._engine.inflight.held(), message="the claim untracked")  # type: ignore[union-attr]
    client.stop(timeout=5)
    # Nothing of drover's was written for the stale execution, and its effect rolled back.
    assert job_row(conn, job.id) == before
    assert _effects(conn, job.id) == []
    assert any(
        r.getMessage().endswith("its transaction rolled back and nothing was recorded")
        for r in caplog.records
    )


def test_a_transaction_left_open_is_reported_and_completes_when_it_commits(
    make_client: MakeClient,
    harness: Harness,
    conn: Conn,
    poll: Poll,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = _client(make_client, harness)
    job = client.insert(Effect(mode="left_open"))
    poll(
        lambda: any("still open" in r.getMessage() for r in caplog.records),
        message="the open transaction reported",
    )
    assert job_row(conn, job.id)["state"] == "running"
    [open_conn] = harness.open_conn
    open_conn.commit()
    assert job_row(conn, job.id)["state"] == "completed"
    assert _effects(conn, job.id) == [1]
    client.stop(timeout=5)


@pytest.mark.parametrize(
    ("mode", "error", "message"),
    [
        ("autocommit", drover.NotInTransaction, "complete_tx needs an open transaction"),
        ("twice", drover.InvalidArgument, "complete_tx was already called for job"),
    ],
)
def test_misuse_is_refused_with_a_named_error(
    make_client: MakeClient,
    harness: Harness,
    conn: Conn,
    poll: Poll,
    mode: str,
    error: type[drover.DroverError],
    message: str,
) -> None:
    client = _client(make_client, harness)
    job = client.insert(Effect(mode=mode), drover.InsertOpts(max_attempts=1))
    await_job_state(poll, conn, job.id, "dead")
    [raised] = harness.errors
    assert isinstance(raised, error)
    assert message in str(raised)
    assert _effects(conn, job.id) == []


def test_a_hand_built_job_cannot_complete_in_a_transaction(conn: Conn) -> None:
    job = drover.Job(
        id=1,
        kind="tx_effect",
        queue="default",
        attempt=1,
        max_attempts=1,
        created_at=datetime.now().astimezone(),
        args=Effect(),
    )
    assert job.lease.job_id is None and not job.lease_lost.is_set()
    with pytest.raises(drover.InvalidArgument, match="claimed by a drover worker"):
        job.complete_tx(conn)


# --- the lease a handler sees ---------------------------------------------------------------------


class Watch(drover.JobArgs, kind="tx_watch"):
    pass


@dataclass
class Watcher:
    started: threading.Event = field(default_factory=threading.Event)
    jobs: list[drover.Job[Watch]] = field(default_factory=list)
    seen: list[datetime | None] = field(default_factory=list)
    stopped_by: list[str | None] = field(default_factory=list)


class WatchWorker(drover.Worker[Watch]):
    def __init__(self, watcher: Watcher) -> None:
        self.w = watcher

    def work(self, job: drover.Job[Watch]) -> None:
        self.w.jobs.append(job)
        self.w.seen.append(job.lease.leased_until)
        self.w.started.set()
        job.lease_lost.wait(SAFETY)
        self.w.stopped_by.append(job.context.reason)


def test_the_heartbeat_renews_the_visible_lease_and_sets_lease_lost_when_the_job_moves_on(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    watcher = Watcher()
    workers = drover.Workers()
    workers.add(WatchWorker(watcher))
    client = start_client(
        make_client, workers, lease_duration=30, heartbeat_interval=0.1, rescue_interval=60
    )
    job = client.insert(Watch())
    assert watcher.started.wait(SAFETY)
    [running] = watcher.jobs
    assert running.lease.attempt == 1 and running.lease.job_id == job.id
    first = watcher.seen[0]
    assert first is not None
    poll(
        lambda: running.lease.leased_until is not None and running.lease.leased_until > first,
        message="the heartbeat's renewal visible on job.lease",
    )
    assert not running.lease_lost.is_set()
    # An operator (or another worker's rescue) takes the job away.
    conn.execute(
        "UPDATE drover_jobs SET state = 'retryable', leased_until = NULL, "
        "scheduled_at = now() + interval '1 hour' WHERE id = %s",
        (job.id,),
    )
    poll(running.lease_lost.is_set, message="lease_lost set by the heartbeat")
    assert running.lease.lost_reason is not None and "moved on" in running.lease.lost_reason
    poll(lambda: watcher.stopped_by, message="the handler stopped early")
    assert watcher.stopped_by == ["lease lost"]
    assert client.metrics_registry.get_sample_value("drover_leases_lost_total") == 1.0
    client.stop(timeout=5)


def _beat_once(db_url: str, claim: Claim) -> int:
    """One heartbeat round over ``claim`` alone; how many leases it reported lost."""
    store = Store.open(db_url, who="test", max_size=1)
    try:
        wired = kit(store, lease_duration=30, heartbeat_interval=1)
        wired.inflight.add(claim)
        Heartbeat(wired).run_once()
    finally:
        store.close()
    assert isinstance(wired.events, Metrics)
    lost = wired.events.registry.get_sample_value("drover_leases_lost_total")
    return int(lost or 0)


def test_a_lease_not_renewed_for_a_whole_lease_is_given_up_before_the_database_lets_it_lapse(
    db_url: str,
) -> None:
    expired = Claim(sample_row(id=7, attempt=1), local_deadline=0.0)
    assert _beat_once(db_url, expired) == 1
    assert expired.lease.lost.is_set()
    assert expired.context.reason == "lease lost"


def test_after_complete_tx_the_heartbeat_never_gives_the_lease_up_on_its_own(db_url: str) -> None:
    claim = Claim(sample_row(id=8, attempt=1), local_deadline=0.0)  # long unrenewed...
    claim._tx.connection = object()  # ...because its row is locked by, then completed in, a tx
    assert claim.completed_in_tx
    assert _beat_once(db_url, claim) == 0
    assert not claim.lease.lost.is_set() and not claim.context.cancelled


def test_recording_a_snoozed_outcome_does_not_untrack_a_new_claim_with_the_same_attempt() -> None:
    # A snooze gives its attempt back, so the job's next claim (here by the same client,
    # before the snooze's outcome write returned) carries the same (id, attempt).
    inflight = InFlight()
    old = Claim(sample_row(id=5, attempt=1))
    old.finished = True
    inflight.add(old)
    new = Claim(sample_row(id=5, attempt=1))
    inflight.add(new)
    inflight.untrack([(5, 1)])  # what the completer does
    assert inflight.snapshot() == [new]
