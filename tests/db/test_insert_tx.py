"""``Client.insert_tx`` / ``insert_many_tx``: jobs inserted inside the caller's transaction.

Every test runs against the real test server. The caller's connection is a
psycopg ``Connection`` or ``Cursor``, a Django connection or cursor wrapper, or
a SQLAlchemy ``Session`` or ``Connection``; whichever it is, the job must exist
if and only if the caller's transaction commits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, TypeAlias

import django
import psycopg
import pytest
from django.conf import settings
from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from jobdb import invisible
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy import Connection as SAConnection
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.orm import Session

import drover

PgConn: TypeAlias = psycopg.Connection[tuple[Any, ...]]

INTRANS = pq.TransactionStatus.INTRANS


class SendReceipt(drover.JobArgs, kind="send_receipt"):
    order_id: int


class Rollback(Exception):
    """Raised inside a transaction block to make it roll back."""


# --- helpers and fixtures -----------------------------------------------------------------------


def count(conn: PgConn, table: str) -> int:
    """Committed rows in ``table``, seen from the autocommit ``conn`` fixture."""
    row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
    assert row is not None
    return int(row[0])


def job_ids(conn: PgConn) -> list[int]:
    return [int(r[0]) for r in conn.execute("SELECT id FROM drover_jobs ORDER BY id").fetchall()]


@pytest.fixture
def orders(conn: PgConn) -> str:
    """A domain table written in the same transaction as the job."""
    conn.execute("CREATE TABLE orders (id serial PRIMARY KEY, note text)")
    return "orders"


@pytest.fixture
def user_conn(db_url: str, orders: str) -> Iterator[PgConn]:
    """The application's own connection: psycopg defaults, so not in autocommit mode."""
    c = psycopg.connect(db_url)
    assert c.autocommit is False
    yield c
    # close() without commit: whatever the test left open is discarded.
    c.close()


def insert_order(c: PgConn, note: str = "order") -> int:
    row = c.execute("INSERT INTO orders (note) VALUES (%s) RETURNING id", (note,)).fetchone()
    assert row is not None
    return int(row[0])


def _django_entry(db_url: str) -> dict[str, str]:
    params = conninfo_to_dict(db_url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": str(params["dbname"]),
        "HOST": str(params.get("host") or ""),
        "PORT": str(params.get("port") or ""),
        "USER": str(params.get("user") or ""),
        "PASSWORD": str(params.get("password") or ""),
    }


@pytest.fixture
def django_db(db_url: str, orders: str) -> Iterator[BaseDatabaseWrapper]:
    """Django's ``default`` connection, pointed at this test's database.

    Settings are process-global, so they are configured once; each test then
    retargets the connection's settings and closes it again so that its
    database can be dropped.
    """
    entry = _django_entry(db_url)
    if not settings.configured:
        settings.configure(
            DATABASES={
                "default": dict(entry),
                "lite": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
            },
            USE_TZ=True,
            INSTALLED_APPS=[],
        )
        django.setup()
    connections.close_all()
    connections["default"].settings_dict.update(entry)
    try:
        yield connections["default"]
    finally:
        connections.close_all()


@pytest.fixture
def engine(db_url: str, orders: str) -> Iterator[Engine]:
    # The creator form keeps the embedded server's socket-directory host intact.
    eng = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(db_url))
    try:
        yield eng
    finally:
        eng.dispose()


# --- every kind of caller's transaction ---------------------------------------------------------


@dataclass(frozen=True)
class CallerTx:
    """An open transaction of the application's: what it hands ``insert_tx``, and a domain write."""

    handle: object
    add_order: Callable[[str], int]


def _psycopg_order(c: PgConn) -> Callable[[str], int]:
    return lambda note: insert_order(c, note)


def _sqlalchemy_order(c: Session | SAConnection) -> Callable[[str], int]:
    def add_order(note: str) -> int:
        sql = text("INSERT INTO orders (note) VALUES (:note) RETURNING id")
        return int(c.execute(sql, {"note": note}).scalar_one())

    return add_order


@contextmanager
def _psycopg_block(c: PgConn) -> Iterator[CallerTx]:
    """``with conn.transaction():``, committed at the end of the block."""
    with c.transaction():
        yield CallerTx(c, _psycopg_order(c))


@contextmanager
def _ended_by_the_caller(
    tx: CallerTx, commit: Callable[[], None], rollback: Callable[[], None]
) -> Iterator[CallerTx]:
    """A transaction the application ends itself: commit after the block, rollback on an error."""
    try:
        yield tx
    except BaseException:
        rollback()
        raise
    commit()


