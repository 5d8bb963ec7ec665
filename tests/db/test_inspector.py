"""The Inspector: operator reads and writes against a real database, without a worker pool.

Stats, listing, lookup, raw-JSON enqueue, cancel and retry. Every refused call
is checked to leave the table exactly as it was (rows, ``xmin`` and the id
sequence), and the operator writes are raced against a worker's fenced writes.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from jobdb import count_jobs, db_now, table_snapshot
from psycopg_pool import ConnectionPool

import drover
from drover._db.claims import job_claim, job_record_outcomes
from drover._records import Outcome, WriteResult
from drover.job import JobRow, JobState

Conn = psycopg.Connection[tuple[Any, ...]]
Poll = Callable[..., Any]

LEASE = 60.0
TOLERANCE = timedelta(seconds=2)
HOSTILE = [
    "'; DROP TABLE drover_jobs; --",
    "kind \"with\" 'quotes'",
    "semi;colons;;",
    "ünïcødé ☃ 日本語 🚀",
    "\\x00 is not a NUL, 100% _wild_",
]
ERRORS = [
    {"attempt": 1, "at": "2030-01-02T03:04:05Z", "error": "ValueError: boom", "trace": "tb 1"},
    {"attempt": 2, "at": "2030-01-02T03:05:05Z", "error": "ValueError: boom again"},
]


# --- helpers ------------------------------------------------------------------------------------


@pytest.fixture
def inspector(db_url: str) -> Iterator[drover.Inspector]:
    with drover.Inspector(db_url) as i:
        yield i


def _table_exists(conn: Conn) -> bool:
    row = conn.execute("SELECT to_regclass('drover_jobs') IS NOT NULL").fetchone()
    assert row is not None
    return bool(row[0])


def _put(
    inspector: drover.Inspector,
    conn: Conn,
    state: str,
    *,
    queue: str = "default",
    kind: str = "task",
    unique_key: str | None = None,
    errors: list[dict[str, Any]] | None = None,
    attempt: int = 0,
    leased: bool = False,
    due_ago: float | None = None,
) -> int:
    """Insert a job and force it into ``state`` (and the columns given) with SQL."""
    row = inspector.enqueue(kind, "{}", drover.InsertOpts(queue=queue, unique_key=unique_key))
    terminal = state in ("completed", "cancelled", "dead")
    conn.execute(
        "UPDATE drover_jobs SET state = %(state)s::drover_job_state, attempt = %(attempt)s, "
        "errors = %(errors)s::jsonb, "
        "leased_until = CASE WHEN %(leased)s THEN now() + interval '1 hour' END, "
        "finalized_at = CASE WHEN %(terminal)s THEN now() - interval '1 minute' END, "
        "scheduled_at = CASE "
        "  WHEN %(ago)s::float8 IS NOT NULL THEN now() - make_interval(secs => %(ago)s::float8) "
        "  WHEN %(state)s = 'scheduled' THEN now() + interval '1 hour' "
        "  ELSE scheduled_at END "
        "WHERE id = %(id)s",
        {
            "state": state,
            "attempt": attempt,
            "errors": json.dumps(errors or []),
            "leased": leased or state == "running",
            "terminal": terminal,
            "ago": due_ago,
            "id": row.id,
        },
    )
    return row.id


def _get(inspector: drover.Inspector, job_id: int) -> JobRow:
    return inspector.get_job(job_id)


# --- construction -------------------------------------------------------------------------------


def test_inspector_borrowing_a_pool_leaves_it_open(db_url: str) -> None:
    pool: ConnectionPool[Any] = ConnectionPool(db_url, min_size=1, max_size=2, open=True)
    try:
        inspector = drover.Inspector(pool)
        assert inspector.stats() == drover.Stats([], [], [])
        inspector.close()
        inspector.close()  # idempotent
        assert not pool.closed
        with pool.connection() as c:
            assert c.execute("SELECT 1").fetchone() == (1,)
    finally:
        pool.close()


def test_inspector_with_a_conninfo_closes_its_own_pool(db_url: str, conn: Conn, poll: Poll) -> None:
    def others() -> int:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
        assert row is not None
        return int(row[0])

    with drover.Inspector(db_url) as inspector:
        inspector.enqueue("task", "{}")
        assert others() >= 1
    poll(lambda: others() == 0, message="the Inspector's own connections were closed")


@pytest.mark.parametrize("source", [None, 42, b"postgresql://x"])
def test_inspector_refuses_what_is_neither_a_pool_nor_a_conninfo(source: object) -> None:
    with pytest.raises(TypeError, match="ConnectionPool or a conninfo string"):
        drover.Inspector(source)  # type: ignore[arg-type]


# --- stats --------------------------------------------------------------------------------------


def test_stats_on_an_empty_database_is_empty(inspector: drover.Inspector) -> None:
    stats = inspector.stats()
    assert stats == drover.Stats(depths=[], oldest=[], paused=[])


def test_stats_reports_published_depths_oldest_ages_and_paused_queues(
    inspector: drover.Inspector, conn: Conn, client: drover.Client
) -> None:
    for _ in range(2):
        _put(inspector, conn, "available", queue="a", due_ago=100)
    _put(inspector, conn, "scheduled", queue="a")
    _put(inspector, conn, "retryable", queue="a", due_ago=50)
    _put(inspector, conn, "running", queue="a", attempt=1)
    _put(inspector, conn, "dead", queue="a", attempt=25)
    _put(inspector, conn, "completed", queue="a", attempt=1)
    _put(inspector, conn, "cancelled", queue="a")
    _put(inspector, conn, "completed", queue="done_only", attempt=1)
    _put(inspector, conn, "cancelled", queue="done_only")
    # b only has a job due in an hour: a depth, but nothing claimable.
    _put(inspector, conn, "scheduled", queue="b")
    # c has a due job but is paused: a depth, no oldest age.
    _put(inspector, conn, "available", queue="c", due_ago=500)
    client.pause_queue("c")
    client.pause_queue("d")
    client.pause_queue("e")
    client.resume_queue("e")

    stats = inspector.stats()

    assert stats.depths == [
        drover.QueueDepth("a", "available", 2),
        drover.QueueDepth("a", "scheduled", 1),
        drover.QueueDepth("a", "retryable", 1),
        drover.QueueDepth("a", "running", 1),
        drover.QueueDepth("a", "dead", 1),
        drover.QueueDepth("b", "scheduled", 1),
        drover.QueueDepth("c", "available", 1),
    ]
    assert [a.queue for a in stats.oldest] == ["a"]
    # The database clock: scheduled_at was set to its now() - 100 s.
    assert 100.0 <= stats.oldest[0].age_seconds < 110.0
    assert stats.paused == ["c", "d"]


def test_stats_oldest_age_ignores_jobs_not_yet_due(inspector: drover.Inspector, conn: Conn) -> None:
    _put(inspector, conn, "retryable", queue="q", due_ago=-3600)
    assert inspector.stats().oldest == []
    _put(inspector, conn, "available", queue="q", due_ago=30)
    (age,) = inspector.stats().oldest
    assert age.queue == "q"
    assert 30.0 <= age.age_seconds < 40.0


# --- list_jobs ----------------------------------------------------------------------------------


def _bulk(conn: Conn, n: int, queue: str = "default", state: str = "available") -> None:
    conn.execute(
        "INSERT INTO drover_jobs (kind, queue, state) "
        "SELECT 'bulk', %s, %s::drover_job_state FROM generate_series(1, %s)",
        (queue, state, n),
    )


def test_list_jobs_is_newest_first_with_a_default_limit_of_100(
    inspector: drover.Inspector, conn: Conn
) -> None:
    _bulk(conn, 101)
    rows = inspector.list_jobs()
    assert [r.id for r in rows] == list(range(101, 1, -1))
    assert all(isinstance(r, drover.JobRow) for r in rows)
    assert [r.id for r in inspector.list_jobs(limit=3)] == [101, 100, 99]
    assert [r.id for r in inspector.list_jobs(limit=1000)] == list(range(101, 0, -1))


def test_list_jobs_filters_by_queue_and_state_alone_and_together(
    inspector: drover.Inspector, conn: Conn
) -> None:
    ids = {
        (q, s): _put(inspector, conn, s, queue=q)
        for q in ("q1", "q2")
        for s in ("available", "dead", "completed")
    }

    def listed(**kw: Any) -> list[int]:
        return [r.id for r in inspector.list_jobs(**kw)]

    assert listed(queue="q1") == sorted((i for (q, _), i in ids.items() if q == "q1"), reverse=True)
    assert listed(state="dead") == [ids["q2", "dead"], ids["q1", "dead"]]
    assert listed(state=drover.JobState.DEAD) == [ids["q2", "dead"], ids["q1", "dead"]]
    assert listed(queue="q2", state="completed") == [ids["q2", "completed"]]
    assert listed(queue="q2", state=drover.JobState.AVAILABLE) == [ids["q2", "available"]]
    assert listed(queue="q1", state="running") == []
    assert listed(queue="nowhere") == []
    assert [r.state for r in inspector.list_jobs(state="dead")] == [JobState.DEAD] * 2


@pytest.mark.parametrize("limit", [0, -1, 1001, 10**9])
def test_list_jobs_refuses_a_limit_outside_1_to_1000(
    inspector: drover.Inspector, limit: int
) -> None:
    with pytest.raises(ValueError, match=f"limit must be between 1 and 1000, not {limit}"):
        inspector.list_jobs(limit=limit)


@pytest.mark.parametrize("limit", [True, 1.5, "10"])
def test_list_jobs_refuses_a_limit_that_is_not_an_int(
    inspector: drover.Inspector, limit: object
) -> None:
    with pytest.raises(TypeError, match="limit must be an int"):
        inspector.list_jobs(limit=limit)  # type: ignore[arg-type]


@pytest.mark.parametrize("state", ["exploded", "AVAILABLE", "", "dead'; --"])
def test_list_jobs_refuses_an_unknown_state_before_the_database(
    inspector: drover.Inspector, state: str
) -> None:
    with pytest.raises(ValueError, match="unknown job state") as caught:
        inspector.list_jobs(state=state)
    assert repr(state) in str(caught.value)
    assert "available" in str(caught.value)  # names the states it knows
    assert not isinstance(caught.value, drover.DatabaseError)


# --- get_job ------------------------------------------------------------------------------------


def test_get_job_returns_the_stored_row(inspector: drover.Inspector, conn: Conn) -> None:
    inserted = inspector.enqueue("task", '{"n": 7}', drover.InsertOpts(queue="q"))
    assert inspector.get_job(inserted.id) == inserted
    job_id = _put(inspector, conn, "dead", errors=ERRORS, attempt=25)
    row = inspector.get_job(job_id)
    assert (row.state, row.attempt, row.errors) == (JobState.DEAD, 25, tuple(ERRORS))


def test_get_job_of_a_missing_id_raises_not_found(inspector: drover.Inspector) -> None:
    with pytest.raises(drover.NotFound, match="job 424242 does not exist") as caught:
        inspector.get_job(424242)
    assert isinstance(caught.value, LookupError)
    with pytest.raises(LookupError):
        inspector.get_job(2**63 - 1)


@pytest.mark.parametrize(
    ("job_id", "error"),
    [(0, ValueError), (-1, ValueError), (2**63, ValueError), (True, TypeError), ("1", TypeError)],
)
@pytest.mark.parametrize("method", ["get_job", "cancel_job", "retry_job"])
def test_job_ids_are_checked_before_the_database(
    inspector: drover.Inspector, conn: Conn, method: str, job_id: object, error: type[Exception]
) -> None:
    job = _put(inspector, conn, "dead")  # id 1: True must not be taken for it
    before = table_snapshot(conn)
    with pytest.raises(error, match="job id must"):
        getattr(inspector, method)(job_id)
    assert table_snapshot(conn) == before
    assert inspector.get_job(job).state is JobState.DEAD


# --- enqueue ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args_json", "stored"),
    [
        ('{"to": "ada@example.com", "n": [1, 2.5, null, true]}', None),
        ("[1, 2, 3]", None),
        ('"just a string"', None),
        ("42", None),
        ("-3.25", None),
        ("null", None),
        ('{"emoji": "🚀", "escaped": "\\u00e9"}', {"emoji": "🚀", "escaped": "é"}),
    ],
)
def test_enqueue_stores_any_json_value_as_given(
    inspector: drover.Inspector, conn: Conn, args_json: str, stored: object
) -> None:
    expected = json.loads(args_json) if stored is None else stored
    row = inspector.enqueue("raw", args_json)
    assert row.args == expected
    assert (row.kind, row.queue, row.state, row.attempt) == (
        "raw",
        "default",
        JobState.AVAILABLE,
        0,
    )
    assert row.max_attempts == 25
    assert row.unique_key is None
    db = conn.execute("SELECT args, kind, queue FROM drover_jobs WHERE id = %s", (row.id,))
    assert db.fetchone() == (expected, "raw", "default")


def test_enqueue_honours_insert_opts(inspector: drover.Inspector, conn: Conn) -> None:
    at = datetime.now(UTC) + timedelta(hours=2)
    row = inspector.enqueue(
        "email",
        "{}",
        drover.InsertOpts(queue="mail", scheduled_at=at, unique_key="welcome:7", max_attempts=3),
    )
    assert (row.queue, row.state, row.scheduled_at) == ("mail", JobState.SCHEDULED, at)
    assert (row.unique_key, row.max_attempts) == ("welcome:7", 3)
    past = inspector.enqueue(
        "email", "{}", drover.InsertOpts(scheduled_at=datetime(2001, 1, 1, tzinfo=UTC))
    )
    assert past.state is JobState.AVAILABLE
    assert abs(past.scheduled_at - db_now(conn)) < TOLERANCE
    before = table_snapshot(conn)[0]
    with pytest.raises(drover.DuplicateJob) as caught:
        inspector.enqueue("email", "{}", drover.InsertOpts(queue="mail", unique_key="welcome:7"))
    assert (caught.value.queue, caught.value.kind, caught.value.unique_key) == (
        "mail",
        "email",
        "welcome:7",
    )
    assert table_snapshot(conn)[0] == before
    # Another queue or kind is another key.
    inspector.enqueue("email", "{}", drover.InsertOpts(queue="other", unique_key="welcome:7"))
    inspector.enqueue("sms", "{}", drover.InsertOpts(queue="mail", unique_key="welcome:7"))
    assert count_jobs(conn) == 4


def test_enqueue_wakes_listening_workers(db_url: str, inspector: drover.Inspector) -> None:
    with psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute("LISTEN drover")
        inspector.enqueue("task", "{}", drover.InsertOpts(queue="wake"))
        notes = list(listener.notifies(timeout=5, stop_after=1))
    assert [(n.channel, n.payload) for n in notes] == [("drover", "wake")]


@pytest.mark.parametrize(
    ("kind", "args_json", "message"),
    [
        ("", "{}", "kind must not be empty"),
        ("   ", "{}", "kind must not be empty"),
        ("k\x00", "{}", "NUL"),
        ("k" * 256, "{}", "maximum is 255"),
        ("task", "", "valid JSON"),
        ("task", "{not json}", "valid JSON"),
        ("task", "{'single': 'quotes'}", "valid JSON"),
        ("task", '{"a": 1,}', "valid JSON"),
        ("task", '{"a": "\\u0000"}', "NUL"),
        ("task", '["x\\u0000y"]', "NUL"),
        ("task", '{"k\\u0000": 1}', "NUL"),
        ("task", '["' + "x" * (1 << 20) + '"]', "larger than 1048576 bytes"),
    ],
    ids=[
        "empty-kind",
        "blank-kind",
        "nul-kind",
        "long-kind",
        "empty-args",
        "not-json",
        "single-quotes",
        "trailing-comma",
        "nul-value",
        "nul-in-array",
        "nul-key",
        "over-1MiB",
    ],
)
def test_enqueue_refuses_bad_input_and_writes_nothing(
    inspector: drover.Inspector, conn: Conn, kind: str, args_json: str, message: str
) -> None:
    inspector.enqueue("task", "{}")
    before = table_snapshot(conn)
    with pytest.raises(drover.InvalidJobArgs, match=message):
        inspector.enqueue(kind, args_json)
    assert table_snapshot(conn) == before
    # The id sequence did not move either: the next job gets the next id.
    assert inspector.enqueue("task", "{}").id == 2


def test_enqueue_accepts_args_of_exactly_1_mib(inspector: drover.Inspector) -> None:
    args = '"' + "x" * ((1 << 20) - 2) + '"'
    assert len(args.encode()) == 1 << 20
    assert inspector.enqueue("big", args).args == "x" * ((1 << 20) - 2)


@pytest.mark.parametrize("opts", [{"queue": "q"}, "q"])
def test_enqueue_refuses_opts_that_are_not_insert_opts(
    inspector: drover.Inspector, conn: Conn, opts: object
) -> None:
    with pytest.raises(drover.InvalidJobArgs, match="opts must be a drover.InsertOpts"):
        inspector.enqueue("task", "{}", opts)  # type: ignore[arg-type]
    assert count_jobs(conn) == 0


@pytest.mark.parametrize("args_json", ["NaN", '{"a": Infinity}', "[-Infinity]", "1e400"])
def test_enqueue_refuses_non_standard_json_numbers(
    inspector: drover.Inspector, conn: Conn, args_json: str
) -> None:
    with pytest.raises(drover.InvalidJobArgs, match="valid JSON"):
        inspector.enqueue("task", args_json)
    assert count_jobs(conn) == 0


@pytest.mark.parametrize(("kind", "args_json"), [("task", '"\\ud800"'), ("k\udcff", "{}")])
def test_enqueue_refuses_lone_surrogates(
    inspector: drover.Inspector, conn: Conn, kind: str, args_json: str
) -> None:
    with pytest.raises(drover.InvalidJobArgs):
        inspector.enqueue(kind, args_json)
    assert count_jobs(conn) == 0


@pytest.mark.parametrize("name", HOSTILE)
def test_enqueue_stores_hostile_kind_and_queue_verbatim(
    inspector: drover.Inspector, conn: Conn, name: str
) -> None:
    row = inspector.enqueue(name, json.dumps({"name": name}), drover.InsertOpts(queue=name))
    assert (row.kind, row.queue, row.args) == (name, name, {"name": name})
    assert _table_exists(conn)
    stored = conn.execute("SELECT kind, queue, args->>'name' FROM drover_jobs").fetchall()
    assert stored == [(name, name, name)]
    assert [r.id for r in inspector.list_jobs(queue=name)] == [row.id]
    assert inspector.stats().depths == [drover.QueueDepth(name, "available", 1)]


# --- cancel_job ---------------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["available", "scheduled", "retryable", "dead"])
def test_cancel_job_cancels_waiting_and_dead_jobs(
    inspector: drover.Inspector, conn: Conn, state: str
) -> None:
    errors = ERRORS if state in ("retryable", "dead") else []
    job_id = _put(inspector, conn, state, errors=errors, attempt=2, leased=True)
    other = _put(inspector, conn, state)
    others_before = conn.execute("SELECT xmin::text FROM drover_jobs WHERE id = %s", (other,))
    row = inspector.cancel_job(job_id)
    assert row.id == job_id
    assert row.state is JobState.CANCELLED
    assert row.finalized_at is not None
    assert abs(row.finalized_at - db_now(conn)) < TOLERANCE
    assert row.leased_until is None
    assert row.errors == tuple(errors)  # an operator cancel appends nothing
    assert row.attempt == 2
    assert inspector.get_job(job_id) == row
    again = conn.execute("SELECT xmin::text FROM drover_jobs WHERE id = %s", (other,))
    assert again.fetchone() == others_before.fetchone()
    assert inspector.get_job(other).state.value == state


@pytest.mark.parametrize("state", ["completed", "cancelled"])
def test_cancel_job_refuses_finished_jobs(
    inspector: drover.Inspector, conn: Conn, state: str
) -> None:
    job_id = _put(inspector, conn, state, attempt=1)
    before = table_snapshot(conn)
    with pytest.raises(drover.InvalidTransition) as caught:
        inspector.cancel_job(job_id)
    assert str(caught.value) == f"job {job_id} is {state}, want running or cancellable"
    assert caught.value.state == JobState(state)
    assert table_snapshot(conn) == before


def test_cancel_job_twice_is_refused_the_second_time(
    inspector: drover.Inspector, conn: Conn
) -> None:
    job_id = _put(inspector, conn, "available")
    first = inspector.cancel_job(job_id)
    with pytest.raises(drover.InvalidTransition, match="is cancelled"):
        inspector.cancel_job(job_id)
    assert inspector.get_job(job_id) == first


def test_cancel_and_retry_of_a_missing_job_raise_not_found(
    inspector: drover.Inspector, conn: Conn
) -> None:
    _put(inspector, conn, "dead")
    before = table_snapshot(conn)
    with pytest.raises(drover.NotFound, match="job 999 does not exist"):
        inspector.cancel_job(999)
    with pytest.raises(drover.NotFound, match="job 999 does not exist"):
        inspector.retry_job(999)
    assert table_snapshot(conn) == before


# --- retry_job ----------------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["dead", "cancelled"])
def test_retry_job_sends_a_dead_or_cancelled_job_back_with_fresh_attempts(
    inspector: drover.Inspector, conn: Conn, state: str
) -> None:
    job_id = _put(inspector, conn, state, errors=ERRORS, attempt=25, due_ago=86400, leased=True)
    row = inspector.retry_job(job_id)
    assert row.state is JobState.AVAILABLE
    assert row.attempt == 0
    assert row.finalized_at is None
    assert row.leased_until is None
    assert row.errors == tuple(ERRORS)  # the history is kept
    assert abs(row.scheduled_at - db_now(conn)) < TOLERANCE
    assert inspector.get_job(job_id) == row
    # Claimable at once, as a first attempt.
    (claimed,) = job_claim(conn, "default", 1, LEASE)
    assert (claimed.id, claimed.attempt) == (job_id, 1)


@pytest.mark.parametrize("state", ["available", "scheduled", "retryable", "running", "completed"])
def test_retry_job_refuses_anything_but_dead_or_cancelled(
    inspector: drover.Inspector, conn: Conn, state: str
) -> None:
    job_id = _put(inspector, conn, state, errors=ERRORS, attempt=3)
    before = table_snapshot(conn)
    with pytest.raises(drover.InvalidTransition) as caught:
        inspector.retry_job(job_id)
    assert str(caught.value) == f"job {job_id} is {state}, want dead or cancelled"
    assert caught.value.state == JobState(state)
    assert table_snapshot(conn) == before


def test_retry_job_refuses_when_the_unique_key_is_held_again(
    inspector: drover.Inspector, conn: Conn
) -> None:
    dead = _put(inspector, conn, "dead", kind="report", queue="q", unique_key="day:1", attempt=25)
    active = inspector.enqueue("report", "{}", drover.InsertOpts(queue="q", unique_key="day:1"))
    before = table_snapshot(conn)
    with pytest.raises(drover.DuplicateJob, match=f"cannot retry job {dead}") as caught:
        inspector.retry_job(dead)
    assert (caught.value.queue, caught.value.kind, caught.value.unique_key) == (
        "q",
        "report",
        "day:1",
    )
    assert table_snapshot(conn) == before
    # Once the holder finishes, the redrive goes through.
    conn.execute("UPDATE drover_jobs SET state = 'completed' WHERE id = %s", (active.id,))
    assert inspector.retry_job(dead).state is JobState.AVAILABLE


# --- races with a worker ------------------------------------------------------------------------


def test_a_cancel_after_a_worker_claimed_the_job_is_a_request_its_write_honours(
    db_url: str, inspector: drover.Inspector, conn: Conn
) -> None:
    job = inspector.enqueue("task", "{}", drover.InsertOpts(queue="race"))
    with psycopg.connect(db_url, autocommit=True) as worker:
        (claimed,) = job_claim(worker, "race", 1, LEASE)
        assert (claimed.id, claimed.attempt, claimed.state) == (job.id, 1, JobState.RUNNING)
        requested = inspector.cancel_job(job.id)
        assert requested.state is JobState.RUNNING
        (recorded,) = job_record_outcomes(worker, [Outcome(job.id, 1, JobState.COMPLETED)])
    assert recorded.result is WriteResult.APPLIED
    assert recorded.cancelled
    assert inspector.get_job(job.id).state is JobState.CANCELLED


def test_a_stale_worker_write_loses_to_an_operator_cancel(
    db_url: str, inspector: drover.Inspector, conn: Conn
) -> None:
    job = inspector.enqueue("task", "{}", drover.InsertOpts(queue="race"))
    with psycopg.connect(db_url, autocommit=True) as worker:
        (claimed,) = job_claim(worker, "race", 1, LEASE)
        # The attempt fails and the job waits to be retried; the operator cancels it.
        entry = {"attempt": 1, "at": "2030-01-01T00:00:00Z", "error": "ValueError: boom"}
        retry = Outcome(job.id, 1, JobState.RETRYABLE, datetime.now(UTC), error=entry)
        (first,) = job_record_outcomes(worker, [retry])
        assert first.result is WriteResult.APPLIED
        cancelled = inspector.cancel_job(job.id)
        assert cancelled.state is JobState.CANCELLED
        # A stale write still fenced on attempt 1 arrives afterwards.
        for late in (
            Outcome(job.id, claimed.attempt, JobState.COMPLETED),
            Outcome(job.id, claimed.attempt, JobState.DEAD, error=entry),
        ):
            (recorded,) = job_record_outcomes(worker, [late])
            assert recorded.result is WriteResult.NOT_RUNNING
            assert recorded.current_state == "cancelled"
    assert inspector.get_job(job.id) == cancelled
    assert cancelled.errors == (entry,)


def test_a_redriven_job_is_not_finished_by_the_worker_of_its_old_attempt(
    db_url: str, inspector: drover.Inspector, conn: Conn
) -> None:
    job = inspector.enqueue("task", "{}", drover.InsertOpts(queue="race", max_attempts=1))
    with psycopg.connect(db_url, autocommit=True) as worker:
        job_claim(worker, "race", 1, LEASE)
        entry = {"attempt": 1, "at": "2030-01-01T00:00:00Z", "error": "ValueError: boom"}
        (died,) = job_record_outcomes(worker, [Outcome(job.id, 1, JobState.DEAD, error=entry)])
        assert died.result is WriteResult.APPLIED
        inspector.retry_job(job.id)
        (again,) = job_claim(worker, "race", 1, LEASE)
        assert again.attempt == 1  # redrive reset the count
        # attempt 1 of the new life is running: the write of its claim is accepted.
        (done,) = job_record_outcomes(worker, [Outcome(job.id, 1, JobState.COMPLETED)])
        assert done.result is WriteResult.APPLIED
    final = inspector.get_job(job.id)
    assert (final.state, final.errors) == (JobState.COMPLETED, (entry,))


def test_concurrent_claims_and_cancels_never_both_win(
    db_url: str, inspector: drover.Inspector, conn: Conn
) -> None:
    n = 60
    ids = [inspector.enqueue("task", "{}", drover.InsertOpts(queue="race")).id for _ in range(n)]
    start = threading.Barrier(2)
    claimed: list[int] = []
    cancelled: list[int] = []
    requested: list[int] = []
    refused: dict[int, object] = {}
    failures: list[BaseException] = []

    def work() -> None:
        try:
            with psycopg.connect(db_url, autocommit=True) as worker:
                start.wait()
                while rows := job_claim(worker, "race", 1, LEASE):
                    claimed.extend(r.id for r in rows)
                    outcomes = [Outcome(r.id, r.attempt, JobState.COMPLETED) for r in rows]
                    for rec in job_record_outcomes(worker, outcomes):
                        assert rec.result is WriteResult.APPLIED, rec
        except BaseException as exc:
            failures.append(exc)

    def operate() -> None:
        try:
            start.wait()
            for job_id in ids:
                try:
                    row = inspector.cancel_job(job_id)
                except drover.InvalidTransition as exc:
                    refused[job_id] = exc.state
                    continue
                # Running: a request the worker's write honours (ADR 0030).
                (requested if row.state is JobState.RUNNING else cancelled).append(row.id)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=work), threading.Thread(target=operate)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert not failures, failures
    assert not set(claimed) & set(cancelled)
    assert sorted(claimed + cancelled) == ids
    assert set(refused) | set(requested) == set(claimed)
    assert set(refused.values()) <= {JobState.COMPLETED}
    states: dict[int, str] = dict(
        conn.execute("SELECT id, state::text FROM drover_jobs WHERE queue = 'race'").fetchall()
    )
    assert states == {
        **dict.fromkeys(refused, "completed"),
        **dict.fromkeys(requested + cancelled, "cancelled"),
    }
