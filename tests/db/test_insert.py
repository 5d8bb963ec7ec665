"""insert and insert_many against a real database: stored rows, dueness, uniqueness, bad input."""

from __future__ import annotations

import copy
import pickle
import threading
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from pydantic import ConfigDict

import drover

Conn = psycopg.Connection[tuple[Any, ...]]


class SendEmail(drover.JobArgs, kind="send_email"):
    to: str
    subject: str = "hello"


class Resize(drover.JobArgs, kind="resize", queue="images", max_attempts=5):
    image_id: int


class Opaque:
    """Not something pydantic can serialise."""


class HoldsAnything(drover.JobArgs, kind="holds_anything"):
    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)
    value: Any


def _count(conn: Conn) -> int:
    row = conn.execute("SELECT count(*) FROM drover_jobs").fetchone()
    assert row is not None
    return int(row[0])


def _last_id(conn: Conn) -> int | None:
    row = conn.execute("SELECT last_value, is_called FROM drover_jobs_id_seq").fetchone()
    assert row is not None
    return int(row[0]) if row[1] else None


def _db_now(conn: Conn) -> datetime:
    row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def test_insert_persists_defaults(client: drover.Client, conn: Conn) -> None:
    row = client.insert(SendEmail(to="a@example.com"))
    assert row.id > 0
    assert row.kind == "send_email"
    assert row.queue == "default"
    assert row.args == {"to": "a@example.com", "subject": "hello"}
    assert row.state is drover.JobState.AVAILABLE
    assert row.attempt == 0
    assert row.max_attempts == 25
    assert row.errors == ()
    assert row.leased_until is None
    assert row.finalized_at is None
    assert row.unique_key is None
    assert row.scheduled_at.tzinfo is not None
    stored = conn.execute(
        "SELECT kind, queue, args, state::text, attempt, max_attempts, errors FROM drover_jobs"
    ).fetchall()
    assert stored == [
        ("send_email", "default", {"to": "a@example.com", "subject": "hello"}, "available",
         0, 25, []),
    ]  # fmt: skip
    assert client.get_job(row.id) == row


def test_errors_are_an_immutable_tuple_shared_while_empty(client: drover.Client) -> None:
    # A fresh list per row is a collector-tracked object that outlives the
    # call: a bulk insert of many rows then paid for extra full collections.
    rows = client.insert_many([SendEmail(to=f"{i}@example.com") for i in range(3)])
    single = client.insert(SendEmail(to="one@example.com"))
    read_back = client.get_job(rows[0].id)
    shared = rows[0].errors
    assert all(row.errors is shared for row in [*rows, single, read_back])
    assert shared == () and isinstance(shared, tuple)
    assert pickle.loads(pickle.dumps(read_back)) == read_back  # noqa: S301 - our own bytes
    assert copy.deepcopy(read_back).errors is shared


def test_class_keywords_are_insert_defaults_and_opts_override_them(client: drover.Client) -> None:
    row = client.insert(Resize(image_id=7))
    assert (row.queue, row.max_attempts) == ("images", 5)
    row = client.insert(Resize(image_id=8), drover.InsertOpts(queue="bulk", max_attempts=2))
    assert (row.queue, row.max_attempts) == ("bulk", 2)


def test_future_time_is_scheduled_and_stored_to_the_microsecond(
    client: drover.Client, conn: Conn
) -> None:
    at = datetime.now(UTC) + timedelta(hours=1, microseconds=123)
    row = client.insert(SendEmail(to="x"), drover.InsertOpts(scheduled_at=at))
    assert row.state is drover.JobState.SCHEDULED
    assert row.scheduled_at == at
    stored = conn.execute("SELECT state::text, scheduled_at FROM drover_jobs").fetchone()
    assert stored == ("scheduled", at)


def test_other_time_zones_are_honoured(client: drover.Client) -> None:
    plus_five = datetime.now(timezone(timedelta(hours=5))) + timedelta(minutes=30)
    row = client.insert(SendEmail(to="x"), drover.InsertOpts(scheduled_at=plus_five))
    assert row.scheduled_at == plus_five
    assert row.state is drover.JobState.SCHEDULED


