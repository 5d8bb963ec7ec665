"""The rows ``insert`` and ``insert_many`` return, on every statement path, against the stored ones.

``Client.insert`` runs a slim statement when the job has no unique key and no
time, and builds most of the returned row itself; ``insert_many`` COPYs a
batch without unique keys straight into ``drover_jobs`` and builds every row
itself, while a batch with a unique key goes through the staging table. Each
path must hand back exactly what ``get_job`` then reads, and follow the
dueness rule: a future time means ``scheduled`` at that time, a missing or
past one ``available`` with ``scheduled_at == created_at``.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from jobdb import RICH, assert_stored, count_jobs, db_now, invisible, typed
from psycopg import pq

import drover
from drover._db.rows import decode_json
from drover._insert.encode import encode_batch
from drover._records import UniformBatch

Conn = psycopg.Connection[tuple[Any, ...]]

INTRANS = pq.TransactionStatus.INTRANS


class Rich(drover.JobArgs, kind="paths_rich"):
    payload: dict[str, Any]
    label: str = "ünï"


class Plain(drover.JobArgs, kind="paths_plain", queue="plain_q", max_attempts=3):
    n: int


class Anything(drover.JobArgs, kind="paths_anything"):
    value: Any


class Rollback(Exception):
    """Raised inside a transaction block to make it roll back."""


def assert_due_now(row: drover.JobRow) -> None:
    assert row.state is drover.JobState.AVAILABLE
    assert row.scheduled_at == row.created_at


def last_id(conn: Conn) -> int | None:
    row = conn.execute("SELECT last_value, is_called FROM drover_jobs_id_seq").fetchone()
    assert row is not None
    return int(row[0]) if row[1] else None


@pytest.fixture
def user_conn(db_url: str, conn: Conn) -> Iterator[Conn]:
    """The application's connection: psycopg defaults, so not autocommit; plus a scratch table."""
    conn.execute("CREATE TABLE marker (note text NOT NULL)")
    c = psycopg.connect(db_url)
    assert c.autocommit is False
    yield c
    c.close()


def markers(conn: Conn) -> list[str]:
    return [r[0] for r in conn.execute("SELECT note FROM marker ORDER BY note").fetchall()]


# --- decode_json --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"a":1}',
        '{"a": 1, "b": [true, false, null], "c": {"d": "e"}}',
        "[]",
        "{}",
        "[1,2.5,-3,4e2,-0,0.1]",
        '"plain string"',
        '"\\u00e9\\ud83d\\ude00 \\"q\\" \\\\ \\n \\u2028"',
        '"Grüße ✓ 😀"',
        "0",
        "-1.5E-3",
        "12345678901234567890123456789",
        "1e400",
        "true",
        "false",
        "null",
        "NaN",
        "-Infinity",
        '{"a":1,"a":2}',
        '{"deep": [[[[{"x": [1, {"y": null}]}]]]]}',
        ' {"a": 1}',
        '{"a": 1} ',
        "\n\t [1, 2] \r\n",
        "  7  ",
        '{"args": {"to": "a@example.com"}, "errors": []}',
    ],
)
def test_decode_json_matches_json_loads(text: str) -> None:
    got = decode_json(text)
    expected = json.loads(text)
    # repr tells 1 from 1.0 and True from 1, keeps key order, and makes NaN equal itself.
    assert repr(got) == repr(expected)


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "{",
        "[1,]",
        '{"a":1} x',
        '{"a":1}{"b":2}',
        "[1] ]",
        "1 2",
        "nul",
        "tru",
        '"unterminated',
        "{'single': 1}",
        '{"a" 1}',
        "-",
        "1.",
        ".5",
        "01",
        "[1, 2",
        "\ufeff[1]",
    ],
)
def test_decode_json_refuses_what_json_loads_refuses(text: str) -> None:
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(text)
    with pytest.raises(json.JSONDecodeError) as got:
        decode_json(text)
    assert isinstance(got.value, ValueError)
    assert (got.value.msg, got.value.pos) == (expected.value.msg, expected.value.pos)


# --- insert: every path returns the stored row --------------------------------------------------