def _psycopg_implicit(c: PgConn) -> AbstractContextManager[CallerTx]:
    """No ``transaction()`` block: psycopg's implicit transaction, ended by the caller."""
    return _ended_by_the_caller(CallerTx(c, _psycopg_order(c)), c.commit, c.rollback)


@contextmanager
def _django_atomic(_: BaseDatabaseWrapper) -> Iterator[CallerTx]:
    from django.db import connection

    def add_order(note: str) -> int:
        with connection.cursor() as cur:
            cur.execute("INSERT INTO orders (note) VALUES (%s) RETURNING id", [note])
            return int(cur.fetchone()[0])

    with transaction.atomic():
        yield CallerTx(connection, add_order)


@contextmanager
def _sqlalchemy_session(engine: Engine) -> Iterator[CallerTx]:
    """A ``Session``, committed or rolled back by the caller."""
    with Session(engine) as s:
        tx = CallerTx(s, _sqlalchemy_order(s))
        with _ended_by_the_caller(tx, s.commit, s.rollback):
            yield tx


@contextmanager
def _sqlalchemy_begin(engine: Engine) -> Iterator[CallerTx]:
    """``with engine.begin() as conn:``, committed at the end of the block."""
    with engine.begin() as sa_conn:
        yield CallerTx(sa_conn, _sqlalchemy_order(sa_conn))


OpenTx = Callable[[], AbstractContextManager[CallerTx]]

# Each kind of transaction: the fixture it runs on, and how it opens one (commit at
# the end of the block, rollback when an exception leaves it).
FLAVOURS: dict[str, tuple[str, Callable[[Any], AbstractContextManager[CallerTx]]]] = {
    "psycopg-transaction-block": ("user_conn", _psycopg_block),
    "psycopg-implicit": ("user_conn", _psycopg_implicit),
    "django-atomic": ("django_db", _django_atomic),
    "sqlalchemy-session": ("engine", _sqlalchemy_session),
    "sqlalchemy-engine-begin": ("engine", _sqlalchemy_begin),
}


@pytest.fixture(params=list(FLAVOURS))
def open_tx(request: pytest.FixtureRequest) -> OpenTx:
    fixture, opener = FLAVOURS[request.param]
    resource = request.getfixturevalue(fixture)
    return lambda: opener(resource)


def test_rollback_discards_order_and_job_and_commit_keeps_both(
    client: drover.Client, conn: PgConn, open_tx: OpenTx
) -> None:
    def place_order_then_fail() -> None:
        with open_tx() as tx:
            order_id = tx.add_order("rolled back")
            client.insert_tx(tx.handle, SendReceipt(order_id=order_id))
            assert count(conn, "drover_jobs") == 0
            raise Rollback

    with pytest.raises(Rollback):
        place_order_then_fail()
    assert count(conn, "orders") == 0
    assert count(conn, "drover_jobs") == 0

    # The same connection, or its pool, takes the next transaction.
    with open_tx() as tx:
        order_id = tx.add_order("kept")
        row = client.insert_tx(tx.handle, SendReceipt(order_id=order_id))
        (batched,) = client.insert_many_tx(tx.handle, [SendReceipt(order_id=order_id)])
        # The jobs are in the open transaction: no other connection can see them yet.
        assert count(conn, "drover_jobs") == 0
        assert invisible(client, row.id)

    assert row.kind == "send_receipt"
    assert row.queue == "default"
    # Django loads jsonb as text on its connections; drover still returns decoded args.
    assert row.args == batched.args == {"order_id": order_id}
    assert row.state is drover.JobState.AVAILABLE
    assert count(conn, "orders") == 1
    assert job_ids(conn) == [row.id, batched.id]
    stored = client.get_job(row.id)
    assert stored.args == {"order_id": order_id}


def test_insert_many_tx_as_the_first_statement_rolls_back_with_the_transaction(
    client: drover.Client, conn: PgConn, open_tx: OpenTx
) -> None:
    # Nothing has run in the transaction yet: drover must not begin (and commit)
    # one of its own, nor turn a nested transaction into the outermost one.
    def insert_batch_then_fail() -> None:
        with open_tx() as tx:
            client.insert_many_tx(tx.handle, [SendReceipt(order_id=1), SendReceipt(order_id=2)])
            raise Rollback

    with pytest.raises(Rollback):
        insert_batch_then_fail()
    assert count(conn, "drover_jobs") == 0


