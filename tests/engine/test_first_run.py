"""What a first-time user trips on, on a real database: a client with no workers, and args rows
written by another version of the code.
"""

from __future__ import annotations

import json
import threading

import pytest
from jobdb import Conn, MakeClient, Poll, await_job_state, count_jobs, start_client

import drover


class SendEmail(drover.JobArgs, kind="first_run_email"):
    to: str
    retries: int = 0


@pytest.mark.parametrize("config", [None, drover.Config(), drover.Config(workers=drover.Workers())])
def test_a_client_with_no_workers_refuses_to_start_and_can_still_insert(
    db_url: str, conn: Conn, config: drover.Config | None
) -> None:
    client = drover.Client(db_url, config)
    try:
        for start in (client.start, client.run):
            with pytest.raises(drover.ConfigError) as raised:
                start()
            text = str(raised.value)
            assert "this client has no workers" in text
            assert "drover.Client(url, drover.Config(workers=workers))" in text
            assert not client.running
        # Nothing was claimed or started (the autouse check sees no drover-* thread),
        # and the client is still a producer.
        row = client.insert(SendEmail(to="ada@example.com"))
        assert row.state is drover.JobState.AVAILABLE
        assert count_jobs(conn) == 1
        with pytest.raises(drover.NotStarted):
            client.stop()
    finally:
        client.close()


def test_the_refusal_comes_before_the_database_is_asked(empty_db_url: str) -> None:
    # A database without drover's schema would say SchemaMissing: the missing
    # workers are the first thing to fix, and are said first.
    client = drover.Client(empty_db_url)
    try:
        with pytest.raises(drover.ConfigError, match="no workers"):
            client.start()
    finally:
        client.close()


def test_stored_args_with_a_field_the_class_no_longer_has_still_run(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    # A row written by an older producer whose class still had `template`.
    stored = {"to": "ada@example.com", "retries": 2, "template": "welcome"}
    row = conn.execute(
        "INSERT INTO drover_jobs (kind, args) VALUES ('first_run_email', %s::jsonb) RETURNING id",
        (json.dumps(stored),),
    ).fetchone()
    assert row is not None
    job_id = int(row[0])
    seen: list[SendEmail] = []
    ran = threading.Event()
    workers = drover.Workers()

    @workers.register
    def send(job: drover.Job[SendEmail]) -> None:
        seen.append(job.args)
        ran.set()

    start_client(make_client, workers)
    assert ran.wait(10)
    await_job_state(poll, conn, job_id, "completed")
    assert seen == [SendEmail(to="ada@example.com", retries=2)]
    # Constructing with that field, though, is refused: it would be dropped.
    with pytest.raises(drover.InvalidJobArgs, match="unknown field 'template'"):
        SendEmail(to="ada@example.com", template="welcome")  # type: ignore[call-arg]


def test_stored_args_that_do_not_validate_are_still_dead_at_once(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    # Lenient about unknown keys only: a wrong type is still refused on decode.
    row = conn.execute(
        "INSERT INTO drover_jobs (kind, args) VALUES ('first_run_email', %s::jsonb) RETURNING id",
        (json.dumps({"to": "ada@example.com", "retries": "many", "old": 1}),),
    ).fetchone()
    assert row is not None
    workers = drover.Workers()

    @workers.register
    def send(job: drover.Job[SendEmail]) -> None:
        pytest.fail("args that do not validate never reach the handler")

    start_client(make_client, workers)
    dead = await_job_state(poll, conn, int(row[0]), "dead")
    (entry,) = dead["errors"]
    assert "retries" in entry["error"] and "old" not in entry["error"]