def _opts(path: str) -> drover.InsertOpts | None:
    if path == "plain":
        return None
    if path == "plain_with_empty_opts":
        return drover.InsertOpts()
    if path == "future":
        return drover.InsertOpts(
            scheduled_at=datetime.now(UTC) + timedelta(hours=2, microseconds=7)
        )
    if path == "future_other_zone":
        plus_five = timezone(timedelta(hours=5, minutes=30))
        return drover.InsertOpts(scheduled_at=datetime.now(plus_five) + timedelta(minutes=5))
    if path == "past":
        return drover.InsertOpts(scheduled_at=datetime(2001, 2, 3, 4, 5, 6, 789, tzinfo=UTC))
    if path == "unique":
        return drover.InsertOpts(unique_key="paths/1", queue="uq", max_attempts=4)
    if path == "unique_future":
        return drover.InsertOpts(
            unique_key="paths/2", scheduled_at=datetime.now(UTC) + timedelta(days=3)
        )
    raise AssertionError(path)


PATHS = [
    "plain",
    "plain_with_empty_opts",
    "future",
    "future_other_zone",
    "past",
    "unique",
    "unique_future",
]


@pytest.mark.parametrize("path", PATHS)
def test_insert_returns_exactly_the_stored_row(
    client: drover.Client, conn: Conn, path: str
) -> None:
    opts = _opts(path)
    before = db_now(conn)
    row = client.insert(Rich(payload=RICH), opts)
    after = db_now(conn)

    assert row.args == {"payload": RICH, "label": "ünï"}
    assert typed(row.args["payload"]) == typed(RICH)
    assert (row.kind, row.attempt, row.errors) == ("paths_rich", 0, ())
    assert (row.leased_until, row.finalized_at) == (None, None)
    assert before <= row.created_at <= after
    if opts is not None and opts.unique_key:
        assert (row.unique_key, row.queue) == (opts.unique_key, opts.queue or "default")
    else:
        assert row.unique_key is None
    if opts is not None and opts.scheduled_at is not None and opts.scheduled_at > after:
        assert row.state is drover.JobState.SCHEDULED
        assert row.scheduled_at == opts.scheduled_at
    else:
        assert_due_now(row)
    assert_stored(client, [row])
    assert count_jobs(conn) == 1


def test_insert_uses_class_defaults_and_opts_overrides_on_the_slim_path(
    client: drover.Client,
) -> None:
    defaults = client.insert(Plain(n=1))
    overridden = client.insert(Plain(n=2), drover.InsertOpts(queue="other", max_attempts=9))
    assert (defaults.queue, defaults.max_attempts) == ("plain_q", 3)
    assert (overridden.queue, overridden.max_attempts) == ("other", 9)
    assert_due_now(defaults)
    assert_due_now(overridden)
    assert_stored(client, [defaults, overridden])


@pytest.mark.parametrize("path", PATHS)
def test_insert_tx_returns_exactly_the_stored_row(
    client: drover.Client, user_conn: Conn, path: str
) -> None:
    opts = _opts(path)
    row = client.insert_tx(user_conn, Rich(payload=RICH), opts)
    assert invisible(client, row.id)
    user_conn.commit()
    if opts is not None and opts.scheduled_at is not None and opts.scheduled_at > row.created_at:
        assert row.state is drover.JobState.SCHEDULED
        assert row.scheduled_at == opts.scheduled_at
    else:
        assert_due_now(row)
    assert_stored(client, [row])


def test_concurrent_inserts_each_return_their_stored_row(client: drover.Client, conn: Conn) -> None:
    threads, per_thread = 8, 15
    barrier = threading.Barrier(threads)
    rows: list[drover.JobRow] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    future = datetime.now(UTC) + timedelta(hours=1)

    def run(t: int) -> None:
        try:
            barrier.wait(timeout=10)
            for i in range(per_thread):
                choice = (t + i) % 4
                opts = [
                    None,
                    drover.InsertOpts(scheduled_at=future + timedelta(microseconds=t * 100 + i)),
                    drover.InsertOpts(scheduled_at=datetime(2000, 1, 1, tzinfo=UTC), queue="p"),
                    drover.InsertOpts(unique_key=f"c/{t}/{i}", max_attempts=2),
                ][choice]
                row = client.insert(Rich(payload={**RICH, "t": t, "i": i}), opts)
                with lock:
                    rows.append(row)
        except BaseException as exc:  # pragma: no cover - reported below
            with lock:
                errors.append(exc)

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=30)
    assert errors == []
    assert len(rows) == threads * per_thread
    assert len({r.id for r in rows}) == len(rows)
    scheduled = [r for r in rows if r.state is drover.JobState.SCHEDULED]
    assert all(r.scheduled_at > r.created_at for r in scheduled)
    assert all(r.scheduled_at == r.created_at for r in rows if r not in scheduled)
    assert len(scheduled) == sum(
        1 for t in range(threads) for i in range(per_thread) if (t + i) % 4 == 1
    )
    for row in scheduled:
        t, i = row.args["payload"]["t"], row.args["payload"]["i"]
        assert row.scheduled_at == future + timedelta(microseconds=t * 100 + i)
    assert_stored(client, rows)
    assert count_jobs(conn) == len(rows)