# --- psycopg Cursor -----------------------------------------------------------------------------


def test_psycopg_cursor_resolves_to_its_connection_and_keeps_its_result_set(
    client: drover.Client, conn: PgConn, user_conn: PgConn
) -> None:
    cur = user_conn.cursor()
    cur.execute("SELECT 42")

    row = client.insert_tx(cur, SendReceipt(order_id=7))

    assert cur.fetchone() == (42,)
    assert cur.fetchone() is None
    # The job went into the cursor's connection's transaction, not a committed one of its own.
    assert user_conn.info.transaction_status == INTRANS
    assert count(conn, "drover_jobs") == 0
    user_conn.commit()
    assert job_ids(conn) == [row.id]


# --- no usable transaction ----------------------------------------------------------------------


def test_autocommit_connection_raises_not_in_transaction_and_writes_nothing(
    client: drover.Client, conn: PgConn
) -> None:
    assert conn.autocommit is True
    with pytest.raises(drover.NotInTransaction, match="autocommit"):
        client.insert_tx(conn, SendReceipt(order_id=1))
    with pytest.raises(drover.NotInTransaction, match="autocommit"):
        client.insert_tx(conn.cursor(), SendReceipt(order_id=1))
    with pytest.raises(drover.NotInTransaction, match="autocommit"):
        client.insert_many_tx(conn, [SendReceipt(order_id=1), SendReceipt(order_id=2)])
    assert count(conn, "drover_jobs") == 0


def test_an_autocommit_connection_inside_an_explicit_transaction_block_is_joined(
    client: drover.Client, conn: PgConn, db_url: str
) -> None:
    # psycopg's conn.transaction() issues BEGIN on an autocommit connection: there is a
    # transaction to join, and the job shares its fate.
    with psycopg.connect(db_url, autocommit=True) as app:
        with app.transaction():
            client.insert_tx(app, SendReceipt(order_id=1))
        with app.transaction() as tx:
            client.insert_tx(app, SendReceipt(order_id=2))
            raise psycopg.Rollback(tx)
    rows = conn.execute("SELECT args->>'order_id' FROM drover_jobs").fetchall()
    assert rows == [("1",)]


def test_failed_transaction_raises_not_in_transaction(
    client: drover.Client, conn: PgConn, user_conn: PgConn
) -> None:
    insert_order(user_conn)
    with pytest.raises(psycopg.errors.UndefinedTable):
        user_conn.execute("SELECT * FROM no_such_table")
    assert user_conn.info.transaction_status == pq.TransactionStatus.INERROR

    with pytest.raises(drover.NotInTransaction, match="already failed"):
        client.insert_tx(user_conn, SendReceipt(order_id=1))
    with pytest.raises(drover.NotInTransaction, match="already failed"):
        client.insert_many_tx(user_conn, [SendReceipt(order_id=1)])

    user_conn.rollback()
    assert count(conn, "drover_jobs") == 0
    assert count(conn, "orders") == 0


# --- unsupported objects and validation order ---------------------------------------------------


def test_unsupported_connection_is_a_type_error_and_a_drover_error() -> None:
    assert issubclass(drover.UnsupportedConnection, TypeError)
    assert issubclass(drover.UnsupportedConnection, drover.DroverError)


@pytest.mark.parametrize(
    "obj",
    [42, object(), None, "postgresql://localhost/app"],
    ids=["int", "object", "none", "conninfo-string"],
)
def test_unsupported_objects_raise_unsupported_connection(
    client: drover.Client, conn: PgConn, obj: object
) -> None:
    with pytest.raises(drover.UnsupportedConnection, match="insert_tx needs") as excinfo:
        client.insert_tx(obj, SendReceipt(order_id=1))
    assert isinstance(excinfo.value, TypeError)
    with pytest.raises(TypeError, match="insert_tx needs"):
        client.insert_many_tx(obj, [SendReceipt(order_id=1)])
    assert count(conn, "drover_jobs") == 0


def test_closed_connection_raises_unsupported_connection(
    client: drover.Client, db_url: str
) -> None:
    c = psycopg.connect(db_url)
    c.close()
    with pytest.raises(drover.UnsupportedConnection, match="closed"):
        client.insert_tx(c, SendReceipt(order_id=1))


