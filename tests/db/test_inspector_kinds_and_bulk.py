"""Inspector reads and writes behind the status page's second version: per-kind outcomes and
run times, args containment, and retry or cancel of many jobs in one statement."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from jobdb import Conn, MakeClient, Poll, db_now, table_snapshot

import drover
from drover._db.queries import query


@pytest.fixture
def inspector(db_url: str) -> Iterator[drover.Inspector]:
    with drover.Inspector(db_url) as i:
        yield i


def _plant(
    conn: Conn,
    kind: str,
    state: str,
    *,
    args: Any = None,
    key: str | None = None,
    run: float | None = None,
    finished_ago: float = 0.0,
    errors_ago: tuple[float, ...] = (),
) -> int:
    """A job; a finished one ended ``finished_ago`` s ago after running ``run`` s."""
    now = db_now(conn)
    errors = [
        {"attempt": i + 1, "at": (now - timedelta(seconds=ago)).isoformat(), "error": "E"}
        for i, ago in enumerate(errors_ago)
    ]
    finished = state in ("completed", "cancelled", "dead")
    finalized = now - timedelta(seconds=finished_ago) if finished else None
    attempted = None if run is None or finalized is None else finalized - timedelta(seconds=run)
    row = conn.execute(
        "INSERT INTO drover_jobs (kind, state, args, unique_key, errors, finalized_at, "
        "attempted_at, attempt) VALUES (%s, %s::drover_job_state, %s::jsonb, %s, %s::jsonb, "
        "%s, %s, 1) RETURNING id",
        (kind, state, json.dumps(args or {}), key, json.dumps(errors), finalized, attempted),
    ).fetchone()
    assert row is not None
    return int(row[0])


def _states(conn: Conn, ids: list[int]) -> list[str]:
    rows: dict[int, str] = dict(
        conn.execute(
            "SELECT id, state::text FROM drover_jobs WHERE id = ANY(%s)", (ids,)
        ).fetchall()
    )
    return [rows[i] for i in ids]


class Tick(drover.JobArgs, kind="kinds_tick"):
    """A job that completes at once."""


# --- per kind -------------------------------------------------------------------------------------


def test_kinds_count_outcomes_and_failed_attempts_in_the_window_with_run_time_percentiles(
    inspector: drover.Inspector, conn: Conn
) -> None:
    for seconds in range(1, 21):  # completed in the window, ran 1..20 s
        _plant(conn, "report", "completed", run=float(seconds), finished_ago=60)
    _plant(conn, "report", "completed", run=500.0, finished_ago=7200)  # before the window
    _plant(conn, "report", "completed", run=None)  # never claimed by a worker: no run time
    _plant(conn, "report", "completed", run=2.0, errors_ago=(30,))  # failed once, then completed
    _plant(conn, "report", "dead", run=1.0, errors_ago=(90, 60, 30))
    _plant(conn, "report", "dead", run=1.0, finished_ago=7200, errors_ago=(7300,))  # too old
    _plant(conn, "mail", "retryable", errors_ago=(7200, 10))  # one failure in the window
    _plant(conn, "mail", "cancelled", errors_ago=(5,))  # ended cancelled after a failure
    # Cancelled without a failed attempt: a dependent that never ran, an operator's
    # cancel, a handler's Cancel. Each counts as cancelled, none as a failed attempt.
    never_ran = _plant(conn, "mail", "cancelled")
    conn.execute(
        "UPDATE drover_jobs SET attempt = 0, errors = jsonb_build_array(jsonb_build_object("
        "'attempt', 0, 'at', now(), 'error', 'dependency 7 ended dead, so this job will not run'))"
        " WHERE id = %s",
        (never_ran,),
    )
    for text in ("drover: job cancelled by operator: not needed", "job cancelled by handler: no"):
        cancelled = _plant(conn, "mail", "cancelled")
        conn.execute(
            "UPDATE drover_jobs SET errors = jsonb_build_array(jsonb_build_object("
            "'attempt', 1, 'at', now(), 'error', %s::text)) WHERE id = %s",
            (text, cancelled),
        )

    kinds = {k.kind: k for k in inspector.kinds(60)}
    assert list(kinds) == ["mail", "report"]
    report, mail = kinds["report"], kinds["mail"]
    assert (report.completed, report.failed, report.dead) == (22, 4, 1)
    # percentile_cont over 1..20 plus the 2 s one: 21 values, interpolated.
    runs = sorted([*range(1, 21), 2])
    assert report.p50_seconds == pytest.approx(runs[10])
    assert report.p95_seconds == pytest.approx(runs[19])  # position 0.95 * 20, exactly
    assert (mail.completed, mail.failed, mail.dead, mail.cancelled) == (0, 2, 0, 4)
    assert report.cancelled == 0
    assert mail.p50_seconds is None and mail.p95_seconds is None
    assert {k.kind for k in inspector.kinds(1)} == {"mail", "report"}  # 10 s and 5 s ago...
    assert inspector.kinds(1)[1].completed == 2  # ...and the two finished just now


@pytest.mark.parametrize("minutes", [0, 1441, True, "60", 1.5])
def test_kinds_refuses_a_bad_window(inspector: drover.Inspector, minutes: Any) -> None:
    with pytest.raises(drover.InvalidArgument, match="minutes must be an int"):
        inspector.kinds(minutes)


def test_a_job_a_worker_ran_has_a_run_time(
    make_client: MakeClient, inspector: drover.Inspector, poll: Poll
) -> None:
    done = threading.Event()
    workers = drover.Workers()

    @workers.register(args=Tick)
    def tick(job: drover.Job[Tick]) -> None:
        done.set()

    client = make_client(workers=workers, poll_interval=0.05)
    client.start()
    job = client.insert(Tick())
    assert done.wait(10)
    poll(lambda: client.get_job(job.id).state is drover.JobState.COMPLETED)
    client.stop(timeout=5)
    [stats] = [k for k in inspector.kinds(5) if k.kind == "kinds_tick"]
    assert stats.completed == 1 and stats.failed == 0
    # The claim stamped attempted_at, so the completion has a run time.
    assert stats.p50_seconds is not None and stats.p50_seconds >= 0


# --- args containment ---------------------------------------------------------------------------


def test_list_jobs_finds_jobs_whose_args_contain_an_object(
    inspector: drover.Inspector, conn: Conn
) -> None:
    ada = _plant(conn, "mail", "dead", args={"to": "ada", "n": 1})
    _plant(conn, "mail", "dead", args={"to": "bob"})
    tagged = _plant(conn, "mail", "dead", args={"to": "ada", "tags": ["x", "y"], "o": {"a": 1}})
    assert [r.id for r in inspector.list_jobs(args_contain={"to": "ada"})] == [tagged, ada]
    assert [r.id for r in inspector.list_jobs(args_contain={"tags": ["y"]})] == [tagged]
    assert [r.id for r in inspector.list_jobs(args_contain={"o": {"a": 1}})] == [tagged]
    assert inspector.list_jobs(args_contain={"to": "ada", "n": 2}) == []
    assert len(inspector.list_jobs(args_contain={})) == 3  # every object contains {}
    assert [r.id for r in inspector.list_jobs(args_contain={"to": "ada"}, limit=1)] == [tagged]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([1], "must be a JSON object"),
        ('{"to": "ada"}', "must be a JSON object"),
        ({"n": float("nan")}, "JSON-serialisable"),
        ({"x": object()}, "JSON-serialisable"),
        ({"x": "a\x00b"}, "NUL"),
    ],
)
def test_a_bad_args_filter_is_refused_before_the_database(
    db_url: str, value: Any, message: str
) -> None:
    inspector = drover.Inspector(db_url)
    inspector.close()  # a database call would now fail differently
    with pytest.raises(drover.InvalidArgument, match=message):
        inspector.list_jobs(args_contain=value)


# --- bulk -----------------------------------------------------------------------------------------


def test_retry_jobs_redrives_the_retriable_ones_in_one_statement(
    inspector: drover.Inspector, conn: Conn
) -> None:
    dead = _plant(conn, "a", "dead")
    cancelled = _plant(conn, "a", "cancelled")
    running = _plant(conn, "a", "running")
    done = _plant(conn, "a", "completed")
    held = _plant(conn, "a", "dead", key="k1")
    _plant(conn, "a", "available", key="k1")  # holds k1 again
    older, newer = _plant(conn, "a", "dead", key="k2"), _plant(conn, "a", "dead", key="k2")
    ids = [dead, cancelled, running, done, held, older, newer, 999_999, dead]
    assert inspector.retry_jobs(ids) == [dead, cancelled, newer]
    assert _states(conn, [dead, cancelled, running, done, held, older, newer]) == [
        "available", "available", "running", "completed", "dead", "dead", "available"
    ]  # fmt: skip
    row = conn.execute("SELECT attempt, finalized_at FROM drover_jobs WHERE id = %s", (dead,))
    assert row.fetchone() == (0, None)
    assert inspector.retry_jobs(ids) == []  # nothing retriable is left


def test_cancel_jobs_cancels_the_waiting_and_dead_ones(
    inspector: drover.Inspector, conn: Conn
) -> None:
    ids = [_plant(conn, "a", s) for s in ("available", "retryable", "dead", "running", "completed")]
    assert inspector.cancel_jobs(reversed(ids)) == ids[:3]
    assert _states(conn, ids) == ["cancelled"] * 3 + ["running", "completed"]
    assert inspector.cancel_jobs([]) == []


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        ([1, 0], "job id must be between"),
        ([1, "2"], "job id must be an int"),
        ("12", "ids must be an iterable of job ids"),
        (5, "ids must be an iterable of job ids"),
        (range(1, 1002), "at most 1000 job ids"),
    ],
)
def test_bad_bulk_ids_are_refused_and_change_nothing(
    inspector: drover.Inspector, conn: Conn, ids: Any, message: str
) -> None:
    _plant(conn, "a", "dead")
    before = table_snapshot(conn)
    for action in (inspector.retry_jobs, inspector.cancel_jobs):
        with pytest.raises(drover.InvalidArgument, match=message):
            action(ids)
    assert table_snapshot(conn) == before


def _plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _plan_nodes(child)


def test_kinds_reads_the_window_through_indexes_not_the_history(conn: Conn) -> None:
    # A long history of finished jobs and a quiet last hour: the statement must
    # not read the history (no sequential scan of drover_jobs).
    conn.execute(
        "INSERT INTO drover_jobs (kind, state, attempt, finalized_at, attempted_at, errors) "
        "SELECT 'k' || (g % 7), 'completed', 1, now() - interval '3 hours' - g * interval '1 s', "
        "now() - interval '3 hours' - g * interval '1 s' - interval '1 s', "
        "CASE WHEN g % 10 = 0 THEN jsonb_build_array(jsonb_build_object("
        "'attempt', 1, 'at', (now() - interval '4 hours')::text, 'error', 'E')) "
        "ELSE '[]'::jsonb END FROM generate_series(1, 20000) g"
    )
    _plant(conn, "k1", "completed", run=1.0)
    _plant(conn, "k2", "retryable", errors_ago=(5,))
    conn.execute("ANALYZE drover_jobs")
    [(plan,)] = conn.execute(
        "EXPLAIN (FORMAT JSON) " + query("stats_kinds"), {"minutes": 60}
    ).fetchall()
    scans = [
        (n["Node Type"], n.get("Index Name"))
        for n in _plan_nodes(plan[0]["Plan"])
        if n.get("Relation Name") == "drover_jobs"
    ]
    assert scans and all(node != "Seq Scan" for node, _ in scans), scans
    indexes = {n.get("Index Name") for n in _plan_nodes(plan[0]["Plan"])}
    assert "drover_jobs_finalized_idx" in indexes, indexes


def test_the_workflows_index_reads_the_newest_workflows_not_the_history(conn: Conn) -> None:
    # 5,000 workflows of 3 jobs each: listing the newest 50 must read the workflow
    # index backwards and stop, not scan the table or count every workflow.
    conn.execute(
        "INSERT INTO drover_jobs (id, kind, state, workflow_id) OVERRIDING SYSTEM VALUE "
        "SELECT g, 'k', 'completed', g - (g - 1) % 3 FROM generate_series(1, 15000) g"
    )
    conn.execute("SELECT setval('drover_jobs_id_seq', 15000)")
    conn.execute("ANALYZE drover_jobs")
    [(plan,)] = conn.execute(
        "EXPLAIN (FORMAT JSON) " + query("workflow_list"), {"limit": 50, "before": None}
    ).fetchall()
    nodes = list(_plan_nodes(plan[0]["Plan"]))
    scans = [(n["Node Type"], n.get("Index Name")) for n in nodes if n.get("Relation Name")]
    assert all(node != "Seq Scan" for node, _ in scans), scans
    assert any(index == "drover_jobs_workflow_idx" for _, index in scans), scans
    with drover.Inspector(conn.info.dsn) as inspector:
        listed = inspector.workflows(limit=50)
    assert [w.id for w in listed] == list(range(14998, 14998 - 150, -3))
    assert all((w.jobs, w.completed, w.state) == (3, 3, "completed") for w in listed)