# --- insert: large floats -----------------------------------------------------------------------


@pytest.mark.parametrize("method", ["insert", "insert_many"])
def test_a_large_float_comes_back_as_stored(client: drover.Client, method: str) -> None:
    # jsonb prints 1e23 back as the integer 100000000000000000000000: the row
    # drover builds from what it sent must say the same (and keep 1e-7 a float).
    args = Anything(value={"amount": 1e23, "list": [1.5e300, 1e-7, 0.0000125, 1e15, -1e20]})
    if method == "insert":
        row = client.insert(args)
    else:
        (row,) = client.insert_many([args])
    stored = client.get_job(row.id)
    assert row.args == stored.args
    assert [type(v) for v in row.args["value"]["list"]] == [
        type(v) for v in stored.args["value"]["list"]
    ]


def test_a_large_float_through_the_staging_table_comes_back_as_stored(
    client: drover.Client,
) -> None:
    # The staging path reads its rows back from the database: the reference
    # the two slim paths above should match.
    (row,) = client.insert_many(
        [(Anything(value={"amount": 1e23}), drover.InsertOpts(unique_key="float"))]
    )
    assert_stored(client, [row])


# --- insert_many: returned rows against stored rows ---------------------------------------------


def _batch(n: int) -> list[drover.InsertItem]:
    items: list[drover.InsertItem] = []
    for i in range(n):
        if i % 3 == 0:
            items.append(Rich(payload={**RICH, "i": i}, label=f"row {i} ✓"))
        elif i % 3 == 1:
            items.append((Plain(n=i), drover.InsertOpts(queue=f"q{i % 4}", max_attempts=i + 1)))
        else:
            items.append(Plain(n=i))
    return items


@pytest.mark.parametrize("unique", [False, True], ids=["direct_copy", "staged"])
def test_insert_many_returns_the_stored_rows_in_input_order(
    client: drover.Client, conn: Conn, unique: bool
) -> None:
    items = _batch(30)
    if unique:
        items[7] = (Plain(n=7), drover.InsertOpts(unique_key="u7", queue="q3", max_attempts=8))
    before = db_now(conn)
    rows = client.insert_many(items)
    after = db_now(conn)

    assert len(rows) == len(items)
    ids = [r.id for r in rows]
    assert all(a < b for a, b in itertools.pairwise(ids)), ids
    for item, row in zip(items, rows, strict=True):
        args, opts = item if isinstance(item, tuple) else (item, None)
        assert row.kind == args.kind
        assert row.args == args.model_dump(mode="json")
        default_queue = "plain_q" if isinstance(args, Plain) else "default"
        assert row.queue == (opts.queue if opts is not None and opts.queue else default_queue)
        assert row.unique_key == (opts.unique_key if opts is not None else None)
        assert_due_now(row)
    assert rows[1].max_attempts == 2 and rows[2].max_attempts == 3
    assert rows[0].max_attempts == 25
    assert len({r.created_at for r in rows}) == 1
    assert before <= rows[0].created_at <= after
    assert_stored(client, rows)
    assert count_jobs(conn) == len(items)