def test_past_or_missing_time_means_now(client: drover.Client, conn: Conn) -> None:
    before = _db_now(conn)
    past = client.insert(
        SendEmail(to="x"), drover.InsertOpts(scheduled_at=datetime(2001, 1, 1, tzinfo=UTC))
    )
    now = client.insert(SendEmail(to="y"))
    after = _db_now(conn)
    for row in (past, now):
        assert row.state is drover.JobState.AVAILABLE
        # A backdated job does not jump the queue: its due time is the insert time.
        assert before <= row.scheduled_at <= after


def test_database_clock_decides_dueness(client: drover.Client, conn: Conn) -> None:
    # A time the client calls "future" but the database already passed is
    # available: the comparison happens in SQL. Simulate a client clock that
    # runs behind by asking for a time just before the database's now().
    db_now = _db_now(conn)
    row = client.insert(
        SendEmail(to="x"), drover.InsertOpts(scheduled_at=db_now - timedelta(microseconds=1))
    )
    assert row.state is drover.JobState.AVAILABLE
    due = conn.execute(
        "SELECT count(*) FROM drover_jobs WHERE state = 'available' AND scheduled_at <= now()"
    ).fetchone()
    assert due == (1,)


@pytest.mark.parametrize(
    ("bad", "exc_type", "match"),
    [
        ("not args", TypeError, "must be a drover.JobArgs instance, not str"),
        ({"to": "x"}, TypeError, "not dict"),
        (None, TypeError, "not NoneType"),
        (HoldsAnything(value=Opaque()), TypeError, 'cannot encode args for kind "holds_anything"'),
        (SendEmail(to="nul\x00byte"), TypeError, "NUL character"),
    ],
)
def test_bad_args_write_nothing(
    client: drover.Client, conn: Conn, bad: object, exc_type: type[Exception], match: str
) -> None:
    with pytest.raises(drover.InvalidJobArgs, match=match) as info:
        client.insert(bad)  # type: ignore[call-overload]
    assert isinstance(info.value, exc_type)
    assert isinstance(info.value, drover.DroverError)
    assert _count(conn) == 0
    assert _last_id(conn) is None


def test_opts_that_are_not_insert_opts_are_refused(client: drover.Client, conn: Conn) -> None:
    with pytest.raises(drover.InvalidJobArgs, match="drover.InsertOpts"):
        client.insert(SendEmail(to="x"), {"queue": "q"})  # type: ignore[call-overload]
    assert _count(conn) == 0


def test_hostile_names_are_stored_verbatim(client: drover.Client, conn: Conn) -> None:
    hostile = '\'; DROP TABLE drover_jobs; -- "q" ünï ✓'
    row = client.insert(SendEmail(to=hostile), drover.InsertOpts(queue=hostile, unique_key=hostile))
    assert (row.queue, row.unique_key, row.args["to"]) == (hostile, hostile, hostile)
    assert _count(conn) == 1


# --- unique keys --------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["available", "scheduled", "retryable", "running"])
def test_duplicate_unique_key_while_active(client: drover.Client, conn: Conn, state: str) -> None:
    first = client.insert(SendEmail(to="x"), drover.InsertOpts(unique_key="welcome/42"))
    assert first.unique_key == "welcome/42"
    conn.execute(
        "UPDATE drover_jobs SET state = %s::drover_job_state WHERE id = %s", (state, first.id)
    )
    with pytest.raises(drover.DuplicateJob, match="welcome/42") as info:
        client.insert(SendEmail(to="y"), drover.InsertOpts(unique_key="welcome/42"))
    assert (info.value.queue, info.value.kind, info.value.unique_key) == (
        "default",
        "send_email",
        "welcome/42",
    )
    assert _count(conn) == 1


@pytest.mark.parametrize("state", ["completed", "cancelled", "dead"])
def test_unique_key_is_free_again_once_terminal(
    client: drover.Client, conn: Conn, state: str
) -> None:
    first = client.insert(SendEmail(to="x"), drover.InsertOpts(unique_key="k"))
    conn.execute(
        "UPDATE drover_jobs SET state = %s::drover_job_state WHERE id = %s", (state, first.id)
    )
    second = client.insert(SendEmail(to="x"), drover.InsertOpts(unique_key="k"))
    assert second.id != first.id
    assert _count(conn) == 2


