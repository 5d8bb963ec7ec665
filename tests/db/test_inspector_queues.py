"""The Inspector's queue operations: list with paused state and backlog, pause, resume."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from jobdb import table_snapshot

import drover

Conn = psycopg.Connection[tuple[Any, ...]]
MakeClient = Callable[..., drover.Client]
Poll = Callable[..., Any]


class Job(drover.JobArgs, kind="inspector_queue_job"):
    pass


@pytest.fixture
def inspector(db_url: str) -> Iterator[drover.Inspector]:
    with drover.Inspector(db_url) as i:
        yield i


def _plant(conn: Conn, queue: str, state: str, *, ago: float = 0.0) -> None:
    conn.execute(
        "INSERT INTO drover_jobs (kind, queue, state, attempt, scheduled_at, leased_until, "
        "  finalized_at) "
        "VALUES ('k', %(q)s, %(s)s::drover_job_state, "
        "  CASE WHEN %(s)s IN ('running', 'dead', 'completed') THEN 1 ELSE 0 END, "
        "  CASE WHEN %(s)s = 'scheduled' THEN now() + interval '1 hour' "
        "       ELSE now() - make_interval(secs => %(ago)s) END, "
        "  CASE WHEN %(s)s = 'running' THEN now() + interval '1 hour' END, "
        "  CASE WHEN %(s)s IN ('completed', 'cancelled', 'dead') THEN now() END)",
        {"q": queue, "s": state, "ago": ago},
    )


def test_queues_lists_backlog_paused_state_and_age_by_name(
    inspector: drover.Inspector, conn: Conn
) -> None:
    _plant(conn, "mail", "available", ago=60)
    _plant(conn, "mail", "available", ago=10)
    _plant(conn, "mail", "running")
    _plant(conn, "mail", "dead")
    _plant(conn, "bulk", "scheduled")
    _plant(conn, "archive", "completed")  # finished only: not a queue anyone waits on
    _plant(conn, "parked", "available", ago=5)
    inspector.pause_queue("parked")
    inspector.pause_queue("empty_but_paused")

    queues = inspector.queues()

    assert [q.name for q in queues] == ["bulk", "empty_but_paused", "mail", "parked"]
    by_name = {q.name: q for q in queues}
    mail = by_name["mail"]
    assert not mail.paused and mail.paused_at is None
    assert dict(mail.counts) == {
        "pending": 0,
        "available": 2,
        "scheduled": 0,
        "retryable": 0,
        "running": 1,
        "dead": 1,
    }
    assert mail.oldest_age_seconds is not None and 60 <= mail.oldest_age_seconds < 70
    assert by_name["bulk"].counts["scheduled"] == 1
    assert by_name["bulk"].oldest_age_seconds is None  # nothing claimable yet
    parked = by_name["parked"]
    assert parked.paused and parked.paused_at is not None
    assert parked.counts["available"] == 1
    assert parked.oldest_age_seconds is None  # a paused queue claims nothing
    assert by_name["empty_but_paused"].paused
    assert sum(by_name["empty_but_paused"].counts.values()) == 0


def test_pause_is_idempotent_and_resume_reports_whether_it_was_paused(
    inspector: drover.Inspector,
) -> None:
    first = inspector.pause_queue("mail")
    assert first.name == "mail" and first.paused and first.paused_at is not None
    again = inspector.pause_queue("mail")
    assert again.paused_at == first.paused_at  # the first pause time is kept
    assert again.updated_at >= first.updated_at
    assert inspector.resume_queue("mail") is True
    assert inspector.resume_queue("mail") is False
    assert inspector.resume_queue("never_paused") is False
    assert [(q.name, q.paused) for q in inspector.queues()] == [("mail", False)]


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("", "queue name must not be empty"),
        ("   ", "queue name must not be empty"),
        ("x" * 129, "queue name is 129 characters long"),
        ("a\x00b", "queue name must not contain NUL"),
        (None, "queue name must be a str, not NoneType"),
        (7, "queue name must be a str, not int"),
    ],
)
def test_bad_queue_names_are_refused_before_the_database(
    inspector: drover.Inspector, conn: Conn, name: object, match: str
) -> None:
    before = conn.execute("SELECT count(*) FROM drover_queues").fetchone()
    for action in (inspector.pause_queue, inspector.resume_queue):
        with pytest.raises(drover.InvalidInsertOpts, match=match):
            action(name)  # type: ignore[arg-type]
    assert conn.execute("SELECT count(*) FROM drover_queues").fetchone() == before
    assert table_snapshot(conn)[0] == []


def test_a_pause_from_the_inspector_stops_workers_and_a_resume_wakes_them_at_once(
    make_client: MakeClient, inspector: drover.Inspector, conn: Conn, poll: Poll
) -> None:
    done: list[int] = []
    workers = drover.Workers()

    @workers.register(args=Job)
    def work(job: drover.Job[Job]) -> None:
        done.append(job.id)

    # A poll interval far longer than the test: only the resume's wake-up
    # (a notification on the queue) can make the job start in time.
    worker = make_client(workers=workers, poll_interval=60)
    inspector.pause_queue("default")
    worker.start()
    engine = worker._engine
    assert engine is not None and engine.listener is not None
    assert engine.listener.listening.wait(10)
    job = make_client().insert(Job())
    # The insert's own wake-up makes the worker try the queue, and the pause
    # makes that claim come back empty.
    poll(lambda: engine.fetcher.claims >= 2, message="a claim round after the insert")
    row = conn.execute("SELECT state::text FROM drover_jobs WHERE id = %s", (job.id,)).fetchone()
    assert row == ("available",) and done == []
    assert inspector.resume_queue("default") is True
    poll(lambda: done == [job.id], timeout=10, message="the job to run after the resume")