@pytest.mark.parametrize("unique", [False, True], ids=["direct_copy", "staged"])
def test_insert_many_mixed_schedules_follow_the_dueness_rule(
    client: drover.Client, conn: Conn, unique: bool
) -> None:
    now = datetime.now(UTC)
    far = now + timedelta(days=2, microseconds=11)
    near = now + timedelta(minutes=10)
    zoned = datetime.now(timezone(timedelta(hours=-7))) + timedelta(hours=1)
    long_ago = datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    just_past = db_now(conn) - timedelta(microseconds=1)
    # (scheduled_at, queue, max_attempts) per item; None takes the class default (3).
    plan: list[tuple[datetime | None, str, int | None]] = [
        (far, "alpha", 2),
        (None, "beta", None),
        (long_ago, "alpha", 7),
        (near, "gamma", None),
        (just_past, "beta", 1),
        (None, "alpha", 30),
        (zoned, "delta", 4),
        (long_ago, "gamma", None),
    ]
    items: list[drover.InsertItem] = [
        (Plain(n=i), drover.InsertOpts(scheduled_at=at, queue=queue, max_attempts=attempts))
        for i, (at, queue, attempts) in enumerate(plan)
    ]
    expected = [(at, queue, attempts or 3) for at, queue, attempts in plan]
    items.append(Rich(payload=RICH))  # no opts at all
    expected.append((None, "default", 25))
    if unique:
        items.append((Plain(n=99), drover.InsertOpts(unique_key="mixed", scheduled_at=far)))
        expected.append((far, "plain_q", 3))
    rows = client.insert_many(items)

    created = rows[0].created_at
    assert all(r.created_at == created for r in rows)
    for (at, queue, attempts), row in zip(expected, rows, strict=True):
        assert (row.queue, row.max_attempts) == (queue, attempts)
        if at is not None and at > created:
            assert row.state is drover.JobState.SCHEDULED, row
            assert row.scheduled_at == at
        else:
            assert row.state is drover.JobState.AVAILABLE, row
            assert row.scheduled_at == created
    assert [r.state for r in rows[:8]] == [
        drover.JobState.SCHEDULED,
        drover.JobState.AVAILABLE,
        drover.JobState.AVAILABLE,
        drover.JobState.SCHEDULED,
        drover.JobState.AVAILABLE,
        drover.JobState.AVAILABLE,
        drover.JobState.SCHEDULED,
        drover.JobState.AVAILABLE,
    ]
    assert_due_now(rows[8])
    ids = [r.id for r in rows]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert_stored(client, rows)
    assert count_jobs(conn) == len(items)


def test_insert_many_of_only_future_items_is_all_scheduled(
    client: drover.Client,
) -> None:
    at = datetime.now(UTC) + timedelta(hours=1)
    rows = client.insert_many(
        [(Plain(n=i), drover.InsertOpts(scheduled_at=at + timedelta(seconds=i))) for i in range(5)]
    )
    assert [r.state for r in rows] == [drover.JobState.SCHEDULED] * 5
    assert [r.scheduled_at for r in rows] == [at + timedelta(seconds=i) for i in range(5)]
    assert_stored(client, rows)


class Awkward(drover.JobArgs, kind="awk\tward\\kind\nwith\r breaks ✓"):
    """A kind holding every character COPY's text format escapes."""

    text: str


AWKWARD_QUEUE = "q\\ueue\t\\N\n\r ✓"
AWKWARD_TEXT = '\\N \\. \\\\ tab\t nl\n cr\r \u2028 \x7f 😀 "q"'


@pytest.mark.parametrize("timed", [False, True], ids=["direct", "direct_timed"])
def test_insert_many_copies_escaped_names_and_text_exactly_across_chunks(
    client: drover.Client, conn: Conn, timed: bool
) -> None:
    # drover formats the COPY text itself: every field COPY would misread
    # (backslash, tab, newline, carriage return, a lone \N or \.) must come
    # back as sent, in a batch long enough to span several writes.
    later = datetime.now(UTC) + timedelta(hours=2)
    items: list[drover.InsertItem] = []
    for i in range(2345):
        args = Awkward(text=f"{AWKWARD_TEXT} {i}")
        if i % 5 == 0:
            items.append((args, drover.InsertOpts(queue=AWKWARD_QUEUE)))
        elif timed and i % 5 == 1:
            items.append((args, drover.InsertOpts(scheduled_at=later)))
        else:
            items.append(args)
    rows = client.insert_many(items)

    assert [r.args["text"] for r in rows] == [f"{AWKWARD_TEXT} {i}" for i in range(len(items))]
    assert {r.kind for r in rows} == {Awkward.kind}
    assert [r.queue for r in rows].count(AWKWARD_QUEUE) == 469
    if timed:
        assert [r.state for r in rows].count(drover.JobState.SCHEDULED) == 469
    stored = {
        r[0]: r[1:]
        for r in conn.execute("SELECT id, kind, queue, args->>'text', state::text FROM drover_jobs")
    }
    assert len(stored) == len(items)
    for row in rows:
        assert stored[row.id] == (row.kind, row.queue, row.args["text"], row.state.value)
    assert_stored(client, rows[:5] + rows[995:1005] + rows[-5:])