def test_unique_key_scope_is_queue_and_kind(client: drover.Client, conn: Conn) -> None:
    client.insert(SendEmail(to="x"), drover.InsertOpts(unique_key="k"))
    client.insert(SendEmail(to="x"), drover.InsertOpts(unique_key="k", queue="other"))
    client.insert(Resize(image_id=1), drover.InsertOpts(unique_key="k", queue="default"))
    assert _count(conn) == 3


def test_empty_unique_key_means_not_unique(client: drover.Client, conn: Conn) -> None:
    a = client.insert(SendEmail(to="x"), drover.InsertOpts(unique_key=""))
    b = client.insert(SendEmail(to="x"), drover.InsertOpts(unique_key=""))
    assert a.unique_key is None and b.unique_key is None
    assert conn.execute("SELECT count(*) FROM drover_jobs WHERE unique_key IS NULL").fetchone() == (
        2,
    )


def test_concurrent_inserts_with_one_key_make_one_job(db_url: str, conn: Conn) -> None:
    n = 8
    barrier = threading.Barrier(n)
    outcomes: list[str] = []
    lock = threading.Lock()
    client = drover.Client(db_url)

    def run() -> None:
        barrier.wait(timeout=30)
        try:
            client.insert(SendEmail(to="x"), drover.InsertOpts(unique_key="once"))
            result = "ok"
        except drover.DuplicateJob:
            result = "duplicate"
        except Exception as exc:  # pragma: no cover - reported by the assertion
            result = repr(exc)
        with lock:
            outcomes.append(result)

    try:
        threads = [threading.Thread(target=run) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    finally:
        client.close()
    assert sorted(outcomes) == ["duplicate"] * (n - 1) + ["ok"]
    assert _count(conn) == 1


# --- insert_many --------------------------------------------------------------------------


def test_insert_many_returns_rows_in_input_order(client: drover.Client, conn: Conn) -> None:
    items: list[drover.InsertItem] = [SendEmail(to=f"u{i}") for i in range(50)]
    items.insert(10, (Resize(image_id=1), None))
    items.insert(20, (Resize(image_id=2), drover.InsertOpts(queue="bulk")))
    rows = client.insert_many(items)
    assert len(rows) == len(items)
    assert len({r.id for r in rows}) == len(rows)
    assert all(r.id > 0 for r in rows)
    for item, row in zip(items, rows, strict=True):
        args = item[0] if isinstance(item, tuple) else item
        assert row.kind == args.kind
        assert row.args == args.model_dump(mode="json")
    assert (rows[10].queue, rows[20].queue, rows[0].queue) == ("images", "bulk", "default")
    assert _count(conn) == len(items)


def test_insert_many_honours_per_item_schedules(client: drover.Client) -> None:
    future = datetime.now(UTC) + timedelta(days=1)
    rows = client.insert_many(
        [
            (SendEmail(to="later"), drover.InsertOpts(scheduled_at=future)),
            SendEmail(to="now"),
            (
                SendEmail(to="past"),
                drover.InsertOpts(scheduled_at=datetime(2000, 1, 1, tzinfo=UTC)),
            ),
        ]
    )
    assert [r.state for r in rows] == [
        drover.JobState.SCHEDULED,
        drover.JobState.AVAILABLE,
        drover.JobState.AVAILABLE,
    ]
    assert rows[0].scheduled_at == future
    assert rows[2].scheduled_at >= rows[2].created_at


def test_insert_many_large_batch_keeps_order(client: drover.Client, conn: Conn) -> None:
    rows = client.insert_many([Resize(image_id=i) for i in range(5000)])
    assert [r.args["image_id"] for r in rows] == list(range(5000))
    assert [r.id for r in rows] == sorted(r.id for r in rows)
    assert _count(conn) == 5000


def test_insert_many_empty_makes_no_write(client: drover.Client, conn: Conn) -> None:
    assert client.insert_many([]) == []
    assert client.insert_many(iter(())) == []
    assert _last_id(conn) is None


@pytest.mark.parametrize(
    ("bad_item", "match"),
    [
        ("nope", "item 2: job args must be a drover.JobArgs"),
        ((SendEmail(to="x"), "opts"), "item 2: insert options must be a drover.InsertOpts"),
        ((SendEmail(to="x"),), "item 2: expected"),
        (SendEmail(to="\x00"), "item 2: .*NUL"),
        (HoldsAnything(value=Opaque()), 'item 2: cannot encode args for kind "holds_anything"'),
    ],
)
def test_insert_many_with_one_bad_item_writes_nothing(
    client: drover.Client, conn: Conn, bad_item: object, match: str
) -> None:
    items: list[Any] = [SendEmail(to="a"), SendEmail(to="b"), bad_item, SendEmail(to="c")]
    with pytest.raises(drover.InvalidJobArgs, match=match):
        client.insert_many(items)
    assert _count(conn) == 0
    assert _last_id(conn) is None


def test_insert_many_refuses_a_non_list(client: drover.Client) -> None:
    with pytest.raises(drover.InvalidJobArgs, match="needs a list"):
        client.insert_many(SendEmail(to="x"))  # type: ignore[arg-type]


def test_insert_many_colliding_with_an_existing_job_writes_nothing(
    client: drover.Client, conn: Conn
) -> None:
    client.insert(SendEmail(to="x"), drover.InsertOpts(unique_key="k"))
    with pytest.raises(drover.DuplicateJob, match="item 1: .*'k'"):
        client.insert_many(
            [SendEmail(to="a"), (SendEmail(to="b"), drover.InsertOpts(unique_key="k"))]
        )
    assert _count(conn) == 1


def test_insert_many_with_two_items_sharing_a_key_writes_nothing(
    client: drover.Client, conn: Conn
) -> None:
    with pytest.raises(drover.DuplicateJob, match="item 2: "):
        client.insert_many(
            [
                (SendEmail(to="a"), drover.InsertOpts(unique_key="same")),
                SendEmail(to="b"),
                (SendEmail(to="c"), drover.InsertOpts(unique_key="same")),
            ]
        )
    assert _count(conn) == 0


def test_insert_many_failing_in_the_database_writes_nothing(
    client: drover.Client, conn: Conn
) -> None:
    # A queue longer than the validated maximum cannot come from the API, so
    # break the database side instead: a trigger that rejects one row.
    conn.execute(
        """CREATE FUNCTION reject_poison() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN IF NEW.args->>'to' = 'poison' THEN RAISE EXCEPTION 'poisoned row'; END IF;
           RETURN NEW; END $$"""
    )
    conn.execute(
        "CREATE TRIGGER reject BEFORE INSERT ON drover_jobs "
        "FOR EACH ROW EXECUTE FUNCTION reject_poison()"
    )
    with pytest.raises(drover.DatabaseError, match="poisoned row"):
        client.insert_many([SendEmail(to="a"), SendEmail(to="poison"), SendEmail(to="c")])
    assert _count(conn) == 0
    # The pool connection is healthy afterwards.
    assert client.insert(SendEmail(to="fine")).state is drover.JobState.AVAILABLE


def test_client_with_a_borrowed_pool_leaves_it_open(db_url: str, conn: Conn) -> None:
    from psycopg_pool import ConnectionPool

    with ConnectionPool(db_url, min_size=1, max_size=2) as pool:
        client = drover.Client(pool)
        client.insert(SendEmail(to="x"))
        client.insert_many([SendEmail(to="y"), SendEmail(to="z")])
        client.close()
        assert not pool.closed
        with pool.connection() as c:
            assert c.execute("SELECT count(*) FROM drover_jobs").fetchone() == (3,)


def test_owned_pool_is_closed_by_close(db_url: str) -> None:
    client = drover.Client(db_url)
    client.insert(SendEmail(to="x"))
    client.close()
    client.close()  # idempotent
    assert client._store.pool.closed
    with pytest.raises(drover.DatabaseError):
        client.insert(SendEmail(to="y"))


def test_unreachable_database_is_a_drover_error_without_the_password() -> None:
    client = drover.Client("postgresql://drover:s3cret-pw@127.0.0.1:1/nowhere?connect_timeout=1")
    try:
        client._store.pool.timeout = 1.0
        with pytest.raises(drover.DatabaseError) as info:
            client.insert(SendEmail(to="x"))
    finally:
        client.close()
    assert "s3cret-pw" not in str(info.value)