def test_args_are_validated_before_the_connection_is_looked_at(
    client: drover.Client, conn: PgConn
) -> None:
    with pytest.raises(drover.InvalidJobArgs, match="must be a drover.JobArgs instance"):
        client.insert_tx(object(), "not args")  # type: ignore[call-overload]
    with pytest.raises(drover.InvalidJobArgs, match="needs a list"):
        client.insert_many_tx(object(), "not a list")  # type: ignore[arg-type]
    with pytest.raises(drover.InvalidJobArgs, match="item 1"):
        client.insert_many_tx(object(), [SendReceipt(order_id=1), "not args"])  # type: ignore[list-item]
    # Also before the transaction check: an autocommit connection is not the complaint.
    with pytest.raises(drover.InvalidJobArgs):
        client.insert_tx(conn, "not args")  # type: ignore[call-overload]
    with pytest.raises(drover.InvalidJobArgs):
        client.insert_tx(conn, SendReceipt(order_id=1), opts="nope")  # type: ignore[call-overload]


# --- unique keys inside the caller's transaction ------------------------------------------------


def test_duplicate_unique_key_leaves_the_transaction_usable(
    client: drover.Client, conn: PgConn, user_conn: PgConn
) -> None:
    opts = drover.InsertOpts(unique_key="k")
    first = client.insert_tx(user_conn, SendReceipt(order_id=1), opts)

    with pytest.raises(drover.DuplicateJob, match="unique key 'k'") as excinfo:
        client.insert_tx(user_conn, SendReceipt(order_id=2), opts)
    assert (excinfo.value.queue, excinfo.value.kind, excinfo.value.unique_key) == (
        "default",
        "send_receipt",
        "k",
    )

    # Not poisoned: the next statement runs and the commit keeps everything.
    assert user_conn.info.transaction_status == INTRANS
    insert_order(user_conn, "after the duplicate")
    user_conn.commit()

    assert job_ids(conn) == [first.id]
    assert count(conn, "orders") == 1
    stored = client.get_job(first.id)
    assert stored.args == {"order_id": 1}
    assert stored.unique_key == "k"


def test_insert_many_tx_collision_writes_nothing_and_keeps_the_transaction(
    client: drover.Client, conn: PgConn, user_conn: PgConn
) -> None:
    with user_conn.transaction():
        first = client.insert_tx(
            user_conn, SendReceipt(order_id=1), drover.InsertOpts(unique_key="k")
        )

        # Collides with the job inserted above in this same transaction.
        with pytest.raises(drover.DuplicateJob, match="item 1: .*unique key 'k'"):
            client.insert_many_tx(
                user_conn,
                [
                    SendReceipt(order_id=2),
                    (SendReceipt(order_id=3), drover.InsertOpts(unique_key="k")),
                ],
            )
        # Two items of one batch collide with each other.
        with pytest.raises(drover.DuplicateJob, match="unique key 'pair'"):
            client.insert_many_tx(
                user_conn,
                [
                    (SendReceipt(order_id=4), drover.InsertOpts(unique_key="pair")),
                    (SendReceipt(order_id=5), drover.InsertOpts(unique_key="pair")),
                ],
            )

        assert user_conn.info.transaction_status == INTRANS
        insert_order(user_conn, "after the failed batches")

    assert job_ids(conn) == [first.id]
    assert count(conn, "orders") == 1


# --- batches ------------------------------------------------------------------------------------


def test_insert_many_tx_twice_in_one_transaction_commits_all_in_input_order(
    client: drover.Client, conn: PgConn, user_conn: PgConn
) -> None:
    with user_conn.transaction():
        insert_order(user_conn)
        rows1 = client.insert_many_tx(user_conn, [SendReceipt(order_id=n) for n in (3, 1, 2)])
        rows2 = client.insert_many_tx(
            user_conn,
            [
                (SendReceipt(order_id=9), drover.InsertOpts(queue="other")),
                SendReceipt(order_id=8),
            ],
        )
        assert count(conn, "drover_jobs") == 0

    assert [r.args["order_id"] for r in rows1] == [3, 1, 2]
    assert [r.args["order_id"] for r in rows2] == [9, 8]
    assert [r.queue for r in rows2] == ["other", "default"]
    returned = {r.id: r.args["order_id"] for r in rows1 + rows2}
    assert len(returned) == 5
    stored = conn.execute("SELECT id, (args->>'order_id')::int FROM drover_jobs").fetchall()
    assert dict(stored) == returned