class AwkwardQueued(drover.JobArgs, kind="awkward_queued", queue=AWKWARD_QUEUE, max_attempts=7):
    text: str


@pytest.mark.parametrize("shape", ["one_class", "class_changes_midway", "options_midway"])
def test_insert_many_of_bare_items_copies_them_exactly_in_order(
    client: drover.Client, conn: Conn, shape: str
) -> None:
    # A batch of one class without options travels as bare JSON texts (a
    # UniformBatch) until another class or an option arrives; either way the
    # rows, their order and every character COPY escapes must come back as sent.
    items: list[drover.InsertItem] = [
        AwkwardQueued(text=f"{AWKWARD_TEXT} {i}") for i in range(2345)
    ]
    if shape == "class_changes_midway":
        items[1500] = Plain(n=1500)
    elif shape == "options_midway":
        items[1500] = (AwkwardQueued(text="opts"), drover.InsertOpts(queue="other", max_attempts=2))
    encoded = encode_batch(items)
    assert isinstance(encoded.params, UniformBatch) == (shape == "one_class")

    rows = client.insert_many(items)

    ids = [r.id for r in rows]
    assert all(a < b for a, b in itertools.pairwise(ids)), ids
    for i, (item, row) in enumerate(zip(items, rows, strict=True)):
        args, opts = item if isinstance(item, tuple) else (item, None)
        assert (row.kind, row.args) == (args.kind, args.model_dump(mode="json")), i
        if opts is not None:
            assert (row.queue, row.max_attempts) == ("other", 2)
        elif isinstance(args, Plain):
            assert (row.queue, row.max_attempts) == ("plain_q", 3)
        else:
            assert (row.queue, row.max_attempts) == (AWKWARD_QUEUE, 7)
        assert row.errors == () and row.state is drover.JobState.AVAILABLE
    stored = {
        r[0]: r[1:]
        for r in conn.execute("SELECT id, kind, queue, args, max_attempts FROM drover_jobs")
    }
    assert len(stored) == len(items)
    for row in rows:
        assert stored[row.id] == (row.kind, row.queue, row.args, row.max_attempts)
    assert_stored(client, rows[:3] + rows[999:1002] + rows[1499:1502] + rows[-3:])


# --- insert_many_tx inside the caller's transaction ---------------------------------------------

TxBatch = Callable[[], list[drover.InsertItem]]

TX_BATCHES: dict[str, TxBatch] = {
    "direct": lambda: [Plain(n=1), (Rich(payload=RICH), drover.InsertOpts(queue="tx"))],
    "direct_timed": lambda: [
        Plain(n=1),
        (Plain(n=2), drover.InsertOpts(scheduled_at=datetime.now(UTC) + timedelta(hours=1))),
        (Plain(n=3), drover.InsertOpts(scheduled_at=datetime(2000, 1, 1, tzinfo=UTC))),
    ],
    "staged": lambda: [Plain(n=1), (Plain(n=2), drover.InsertOpts(unique_key="tx-unique"))],
}


@pytest.mark.parametrize("batch", list(TX_BATCHES))
def test_insert_many_tx_is_invisible_until_commit(
    client: drover.Client, conn: Conn, user_conn: Conn, batch: str
) -> None:
    items = TX_BATCHES[batch]()
    user_conn.execute("INSERT INTO marker VALUES ('before')")
    rows = client.insert_many_tx(user_conn, items)
    assert len(rows) == len(items)
    assert user_conn.info.transaction_status == INTRANS
    # Seen from the caller's own transaction, not from anyone else.
    own = user_conn.execute(
        "SELECT count(*) FROM drover_jobs WHERE id = ANY(%s)", ([r.id for r in rows],)
    ).fetchone()
    assert own == (len(rows),)
    assert count_jobs(conn) == 0
    assert all(invisible(client, r.id) for r in rows)
    user_conn.commit()
    assert count_jobs(conn) == len(rows)
    assert markers(conn) == ["before"]
    assert_stored(client, rows)


