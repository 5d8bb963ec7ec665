"""The kernel's doors (migration 0018, ADR 0045) against a real database.

- The claim's gate: ``drover_gates`` follows ``drover_limits`` through a
  trigger, whoever writes the limits (an operator with no code declaring
  any, a starting client, a delete, a truncate), and concurrent writers
  cannot leave a limited queue ungated.
- The completion's watch: ``drover_watched(j)`` holds after each feature's
  statement (and after the previous release's, which know nothing of it),
  and a watched job ends through the features' statement with exactly what
  that statement alone records.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from jobdb import Conn

import drover
from drover._db import claims, completion, results
from drover._db.features import FEATURES as DROVER_FEATURES
from drover._db.graph import job_insert_graph
from drover._db.kernel import complete_claim
from drover._db.limits import limit_declare
from drover._db.queries import query
from drover._records import EncodedGraph, JobInsertParams, Outcome, Recorded
from drover.errors import LeaseLost
from drover.job import JobState
from drover.limits import Limit, LimitKey

LEASE = 60.0


@pytest.fixture
def inspector(db_url: str) -> Iterator[drover.Inspector]:
    with drover.Inspector(db_url) as i:
        yield i


def _gates(conn: Conn) -> set[tuple[str, str]]:
    rows = conn.execute("SELECT queue, via FROM drover_gates").fetchall()
    return {(str(q), str(v)) for q, v in rows}


def _insert(conn: Conn, queue: str = "default", **columns: Any) -> int:
    names = ["kind", "queue", "args", *columns]
    values = ["k", queue, "{}", *columns.values()]
    row = conn.execute(
        f"INSERT INTO drover_jobs ({', '.join(names)}) "
        f"VALUES ({', '.join(['%s'] * len(values))}) RETURNING id",
        values,
    ).fetchone()
    assert row is not None
    return int(row[0])


def _claim(conn: Conn, *ids: int) -> None:
    rows = claims.job_claim(conn, "default", 100, LEASE)
    assert set(ids) <= {r.id for r in rows}


# --- the claim's gate ------------------------------------------------------------------------


def test_an_operators_limit_gates_its_queue_and_removing_it_ungates(
    conn: Conn, inspector: drover.Inspector
) -> None:
    assert _gates(conn) == set()
    inspector.set_limit("queue:slow", concurrency=2)
    assert _gates(conn) == {("slow", "limits")}
    inspector.set_limit("queue:slow[customer]", concurrency=1)  # a second limit, same queue
    inspector.set_limit("kind:report", rate=5, per=timedelta(minutes=1))
    assert _gates(conn) == {("slow", "limits"), ("*", "limits")}
    # Clearing an undeclared limit removes it; the queue's other limit keeps it gated.
    assert inspector.clear_limit("queue:slow")
    assert _gates(conn) == {("slow", "limits"), ("*", "limits")}
    assert inspector.delete_limit("queue:slow[customer]")
    assert _gates(conn) == {("*", "limits")}
    assert inspector.delete_limit("kind:report")
    assert _gates(conn) == set()


def test_a_declared_limit_gates_until_deleted_and_a_cleared_override_keeps_it(
    conn: Conn, inspector: drover.Inspector
) -> None:
    limit_declare(conn, [(LimitKey("queue", "mail"), Limit(concurrency=3))])
    assert _gates(conn) == {("mail", "limits")}
    inspector.set_limit("queue:mail", concurrency=1)
    assert inspector.clear_limit("queue:mail")  # the declaration applies again
    assert _gates(conn) == {("mail", "limits")}
    # Declaring again (every start) changes nothing.
    limit_declare(conn, [(LimitKey("queue", "mail"), Limit(concurrency=3))])
    assert _gates(conn) == {("mail", "limits")}
    conn.execute("TRUNCATE drover_limits CASCADE")
    assert _gates(conn) == set()


def test_a_limit_an_operator_sets_holds_from_the_next_claim(
    conn: Conn, inspector: drover.Inspector
) -> None:
    for _ in range(4):
        _insert(conn, "slow")
    assert len(claims.job_claim(conn, "slow", 1, LEASE)) == 1  # ungated: the kernel's claim
    inspector.set_limit("queue:slow", concurrency=2)
    rows, _, through = claims.job_claim_limited(conn, "slow", 10, LEASE)
    assert through  # the kernel's claim found the gate
    assert len(rows) == 1  # one running already: one more under the limit
    inspector.delete_limit("queue:slow")
    rows, _, through = claims.job_claim_limited(conn, "slow", 10, LEASE)
    assert not through
    assert len(rows) == 2


def _blocked_on_a_lock(conn: Conn, pid: int) -> bool:
    row = conn.execute(
        "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
    ).fetchone()
    return row is not None and row[0] == "Lock"


@pytest.mark.parametrize("first", ["add", "delete"])
def test_concurrent_limit_writers_never_leave_a_limited_queue_ungated(
    db_url: str, conn: Conn, first: str
) -> None:
    limit_declare(conn, [(LimitKey("queue", "q"), Limit(concurrency=1))])

    def add(c: Conn) -> None:
        limit_declare(c, [(LimitKey("queue", "q", "tenant"), Limit(concurrency=1))])

    def delete(c: Conn) -> None:
        c.execute("DELETE FROM drover_limits WHERE partition_by = ''")

    steps: dict[str, Callable[[Conn], None]] = {"add": add, "delete": delete}
    second = "delete" if first == "add" else "add"
    with (
        psycopg.connect(db_url, autocommit=True) as one,
        psycopg.connect(db_url, autocommit=True) as two,
    ):
        one.execute("BEGIN")
        steps[first](one)  # holds the gates' lock until it commits
        failure: list[BaseException] = []

        def run_second() -> None:
            try:
                with two.transaction():
                    steps[second](two)
            except BaseException as exc:
                failure.append(exc)

        thread = threading.Thread(target=run_second)
        thread.start()
        deadline = time.monotonic() + 10
        while not _blocked_on_a_lock(conn, two.info.backend_pid):
            assert time.monotonic() < deadline, "the second writer never waited for the first"
            time.sleep(0.01)
        one.execute("COMMIT")
        thread.join(10)
        assert not failure, failure
    limits = conn.execute("SELECT partition_by FROM drover_limits").fetchall()
    assert limits == [("tenant",)]
    assert _gates(conn) == {("q", "limits")}


# --- the completion's watch ------------------------------------------------------------------


def _watched(conn: Conn, job_id: int) -> bool:
    row = conn.execute(
        "SELECT drover_watched(j) FROM drover_jobs j WHERE j.id = %s", (job_id,)
    ).fetchone()
    assert row is not None
    return bool(row[0])


def test_a_job_no_feature_touched_is_not_watched(conn: Conn) -> None:
    job = _insert(conn)
    _claim(conn, job)
    assert not _watched(conn, job)


def test_each_features_statement_makes_the_job_watched(
    conn: Conn, inspector: drover.Inspector
) -> None:
    awaited, asked, parent, redriven = (_insert(conn) for _ in range(4))
    # A waiter (Client.result).
    results.job_mark_awaited(conn, awaited)
    # An operator's cancel request on a running job.
    _claim(conn, asked)
    inspector.cancel_job(asked, reason="stop")
    # A dependent inserted later (the graph insert's has_dependents on the dependency).
    conn.execute(query("job_mark_has_dependents"), {"ids": [parent]})
    # A job that stored a result, redriven: its next completion must clear it.
    claims.job_record_outcomes(
        conn,
        [Outcome(redriven, 1, JobState.DEAD, error={"error": "x"})],
    )
    conn.execute("UPDATE drover_jobs SET result = '1' WHERE id = %s", (redriven,))
    inspector.retry_job(redriven)
    for job in (awaited, asked, parent, redriven):
        assert _watched(conn, job), job


def test_the_graph_insert_makes_the_dependencies_watched(conn: Conn) -> None:
    existing = _insert(conn)
    params = [JobInsertParams("k", "default", "{}", 25, None, None, 0) for _ in range(3)]
    # 1 waits for 0 (in the graph), 2 for the existing job.
    (first, second, third), _ = job_insert_graph(
        conn, EncodedGraph(params, [(1, 0)], [(2, existing)], workflow=True), notify=False
    )
    assert _watched(conn, existing)
    assert _watched(conn, first.id)
    assert not _watched(conn, second.id)
    assert not _watched(conn, third.id)


# The previous release's statements (ADR 0038) set the features' columns
# without knowing of the watch; today's kernel must still leave those jobs to
# the features' statement.
PREVIOUS_RELEASE_WRITES = {
    "awaited": "UPDATE drover_jobs SET awaited = true WHERE id = %s",
    "has_dependents": "UPDATE drover_jobs SET has_dependents = true WHERE id = %s",
    "cancel_request": (
        "UPDATE drover_jobs SET cancel_request = "
        """'{"reason": "old", "hard": false, "grace": 1}' WHERE id = %s"""
    ),
}


@pytest.mark.parametrize("column", sorted(PREVIOUS_RELEASE_WRITES))
def test_a_flag_written_by_the_previous_release_is_watched(conn: Conn, column: str) -> None:
    job = _insert(conn)
    _claim(conn, job)
    conn.execute(PREVIOUS_RELEASE_WRITES[column].encode(), (job,))
    assert _watched(conn, job)


def test_a_waiter_flagged_by_the_previous_release_is_told_of_the_kernels_completion(
    db_url: str, conn: Conn
) -> None:
    job = _insert(conn)
    _claim(conn, job)
    conn.execute(PREVIOUS_RELEASE_WRITES["awaited"].encode(), (job,))
    with psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute("LISTEN drover_done")
        (recorded,) = claims.job_record_outcomes(conn, [Outcome(job, 1, JobState.COMPLETED)])
        assert recorded.result.value == "applied"
        heard = [n.payload for n in listener.notifies(timeout=10, stop_after=1)]
    assert heard == [str(job)]


# --- a watched job ends as the features' statement alone would end it ------------------------


def _row(conn: Conn, job_id: int) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT state::text, attempt, result::text, finalized_at IS NOT NULL, "
        "scheduled_at <= now(), leased_until IS NULL, "
        "jsonb_path_query_array(errors, '$[*].error') "
        "FROM drover_jobs WHERE id = %s",
        (job_id,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def _same(recorded: Recorded) -> tuple[Any, ...]:
    return (
        recorded.result,
        recorded.current_state,
        recorded.current_attempt,
        recorded.cancelled,
        recorded.outcome.state,
    )


def _cancel_request(conn: Conn, job_id: int, inspector: drover.Inspector) -> None:
    inspector.cancel_job(job_id, reason="stop")


def _awaited(conn: Conn, job_id: int, inspector: drover.Inspector) -> None:
    conn.execute("UPDATE drover_jobs SET awaited = true WHERE id = %s", (job_id,))


def _dependent(conn: Conn, job_id: int, inspector: drover.Inspector) -> None:
    conn.execute(query("job_mark_has_dependents"), {"ids": [job_id]})
    child = _insert(conn, "children", state="pending", pending_deps=1)
    conn.execute(
        "INSERT INTO drover_job_deps (job_id, depends_on) VALUES (%s, %s)", (child, job_id)
    )


def _old_result(conn: Conn, job_id: int, inspector: drover.Inspector) -> None:
    conn.execute("UPDATE drover_jobs SET result = '\"old\"' WHERE id = %s", (job_id,))


FEATURES = {
    "cancel request": _cancel_request,
    "awaited": _awaited,
    "dependents": _dependent,
    "stored result": _old_result,
}

OUTCOMES: dict[str, Callable[[int], Outcome]] = {
    "completed": lambda i: Outcome(i, 1, JobState.COMPLETED),
    "completed with a result": lambda i: Outcome(i, 1, JobState.COMPLETED, result='"r"'),
    "retryable": lambda i: Outcome(i, 1, JobState.RETRYABLE, error={"error": "boom"}),
    "snoozed": lambda i: Outcome(i, 1, JobState.SCHEDULED, refund_attempt=True),
    "dead": lambda i: Outcome(i, 1, JobState.DEAD, error={"error": "gone"}),
    "cancelled": lambda i: Outcome(i, 1, JobState.CANCELLED, error={"error": "cancel"}),
    "stale": lambda i: Outcome(i, 2, JobState.COMPLETED),
}


@pytest.mark.parametrize("outcome", sorted(OUTCOMES))
@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_a_watched_job_ends_as_the_features_statement_alone_ends_it(
    conn: Conn, inspector: drover.Inspector, feature: str, outcome: str
) -> None:
    kernel_path, feature_path = _insert(conn), _insert(conn)
    _claim(conn, kernel_path, feature_path)
    for job in (kernel_path, feature_path):
        FEATURES[feature](conn, job, inspector)
    # Through the kernel (refused: watched), then the features' statement...
    (through_kernel,) = claims.job_record_outcomes(conn, [OUTCOMES[outcome](kernel_path)])
    # ...and through the features' statement alone (today's completion).
    (alone,) = completion.record_watched(conn, [OUTCOMES[outcome](feature_path)])
    assert _same(through_kernel) == _same(alone)
    assert _row(conn, kernel_path) == _row(conn, feature_path)


@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_complete_tx_of_a_watched_job_ends_as_the_features_statement_alone_ends_it(
    db_url: str, conn: Conn, inspector: drover.Inspector, feature: str
) -> None:
    kernel_path, feature_path = _insert(conn), _insert(conn)
    _claim(conn, kernel_path, feature_path)
    for job in (kernel_path, feature_path):
        FEATURES[feature](conn, job, inspector)
    with psycopg.connect(db_url) as caller:
        complete_claim(caller, kernel_path, 1, watched=DROVER_FEATURES.watched)
        caller.commit()
    (alone,) = completion.record_watched(conn, [OUTCOMES["completed"](feature_path)])
    assert alone.result.value == "applied"
    assert _row(conn, kernel_path) == _row(conn, feature_path)


def test_complete_tx_of_a_claim_that_moved_on_raises_lease_lost(db_url: str, conn: Conn) -> None:
    watched, plain = _insert(conn), _insert(conn)
    _claim(conn, watched, plain)
    conn.execute("UPDATE drover_jobs SET awaited = true WHERE id = %s", (watched,))
    for job in (watched, plain):
        with psycopg.connect(db_url) as caller:
            with pytest.raises(LeaseLost) as lost:
                complete_claim(caller, job, 2, watched=DROVER_FEATURES.watched)
            caller.rollback()
        assert (lost.value.state, lost.value.current_attempt) == ("running", 1)


def test_a_batch_mixing_kernel_and_watched_claims_answers_in_input_order(
    conn: Conn, inspector: drover.Inspector
) -> None:
    jobs = [_insert(conn) for _ in range(5)]
    _claim(conn, *jobs)
    inspector.cancel_job(jobs[1], reason="stop")
    conn.execute("UPDATE drover_jobs SET awaited = true WHERE id = %s", (jobs[3],))
    batch = [
        Outcome(jobs[0], 1, JobState.COMPLETED),
        Outcome(jobs[1], 1, JobState.COMPLETED),
        Outcome(jobs[2], 1, JobState.COMPLETED, result='"x"'),
        Outcome(jobs[3], 2, JobState.COMPLETED),  # stale
        Outcome(jobs[4], 1, JobState.COMPLETED),
    ]
    written = claims.job_record_outcomes(conn, batch)
    assert [r.outcome for r in written] == batch
    assert [r.result.value for r in written] == [
        "applied",
        "applied",
        "applied",
        "lease lost",
        "applied",
    ]
    assert [r.cancelled for r in written] == [False, True, False, False, False]