def test_insert_many_tx_rolled_back_with_the_transaction(
    client: drover.Client, conn: PgConn, user_conn: PgConn
) -> None:
    insert_order(user_conn)
    client.insert_many_tx(user_conn, [SendReceipt(order_id=1), SendReceipt(order_id=2)])
    client.insert_many_tx(user_conn, [SendReceipt(order_id=3)])
    assert count(conn, "drover_jobs") == 0
    user_conn.rollback()

    assert count(conn, "drover_jobs") == 0
    assert count(conn, "orders") == 0


def test_insert_many_tx_as_first_statement_does_not_commit(
    client: drover.Client, conn: PgConn, user_conn: PgConn
) -> None:
    assert user_conn.info.transaction_status == pq.TransactionStatus.IDLE
    client.insert_many_tx(user_conn, [SendReceipt(order_id=1)])
    assert user_conn.info.transaction_status == INTRANS
    user_conn.rollback()
    assert count(conn, "drover_jobs") == 0


# --- no commit, no session changes --------------------------------------------------------------


def test_insert_tx_never_commits_and_changes_no_session_settings(
    client: drover.Client, conn: PgConn, user_conn: PgConn
) -> None:
    settings_sql = {
        "TimeZone": "SET TimeZone TO 'Asia/Kolkata'",
        "search_path": "SET search_path TO public",
        "statement_timeout": "SET statement_timeout TO '12s'",
        "application_name": "SET application_name TO 'shop'",
    }
    for statement in settings_sql.values():
        user_conn.execute(statement)

    def show_all() -> dict[str, str]:
        shown = {}
        for name in settings_sql:
            row = user_conn.execute(f"SHOW {name}").fetchone()
            assert row is not None
            shown[name] = str(row[0])
        return shown

    before = show_all()
    assert before["TimeZone"] == "Asia/Kolkata"
    prepare_threshold = user_conn.prepare_threshold

    client.insert_tx(user_conn, SendReceipt(order_id=1))
    client.insert_many_tx(user_conn, [SendReceipt(order_id=2), SendReceipt(order_id=3)])

    assert user_conn.info.transaction_status == INTRANS
    assert user_conn.autocommit is False
    assert user_conn.prepare_threshold == prepare_threshold
    assert show_all() == before
    assert count(conn, "drover_jobs") == 0
    user_conn.rollback()
    assert count(conn, "drover_jobs") == 0


# --- Django -------------------------------------------------------------------------------------


def test_django_cursor_wrapper_inside_atomic(
    client: drover.Client, conn: PgConn, django_db: BaseDatabaseWrapper
) -> None:
    from django.db import connection

    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("INSERT INTO orders (note) VALUES (%s)", ["django cursor"])
        cur.execute("SELECT 42")
        row = client.insert_tx(cur, SendReceipt(order_id=1))
        assert cur.fetchone() == (42,)

    assert count(conn, "orders") == 1
    assert job_ids(conn) == [row.id]


def test_django_nested_atomic_rolls_back_only_the_inner_job(
    client: drover.Client, conn: PgConn, django_db: BaseDatabaseWrapper
) -> None:
    from django.db import connection

    def inner_block_fails() -> None:
        with transaction.atomic():
            client.insert_tx(connection, SendReceipt(order_id=2))
            raise Rollback

    with transaction.atomic():
        outer = client.insert_tx(connection, SendReceipt(order_id=1))
        with pytest.raises(Rollback):
            inner_block_fails()

    assert job_ids(conn) == [outer.id]


def test_django_outside_atomic_raises_not_in_transaction(
    client: drover.Client, conn: PgConn, django_db: BaseDatabaseWrapper
) -> None:
    from django.db import connection

    with pytest.raises(drover.NotInTransaction, match="autocommit"):
        client.insert_tx(connection, SendReceipt(order_id=1))
    with connection.cursor() as cur, pytest.raises(drover.NotInTransaction):
        client.insert_tx(cur, SendReceipt(order_id=1))
    assert count(conn, "drover_jobs") == 0


def test_django_non_postgresql_connection_is_unsupported(
    client: drover.Client, django_db: BaseDatabaseWrapper
) -> None:
    if "lite" not in settings.DATABASES:
        pytest.skip("Django was configured elsewhere without the sqlite alias")
    with pytest.raises(drover.UnsupportedConnection, match="'sqlite'"):
        client.insert_tx(connections["lite"], SendReceipt(order_id=1))