@pytest.mark.parametrize(
    "batch_first",
    [True, False],
    ids=["batch-opens-the-transaction", "batch-after-a-marker"],
)
@pytest.mark.parametrize("batch", list(TX_BATCHES))
def test_insert_many_tx_rolls_back_with_the_callers_transaction(
    client: drover.Client, conn: Conn, user_conn: Conn, batch: str, batch_first: bool
) -> None:
    if batch_first:
        # The batch is the very first statement: it must open the caller's
        # transaction, not run (and commit) one of its own.
        assert user_conn.info.transaction_status == pq.TransactionStatus.IDLE
    else:
        user_conn.execute("INSERT INTO marker VALUES ('before')")
    rows = client.insert_many_tx(user_conn, TX_BATCHES[batch]())
    assert rows
    assert user_conn.info.transaction_status == INTRANS
    if batch_first:
        user_conn.execute("INSERT INTO marker VALUES ('after')")
    assert markers(conn) == []
    user_conn.rollback()
    assert count_jobs(conn) == 0
    assert markers(conn) == []
    assert all(invisible(client, r.id) for r in rows)


@pytest.mark.parametrize("batch", list(TX_BATCHES))
def test_insert_many_tx_first_in_a_transaction_block_rolls_back_with_it(
    client: drover.Client, conn: Conn, user_conn: Conn, batch: str
) -> None:
    def attempt() -> None:
        with user_conn.transaction():
            client.insert_many_tx(user_conn, TX_BATCHES[batch]())
            user_conn.execute("INSERT INTO marker VALUES ('inside')")
            raise Rollback

    with pytest.raises(Rollback):
        attempt()
    assert count_jobs(conn) == 0
    assert markers(conn) == []


def test_two_insert_many_tx_calls_in_one_transaction(
    client: drover.Client, conn: Conn, user_conn: Conn
) -> None:
    first = client.insert_many_tx(user_conn, TX_BATCHES["direct"]())
    second = client.insert_many_tx(user_conn, TX_BATCHES["direct_timed"]())
    third = client.insert_many_tx(user_conn, TX_BATCHES["staged"]())
    fourth = client.insert_many_tx(user_conn, [Plain(n=4), Plain(n=5)])
    assert count_jobs(conn) == 0
    user_conn.commit()
    rows = first + second + third + fourth
    ids = [r.id for r in rows]
    assert all(a < b for a, b in itertools.pairwise(ids)), ids
    # One transaction, one clock.
    assert len({r.created_at for r in rows}) == 1
    assert [r.state for r in second] == [
        drover.JobState.AVAILABLE,
        drover.JobState.SCHEDULED,
        drover.JobState.AVAILABLE,
    ]
    assert_stored(client, rows)
    assert count_jobs(conn) == len(rows)


# --- insert_many: invalid items write nothing ---------------------------------------------------

BAD_ITEMS: list[tuple[object, str]] = [
    ("not args", "job args must be a drover.JobArgs instance, not str"),
    (None, "not NoneType"),
    ({"n": 1}, "not dict"),
    ((Plain(n=0), None, None), "expected \\(JobArgs, InsertOpts\\), got a 3-tuple"),
    ((Plain(n=0),), "got a 1-tuple"),
    ((Plain(n=0), "opts"), "insert options must be a drover.InsertOpts, not str"),
    ((Plain(n=0), {"queue": "q"}), "insert options must be a drover.InsertOpts, not dict"),
    ((None, None), "job args must be a drover.JobArgs"),
    (Anything(value={"s": "nul\x00"}), "NUL character"),
]


def _with_bad(position: int, bad: object, unique: bool) -> list[Any]:
    items: list[Any] = [
        Plain(n=1),
        (Plain(n=2), drover.InsertOpts(scheduled_at=datetime.now(UTC) + timedelta(hours=1))),
        (Plain(n=3), drover.InsertOpts(unique_key="k") if unique else None),
        Rich(payload=RICH),
    ]
    items.insert(position, bad)
    return items


