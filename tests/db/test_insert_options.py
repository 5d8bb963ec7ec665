"""Keyword options on ``insert`` and ``insert_tx`` (sync and async), and ``delay``.

``client.insert(args, priority=5, delay=300)`` is ``client.insert(args,
InsertOpts(priority=5, delay=300))``: the same checks, the same statements,
the same stored row. A misspelled option is refused with the closest name
and writes nothing. ``delay`` counts from the insert, on every statement
path (the slim and full single insert, a COPY batch, the staging table, a
unique identity, a job with dependencies).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from jobdb import assert_stored, count_jobs

import drover

Conn = psycopg.Connection[tuple[Any, ...]]


class Mail(drover.JobArgs, kind="options_mail"):
    to: str = "a@example.com"


def _stored(conn: Conn, job_id: int) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT queue, priority, max_attempts, tags, meta::text, state::text,"
        " extract(epoch FROM scheduled_at - created_at)"
        " FROM drover_jobs WHERE id = %s",
        (job_id,),
    ).fetchone()
    assert row is not None
    return row


def _delayed_by(conn: Conn, job_id: int) -> float:
    # The delay counts from this process's clock at the insert; the database
    # stamps created_at in the same instant, give or take the round trip.
    return float(_stored(conn, job_id)[6])


def test_keyword_options_store_what_insert_opts_would(client: drover.Client, conn: Conn) -> None:
    row = client.insert(
        Mail(), queue="mail", priority=5, max_attempts=3, tags=["welcome"], meta={"user": 7}
    )
    assert (row.queue, row.priority, row.max_attempts, row.tags) == ("mail", 5, 3, ("welcome",))
    assert row.meta == {"user": 7}
    queue, priority, max_attempts, tags, meta, state, _ = _stored(conn, row.id)
    assert (queue, priority, max_attempts, tags, state) == ("mail", 5, 3, ["welcome"], "available")
    assert meta == '{"user": 7}'
    assert_stored(client, [row])


@pytest.mark.parametrize("delay", [300, 300.0, timedelta(minutes=5)], ids=["int", "float", "td"])
def test_delay_schedules_the_job_that_long_after_the_insert(
    client: drover.Client, conn: Conn, delay: float | timedelta
) -> None:
    row = client.insert(Mail(), delay=delay)
    assert row.state is drover.JobState.SCHEDULED
    assert 299 <= _delayed_by(conn, row.id) <= 301
    assert_stored(client, [row])


def test_a_zero_delay_is_due_now(client: drover.Client, conn: Conn) -> None:
    row = client.insert(Mail(), delay=0)
    assert row.state is drover.JobState.AVAILABLE and row.scheduled_at == row.created_at


def test_keywords_replace_the_fields_of_the_insert_opts_given_with_them(
    client: drover.Client, conn: Conn
) -> None:
    shared = drover.InsertOpts(queue="mail", priority=1, delay=600)
    row = client.insert(Mail(), shared, priority=9)
    assert (row.queue, row.priority, row.state) == ("mail", 9, drover.JobState.SCHEDULED)
    assert 599 <= _delayed_by(conn, row.id) <= 601
    # A time given as a keyword replaces the kept delay (and the other way round).
    at = datetime.now(UTC) + timedelta(hours=2)
    timed = client.insert(Mail(), shared, scheduled_at=at)
    assert timed.scheduled_at == at
    delayed = client.insert(Mail(), drover.InsertOpts(scheduled_at=at), delay=60)
    assert 59 <= _delayed_by(conn, delayed.id) <= 61
    # The InsertOpts given is not changed.
    assert (shared.priority, shared.delay, shared.scheduled_at) == (1, timedelta(minutes=10), None)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"priorty": 5}, "unknown insert option 'priorty' (did you mean 'priority'?)"),
        ({"schedule_at": 5}, "unknown insert option 'schedule_at' (did you mean 'scheduled_at'?)"),
        ({"delay": -1}, "InsertOpts.delay must be zero or more, not -1 seconds"),
        ({"delay": "5m"}, "InsertOpts.delay must be a timedelta or a number of seconds, not str"),
        ({"delay": timedelta(days=4000)}, "InsertOpts.delay must be at most ten years"),
        (
            {"delay": 5, "scheduled_at": datetime.now(UTC)},
            "InsertOpts takes scheduled_at or delay, not both",
        ),
        ({"delay": 5, "debounce": 10}, "InsertOpts.debounce cannot be combined with delay"),
        ({"priority": 500}, "priority"),
    ],
)
def test_a_bad_option_is_refused_by_name_and_nothing_is_written(
    client: drover.Client, conn: Conn, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(drover.InvalidInsertOpts) as raised:
        client.insert(Mail(), **options)
    assert message in str(raised.value)
    with psycopg.connect(conn.info.dsn) as tx, pytest.raises(drover.InvalidInsertOpts):
        client.insert_tx(tx, Mail(), **options)
    assert count_jobs(conn) == 0


def test_options_with_a_workflow_are_refused(client: drover.Client, conn: Conn) -> None:
    with pytest.raises(drover.InvalidArgument, match="options of a workflow go on its steps"):
        client.insert(drover.chain(Mail(), Mail()), priority=3)  # type: ignore[call-overload]
    assert count_jobs(conn) == 0


def test_insert_tx_takes_the_keywords_and_commits_with_the_caller(
    client: drover.Client, conn: Conn
) -> None:
    with psycopg.connect(conn.info.dsn) as tx:
        row = client.insert_tx(tx, Mail(), delay=120, tags=["tx"])
        assert count_jobs(conn) == 0  # not visible before the commit
    assert _stored(conn, row.id)[3] == ["tx"]
    assert 119 <= _delayed_by(conn, row.id) <= 121


def test_delay_on_every_batch_path(client: drover.Client, conn: Conn) -> None:
    later = drover.InsertOpts(delay=300)
    # COPY straight into the table (no unique key), then the staging table (one has a key).
    direct = client.insert_many([Mail(), (Mail(), later)])
    staged = client.insert_many([(Mail(), later), (Mail(), drover.InsertOpts(unique_key="k"))])
    assert [r.state for r in direct] == [drover.JobState.AVAILABLE, drover.JobState.SCHEDULED]
    assert [r.state for r in staged] == [drover.JobState.SCHEDULED, drover.JobState.AVAILABLE]
    for row in (direct[1], staged[0]):
        assert 299 <= _delayed_by(conn, row.id) <= 301
    assert_stored(client, [*direct, *staged])


def test_delay_with_a_unique_identity_and_with_dependencies(
    client: drover.Client, conn: Conn
) -> None:
    first = client.insert(Mail(to="x"), delay=300, unique=drover.Unique(by_args=True))
    again = client.insert(Mail(to="x"), delay=300, unique=drover.Unique(by_args=True))
    assert first.state is drover.JobState.SCHEDULED and again.duplicate and again.id == first.id
    assert 299 <= _delayed_by(conn, first.id) <= 301
    parent = client.insert(Mail())
    child = client.insert(Mail(), depends_on=[parent], delay=300)
    assert child.state is drover.JobState.PENDING
    assert 299 <= _delayed_by(conn, child.id) <= 301


def test_the_async_client_takes_the_same_keywords(db_url: str, conn: Conn) -> None:
    async def main() -> tuple[drover.JobRow, drover.JobRow]:
        async with drover.AsyncClient(db_url) as client:
            row = await client.insert(Mail(), priority=4, delay=90)
            async with await psycopg.AsyncConnection.connect(db_url) as tx:
                in_tx = await client.insert_tx(tx, Mail(), queue="mail")
            with pytest.raises(drover.InvalidInsertOpts, match="did you mean 'queue'"):
                await client.insert(Mail(), queeu="mail")  # type: ignore[call-overload]
            return row, in_tx

    row, in_tx = asyncio.run(main())
    assert (row.priority, row.state) == (4, drover.JobState.SCHEDULED)
    assert 89 <= _delayed_by(conn, row.id) <= 91
    assert _stored(conn, in_tx.id)[0] == "mail"
    assert count_jobs(conn) == 2
