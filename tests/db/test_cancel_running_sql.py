"""Cancelling a running job, at the SQL level (ADR 0030).

The operator's statement records the request and notifies ``drover_cancel``;
every write that ends the attempt (completion, failure, snooze, hand-back,
rescue, ``complete_tx``) ends the job ``cancelled`` with the operator's reason;
the cancels feature's statement returns the request of held claims (the
kernel's renewal does not); a redrive clears it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from jobdb import table_snapshot

import drover
from drover._db.cancels import job_cancel_requests
from drover._db.claims import (
    job_claim,
    job_claim_expired,
    job_extend_leases,
    job_record_outcomes,
)
from drover._db.features import FEATURES
from drover._db.kernel import complete_claim
from drover._db.store import Store
from drover._records import Outcome, WriteResult
from drover.job import JobState

Conn = psycopg.Connection[tuple[Any, ...]]
LEASE = 60.0


@pytest.fixture
def inspector(db_url: str) -> Iterator[drover.Inspector]:
    with drover.Inspector(db_url) as i:
        yield i


def _running(inspector: drover.Inspector, worker: Conn, queue: str = "q") -> drover.JobRow:
    job = inspector.enqueue("task", "{}", drover.InsertOpts(queue=queue))
    (claimed,) = job_claim(worker, queue, 1, LEASE)
    assert claimed.id == job.id
    return claimed


def _row(conn: Conn, job_id: int) -> dict[str, Any]:
    cur = conn.execute(
        "SELECT state::text, attempt, errors, result, finalized_at, leased_until, cancel_request "
        "FROM drover_jobs WHERE id = %s",
        (job_id,),
    )
    found = cur.fetchone()
    assert found is not None
    keys = ("state", "attempt", "errors", "result", "finalized_at", "leased_until", "request")
    return dict(zip(keys, found, strict=True))


def test_a_running_job_gets_the_request_and_its_owner_a_notification(
    db_url: str, inspector: drover.Inspector, conn: Conn
) -> None:
    with (
        psycopg.connect(db_url, autocommit=True) as worker,
        psycopg.connect(db_url, autocommit=True) as listener,
    ):
        listener.execute("LISTEN drover_cancel")
        claimed = _running(inspector, worker)
        row = inspector.cancel_job(claimed.id, reason="bad input", hard=True, grace=2.5)
        assert (row.state, row.attempt) == (JobState.RUNNING, 1)
        (note,) = list(listener.notifies(timeout=5, stop_after=1))
    assert json.loads(note.payload) == {
        "id": claimed.id,
        "attempt": 1,
        "reason": "bad input",
        "hard": True,
        "grace": 2.5,
    }
    stored = _row(conn, claimed.id)
    assert stored["state"] == "running"
    request = stored["request"]
    assert {k: request[k] for k in ("reason", "hard", "grace")} == {
        "reason": "bad input",
        "hard": True,
        "grace": 2.5,
    }
    db_now = conn.execute("SELECT now()").fetchone()
    assert db_now is not None
    requested_at = datetime.fromisoformat(request["requested_at"])
    assert abs((db_now[0] - requested_at).total_seconds()) < 5


def test_a_waiting_job_is_cancelled_at_once_without_a_request(
    inspector: drover.Inspector, conn: Conn
) -> None:
    job = inspector.enqueue("task", "{}")
    row = inspector.cancel_job(job.id, reason="not needed")
    assert row.state is JobState.CANCELLED
    stored = _row(conn, job.id)
    assert (stored["state"], stored["request"], stored["errors"]) == ("cancelled", None, [])


@pytest.mark.parametrize(
    "outcome",
    [
        Outcome(0, 1, JobState.COMPLETED),
        Outcome(0, 1, JobState.COMPLETED, result='{"n": 1}'),
        Outcome(0, 1, JobState.RETRYABLE, error={"attempt": 1, "at": "x", "error": "boom"}),
        Outcome(0, 1, JobState.DEAD, error={"attempt": 1, "at": "x", "error": "boom"}),
        Outcome(0, 1, JobState.SCHEDULED, refund_attempt=True),
    ],
    ids=["completed", "completed-with-result", "retryable", "dead", "snoozed"],
)
def test_whatever_ends_the_attempt_ends_the_job_cancelled_with_the_reason(
    db_url: str, inspector: drover.Inspector, conn: Conn, outcome: Outcome
) -> None:
    with psycopg.connect(db_url, autocommit=True) as worker:
        claimed = _running(inspector, worker)
        inspector.cancel_job(claimed.id, reason="operator says no")
        (recorded,) = job_record_outcomes(worker, [outcome._replace(id=claimed.id)])
    assert recorded.result is WriteResult.APPLIED
    assert recorded.cancelled
    stored = _row(conn, claimed.id)
    assert stored["state"] == "cancelled"
    assert stored["attempt"] == 1  # a snooze's refund does not apply
    assert stored["result"] is None
    assert stored["finalized_at"] is not None
    assert stored["leased_until"] is None
    (entry,) = stored["errors"]
    assert entry["error"] == "drover: job cancelled by operator: operator says no"
    assert entry["attempt"] == 1
    assert entry["at"].endswith("Z")


def test_a_job_without_a_request_is_not_touched_by_the_cancel_branch(
    db_url: str, inspector: drover.Inspector, conn: Conn
) -> None:
    with psycopg.connect(db_url, autocommit=True) as worker:
        done = _running(inspector, worker, "a")
        failed = _running(inspector, worker, "b")
        cancelled = _running(inspector, worker, "c")
        inspector.cancel_job(cancelled.id)
        error = {"attempt": 1, "at": "x", "error": "boom"}
        recorded = job_record_outcomes(
            worker,
            [
                Outcome(done.id, 1, JobState.COMPLETED, result="7"),
                Outcome(failed.id, 1, JobState.RETRYABLE, error=error),
                Outcome(cancelled.id, 1, JobState.COMPLETED),
            ],
        )
    assert [r.cancelled for r in recorded] == [False, False, True]
    assert (_row(conn, done.id)["state"], _row(conn, done.id)["result"]) == ("completed", 7)
    assert _row(conn, failed.id)["state"] == "retryable"
    (entry,) = _row(conn, cancelled.id)["errors"]
    assert entry["error"] == "drover: job cancelled by operator"


def test_the_plain_completion_batch_ends_a_requested_job_cancelled(
    db_url: str, inspector: drover.Inspector, conn: Conn
) -> None:
    with psycopg.connect(db_url, autocommit=True) as worker:
        plain = _running(inspector, worker, "a")
        requested = _running(inspector, worker, "b")
        inspector.cancel_job(requested.id, reason="stop")
        recorded = job_record_outcomes(
            worker,
            [
                Outcome(plain.id, 1, JobState.COMPLETED),
                Outcome(requested.id, 1, JobState.COMPLETED, result='"r"'),
            ],
        )
    assert [(r.result, r.cancelled) for r in recorded] == [
        (WriteResult.APPLIED, False),
        (WriteResult.APPLIED, True),
    ]
    assert _row(conn, plain.id)["state"] == "completed"
    stored = _row(conn, requested.id)
    assert (stored["state"], stored["result"]) == ("cancelled", None)
    assert stored["errors"][0]["error"] == "drover: job cancelled by operator: stop"


def test_complete_tx_of_a_requested_job_ends_it_cancelled_without_raising(
    db_url: str, inspector: drover.Inspector, conn: Conn
) -> None:
    with psycopg.connect(db_url, autocommit=True) as worker:
        claimed = _running(inspector, worker)
        inspector.cancel_job(claimed.id)
    with psycopg.connect(db_url) as caller:
        complete_claim(caller, claimed.id, 1, '"done"', watched=FEATURES.watched)
        caller.commit()
    assert _row(conn, claimed.id)["state"] == "cancelled"


def test_a_cancelled_job_cancels_its_pending_dependents(
    db_url: str, client: drover.Client, inspector: drover.Inspector, conn: Conn
) -> None:
    first = inspector.enqueue("task", "{}", drover.InsertOpts(queue="dep"))
    conn.execute(
        "INSERT INTO drover_jobs (kind, queue, args, state, pending_deps) "
        "VALUES ('task', 'other', '{}', 'pending', 1)"
    )
    cur = conn.execute("SELECT max(id) FROM drover_jobs")
    found = cur.fetchone()
    assert found is not None
    dependent = int(found[0])
    conn.execute(
        "INSERT INTO drover_job_deps (job_id, depends_on) VALUES (%s, %s)", (dependent, first.id)
    )
    conn.execute("UPDATE drover_jobs SET has_dependents = true WHERE id = %s", (first.id,))
    with psycopg.connect(db_url, autocommit=True) as worker:
        (claimed,) = job_claim(worker, "dep", 1, LEASE)
        inspector.cancel_job(claimed.id)
        job_record_outcomes(worker, [Outcome(claimed.id, 1, JobState.COMPLETED)])
    assert _row(conn, first.id)["state"] == "cancelled"
    assert _row(conn, dependent)["state"] == "cancelled"


def test_the_requests_of_held_claims_are_read_by_the_cancels_statement_not_the_renewal(
    db_url: str, inspector: drover.Inspector
) -> None:
    with psycopg.connect(db_url, autocommit=True) as worker:
        asked = _running(inspector, worker, "a")
        left = _running(inspector, worker, "b")
        inspector.cancel_job(asked.id, reason="why not", hard=True, grace=3)
        renewals = job_extend_leases(worker, [(asked.id, 1), (left.id, 1)], LEASE)
        requests = job_cancel_requests(worker, [(asked.id, 1), (left.id, 1)])
        # A request belongs to the attempt it was written for.
        assert job_cancel_requests(worker, [(asked.id, 2)]) == {}
        assert job_cancel_requests(worker, []) == {}
    # The kernel's renewal knows nothing of cancel requests (ADR 0045).
    assert all(not hasattr(r, "cancel_request") for r in renewals)
    by_id = {r.id: r for r in renewals}
    assert by_id[asked.id].leased_until is not None  # still renewed: it is still running
    assert list(requests) == [(asked.id, 1)]
    request = requests[(asked.id, 1)]
    assert (request["reason"], request["hard"], request["grace"]) == ("why not", True, 3.0)
    assert "requested_at" in request


def test_the_store_reads_the_requests_of_held_claims_for_the_cancels_feature(
    db_url: str, inspector: drover.Inspector
) -> None:
    # Store.cancel_requests: what the cancel poller and the catch-up after LISTEN read.
    with psycopg.connect(db_url, autocommit=True) as worker:
        asked = _running(inspector, worker, "a")
        left = _running(inspector, worker, "b")
    inspector.cancel_job(asked.id, reason="stop")
    store = Store.open(db_url, who="test", max_size=1)
    try:
        found = store.cancel_requests([(asked.id, 1), (left.id, 1)])
        stale = store.cancel_requests([(asked.id, 2)])
    finally:
        store.close()
    assert [(job_id, attempt) for job_id, attempt, _ in found] == [(asked.id, 1)]
    assert found[0][2]["reason"] == "stop"
    assert stale == []


def test_a_rescued_job_with_a_request_ends_cancelled_and_never_runs_again(
    db_url: str, inspector: drover.Inspector, conn: Conn
) -> None:
    with psycopg.connect(db_url, autocommit=True) as worker:
        claimed = _running(inspector, worker)
    inspector.cancel_job(claimed.id, reason="worker gone")
    conn.execute("UPDATE drover_jobs SET leased_until = now() - interval '1 s'")
    (expired,) = job_claim_expired(conn, 10, LEASE)
    error = {"attempt": 1, "at": "x", "error": "drover: lease expired, worker presumed dead"}
    (recorded,) = job_record_outcomes(
        conn, [Outcome(expired.id, 1, JobState.RETRYABLE, datetime.now(UTC), error=error)]
    )
    assert recorded.cancelled
    stored = _row(conn, claimed.id)
    assert stored["state"] == "cancelled"
    assert [e["error"] for e in stored["errors"]] == [
        "drover: job cancelled by operator: worker gone"
    ]
    assert job_claim(conn, "q", 10, LEASE) == []


def test_a_stale_attempt_cannot_write_after_the_request(
    db_url: str, inspector: drover.Inspector, conn: Conn
) -> None:
    with psycopg.connect(db_url, autocommit=True) as worker:
        claimed = _running(inspector, worker)
        inspector.cancel_job(claimed.id)
        (recorded,) = job_record_outcomes(worker, [Outcome(claimed.id, 2, JobState.COMPLETED)])
    assert recorded.result is WriteResult.LEASE_LOST
    assert _row(conn, claimed.id)["state"] == "running"


def test_a_redrive_clears_the_request(db_url: str, inspector: drover.Inspector, conn: Conn) -> None:
    with psycopg.connect(db_url, autocommit=True) as worker:
        claimed = _running(inspector, worker)
        inspector.cancel_job(claimed.id)
        job_record_outcomes(worker, [Outcome(claimed.id, 1, JobState.COMPLETED)])
        inspector.retry_job(claimed.id)
        assert _row(conn, claimed.id)["request"] is None
        (again,) = job_claim(worker, "q", 1, LEASE)
        (recorded,) = job_record_outcomes(worker, [Outcome(again.id, 1, JobState.COMPLETED)])
    assert not recorded.cancelled
    assert _row(conn, claimed.id)["state"] == "completed"


def test_a_second_request_replaces_the_first(
    db_url: str, inspector: drover.Inspector, conn: Conn
) -> None:
    with psycopg.connect(db_url, autocommit=True) as worker:
        claimed = _running(inspector, worker)
    inspector.cancel_job(claimed.id, reason="soft")
    inspector.cancel_job(claimed.id, reason="now hard", hard=True, grace=1)
    request = _row(conn, claimed.id)["request"]
    assert (request["reason"], request["hard"], request["grace"]) == ("now hard", True, 1.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"reason": "x" * 1001}, "reason must be at most 1000 characters, not 1001"),
        ({"reason": 5}, "reason must be a str or None, not int"),
        ({"hard": "yes"}, "hard must be a bool, not str"),
        ({"grace": -1}, "grace must not be negative, not -1 s"),
        ({"grace": float("nan")}, "grace"),
    ],
)
def test_bad_arguments_are_refused_and_nothing_is_written(
    db_url: str, inspector: drover.Inspector, conn: Conn, kwargs: dict[str, Any], message: str
) -> None:
    with psycopg.connect(db_url, autocommit=True) as worker:
        claimed = _running(inspector, worker)
    before = table_snapshot(conn)
    with pytest.raises(drover.InvalidArgument, match=message):
        inspector.cancel_job(claimed.id, **kwargs)
    assert table_snapshot(conn) == before


@pytest.mark.parametrize("state", ["completed", "cancelled"])
def test_a_finished_job_is_refused_with_a_clear_error(
    db_url: str, inspector: drover.Inspector, conn: Conn, state: str
) -> None:
    with psycopg.connect(db_url, autocommit=True) as worker:
        claimed = _running(inspector, worker)
        final = JobState(state)
        job_record_outcomes(worker, [Outcome(claimed.id, 1, final)])
    before = table_snapshot(conn)
    with pytest.raises(drover.InvalidTransition) as caught:
        inspector.cancel_job(claimed.id, reason="too late")
    assert str(caught.value) == f"job {claimed.id} is {state}, want running or cancellable"
    assert table_snapshot(conn) == before