BAD_IDS = ["str", "none", "dict", "3-tuple", "1-tuple", "opts-str", "opts-dict", "none-pair", "nul"]


@pytest.mark.parametrize(("bad", "message"), BAD_ITEMS, ids=BAD_IDS)
def test_insert_many_with_an_invalid_item_raises_naming_it_and_writes_nothing(
    client: drover.Client, conn: Conn, bad: object, message: str
) -> None:
    for unique in (False, True):
        for position in (0, 2, 4):
            with pytest.raises(drover.InvalidJobArgs, match=f"^item {position}: .*{message}"):
                client.insert_many(_with_bad(position, bad, unique))
            assert count_jobs(conn) == 0
            assert last_id(conn) is None


@pytest.mark.parametrize(("bad", "message"), BAD_ITEMS, ids=BAD_IDS)
def test_insert_many_tx_with_an_invalid_item_keeps_the_transaction_usable(
    client: drover.Client, conn: Conn, user_conn: Conn, bad: object, message: str
) -> None:
    kept: list[str] = []
    for unique in (False, True):
        for position in (0, 4):
            note = f"kept {unique} {position}"
            user_conn.execute("INSERT INTO marker VALUES (%s)", (note,))
            kept.append(note)
            with pytest.raises(drover.InvalidJobArgs, match=f"^item {position}: .*{message}"):
                client.insert_many_tx(user_conn, _with_bad(position, bad, unique))
            assert user_conn.info.transaction_status == INTRANS
            assert user_conn.execute("SELECT 1").fetchone() == (1,)
            user_conn.commit()
            assert markers(conn) == sorted(kept)
            assert count_jobs(conn) == 0
            assert last_id(conn) is None


# --- insert_many: unique keys in a mixed batch --------------------------------------------------


def test_a_mixed_batch_colliding_with_an_existing_job_writes_nothing(
    client: drover.Client, conn: Conn
) -> None:
    existing = client.insert(Plain(n=0), drover.InsertOpts(unique_key="taken", queue="mq"))
    items: list[drover.InsertItem] = [
        Plain(n=1),
        (Plain(n=2), drover.InsertOpts(scheduled_at=datetime.now(UTC) + timedelta(hours=1))),
        (Plain(n=3), drover.InsertOpts(unique_key="free", queue="mq")),
        (Rich(payload=RICH), drover.InsertOpts(queue="other", max_attempts=2)),
        (Plain(n=4), drover.InsertOpts(unique_key="taken", queue="mq")),
        Plain(n=5),
    ]
    with pytest.raises(drover.DuplicateJob, match="^item 4: .*'taken'") as info:
        client.insert_many(items)
    assert (info.value.queue, info.value.kind, info.value.unique_key) == (
        "mq",
        "paths_plain",
        "taken",
    )
    assert count_jobs(conn) == 1
    assert conn.execute("SELECT id FROM drover_jobs").fetchall() == [(existing.id,)]

    # Without the collision the same batch goes in whole.
    items[4] = (Plain(n=4), drover.InsertOpts(unique_key="also-free", queue="mq"))
    rows = client.insert_many(items)
    assert_stored(client, rows)
    assert count_jobs(conn) == 1 + len(items)


def test_a_mixed_batch_colliding_inside_insert_many_tx_keeps_the_transaction(
    client: drover.Client, conn: Conn, user_conn: Conn
) -> None:
    client.insert(Plain(n=0), drover.InsertOpts(unique_key="taken"))
    user_conn.execute("INSERT INTO marker VALUES ('kept')")
    kept = client.insert_many_tx(user_conn, [Plain(n=1), Plain(n=2)])
    with pytest.raises(drover.DuplicateJob, match="^item 2: "):
        client.insert_many_tx(
            user_conn,
            [
                Plain(n=3),
                (Plain(n=4), drover.InsertOpts(queue="x")),
                (Plain(n=5), drover.InsertOpts(unique_key="taken")),
            ],
        )
    assert user_conn.info.transaction_status == INTRANS
    assert user_conn.execute("SELECT 1").fetchone() == (1,)
    user_conn.commit()
    assert markers(conn) == ["kept"]
    assert count_jobs(conn) == 1 + len(kept)
    assert_stored(client, kept)
