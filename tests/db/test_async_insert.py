"""``drover.AsyncClient``: asyncio inserts on real PostgreSQL, with ``Client``'s guarantees.

Every test drives its coroutine with ``asyncio.run`` (no pytest plugin). The
rows, errors and wake-ups are compared with what the synchronous client does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import psycopg
import pytest
from jobdb import Conn, MakeClient, Poll
from psycopg_pool import AsyncConnectionPool, ConnectionPool
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine

import drover
from drover._db.insert import copy_chunks

T = TypeVar("T")


class Email(drover.JobArgs, kind="async_email"):
    to: str


class Report(drover.JobArgs, kind="async_report", queue="reports"):
    day: int


class Rollback(Exception):
    """Raised inside a transaction block to make it roll back."""


def run(factory: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await factory()

    return asyncio.run(main())


def count_jobs(conn: Conn) -> int:
    row = conn.execute("SELECT count(*) FROM drover_jobs").fetchone()
    assert row is not None
    return int(row[0])


def async_engine(db_url: str) -> AsyncEngine:
    # The creator form keeps the embedded server's socket-directory host intact.
    return create_async_engine(
        "postgresql+psycopg://",
        async_creator=lambda: psycopg.AsyncConnection.connect(db_url),
    )


@pytest.fixture
def listener(db_url: str) -> Any:
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("LISTEN drover")
        yield c


def heard(listener: psycopg.Connection[Any], timeout: float) -> list[str]:
    return [n.payload for n in listener.notifies(timeout=timeout, stop_after=1)]


# --- AsyncClient.insert --------------------------------------------------------------------------


def test_insert_returns_the_row_the_sync_client_would(db_url: str, conn: Conn) -> None:
    async def go() -> tuple[drover.JobRow, drover.JobRow]:
        async with drover.AsyncClient(db_url) as client:
            plain = await client.insert(Email(to="a@x"))
            later = datetime.now(UTC) + timedelta(hours=1)
            opts = drover.InsertOpts(
                scheduled_at=later, priority=7, tags=("t1",), meta={"m": 1}, max_attempts=3
            )
            decorated = await client.insert(Report(day=2), opts)
            return plain, decorated

    plain, decorated = run(go)
    assert plain.kind == "async_email"
    assert plain.queue == "default"
    assert plain.state is drover.JobState.AVAILABLE
    assert plain.args == {"to": "a@x"}
    assert decorated.queue == "reports"
    assert decorated.state is drover.JobState.SCHEDULED
    assert decorated.priority == 7
    assert decorated.tags == ("t1",)
    assert dict(decorated.meta) == {"m": 1}
    assert decorated.max_attempts == 3
    sync = drover.Client(db_url)
    try:
        stored = sync.get_job(decorated.id)
    finally:
        sync.close()
    assert stored.tags == ("t1",)
    assert dict(stored.meta) == {"m": 1}
    assert stored.state is drover.JobState.SCHEDULED
    assert count_jobs(conn) == 2


def test_bad_input_is_refused_before_any_connection(db_url: str, conn: Conn) -> None:
    async def go() -> tuple[bool, list[str]]:
        client = drover.AsyncClient(db_url)
        errors = []
        for bad in (
            lambda: client.insert({"to": "x"}),  # type: ignore[call-overload]
            lambda: client.insert_many([Email(to="ok"), "nope"]),  # type: ignore[list-item]
        ):
            with pytest.raises(drover.InvalidJobArgs) as info:
                await bad()
            errors.append(str(info.value))
        with pytest.raises(drover.InvalidArgument, match="options of a workflow"):
            await client.insert(  # type: ignore[call-overload]
                drover.chain(Email(to="a"), Email(to="b")), drover.InsertOpts()
            )
        untouched = client.pool.closed
        await client.close()
        return untouched, errors

    untouched, errors = run(go)
    assert untouched, "a refused insert opened the pool"
    assert "dict" in errors[0]
    assert errors[1].startswith("item 1: ")
    assert count_jobs(conn) == 0


def test_config_and_pool_are_validated(db_url: str) -> None:
    with pytest.raises(drover.InvalidArgument, match="drover.Config"):
        drover.AsyncClient(db_url, config="fast")  # type: ignore[arg-type]
    with pytest.raises(drover.InvalidArgument, match="empty string"):
        drover.AsyncClient("  ")
    sync_pool: ConnectionPool[Any] = ConnectionPool(db_url, open=False)
    with pytest.raises(drover.InvalidArgument, match=r"AsyncConnectionPool.*drover\.Client"):
        drover.AsyncClient(sync_pool)  # type: ignore[arg-type]


def test_unique_key_and_unique_identity(db_url: str, conn: Conn) -> None:
    async def go() -> tuple[drover.JobRow, drover.JobRow]:
        async with drover.AsyncClient(db_url) as client:
            await client.insert(Email(to="a"), drover.InsertOpts(unique_key="k"))
            with pytest.raises(drover.DuplicateJob) as info:
                await client.insert(Email(to="b"), drover.InsertOpts(unique_key="k"))
            assert info.value.unique_key == "k"
            opts = drover.InsertOpts(unique=drover.Unique(by_args=True), tags=("u",))
            first = await client.insert(Email(to="same"), opts)
            second = await client.insert(Email(to="same"), opts)
            return first, second

    first, second = run(go)
    assert not first.duplicate
    assert second.duplicate
    assert second.id == first.id
    assert first.tags == ("u",)
    assert count_jobs(conn) == 2


def test_database_errors_become_drover_errors(empty_db_url: str) -> None:
    async def go() -> None:
        async with drover.AsyncClient(empty_db_url) as client:
            with pytest.raises(drover.SchemaMissing):
                await client.insert(Email(to="a"))
            with pytest.raises(drover.SchemaMissing):
                await client.insert_many([Email(to="a")])
            # The caller's connection: no pool borrow around it, the statement's own translation.
            async with await psycopg.AsyncConnection.connect(empty_db_url) as aconn:
                with pytest.raises(drover.SchemaMissing):
                    await client.insert_tx(aconn, Email(to="a"))
            async with await psycopg.AsyncConnection.connect(empty_db_url) as aconn:
                with pytest.raises(drover.SchemaMissing):
                    await client.insert_many_tx(aconn, [Email(to="a"), Email(to="b")])

    run(go)


def test_an_unreachable_server_fails_the_insert_and_the_next_one_retries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("drover.async_client._OPEN_TIMEOUT", 1.0)

    async def go() -> list[str]:
        client = drover.AsyncClient("postgresql://u:sekret@127.0.0.1:1/x?connect_timeout=1")
        messages = []
        for _ in range(2):
            with pytest.raises(drover.DatabaseError, match="could not connect") as info:
                await client.insert(Email(to="a"))
            messages.append(str(info.value))
        await client.close()
        return messages

    messages = run(go)
    assert "cannot be reused" not in messages[1]
    assert not any("sekret" in m for m in messages)


def test_closed_own_pool_refuses(db_url: str) -> None:
    async def go() -> None:
        client = drover.AsyncClient(db_url)
        await client.insert(Email(to="a"))
        await client.close()
        await client.close()  # idempotent
        assert client.pool.closed
        with pytest.raises(drover.DatabaseError, match="closed"):
            await client.insert(Email(to="b"))

    run(go)


# --- insert_many ---------------------------------------------------------------------------------


def test_insert_many_copies_a_large_batch(
    db_url: str, conn: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    chunks: list[int] = []
    real = copy_chunks

    def spy(*args: Any, **kwargs: Any) -> Any:
        for chunk in real(*args, **kwargs):
            chunks.append(chunk.count("\n"))
            yield chunk

    monkeypatch.setattr("drover._db.insert.copy_chunks", spy)
    later = datetime.now(UTC) + timedelta(days=1)

    async def go() -> tuple[list[drover.JobRow], list[drover.JobRow]]:
        async with drover.AsyncClient(db_url) as client:
            uniform = await client.insert_many([Email(to=f"u{i}") for i in range(2500)])
            mixed = await client.insert_many(
                [Email(to="back\\slash"), (Report(day=1), drover.InsertOpts(scheduled_at=later))]
            )
            assert await client.insert_many([]) == []
            return uniform, mixed

    uniform, mixed = run(go)
    assert sum(chunks) == 2502, "insert_many did not go through the COPY path"
    assert [r.args["to"] for r in uniform[:3]] == ["u0", "u1", "u2"]
    assert [r.id for r in uniform] == sorted(r.id for r in uniform)
    assert mixed[1].state is drover.JobState.SCHEDULED
    stored = conn.execute(
        "SELECT args->>'to', state::text FROM drover_jobs WHERE id = ANY(%s) ORDER BY id",
        ([r.id for r in mixed],),
    ).fetchall()
    assert stored == [("back\\slash", "available"), (None, "scheduled")]
    assert count_jobs(conn) == 2502


def test_insert_many_staged_and_identified(db_url: str, conn: Conn) -> None:
    async def go() -> list[drover.JobRow]:
        async with drover.AsyncClient(db_url) as client:
            tagged = await client.insert_many(
                [(Email(to="t"), drover.InsertOpts(tags=("x", "y"), meta={"k": "v"}))]
            )
            await client.insert_many([(Email(to="k"), drover.InsertOpts(unique_key="held"))])
            with pytest.raises(drover.DuplicateJob, match="item 1: "):
                await client.insert_many(
                    [Email(to="new"), (Email(to="k2"), drover.InsertOpts(unique_key="held"))]
                )
            same = drover.InsertOpts(unique=drover.Unique(by_args=True))
            identified = await client.insert_many([(Email(to="i"), same), (Email(to="i"), same)])
            return [*tagged, *identified]

    tagged, first, second = run(go)
    assert tagged.tags == ("x", "y")
    assert dict(tagged.meta) == {"k": "v"}
    assert second.duplicate
    assert second.id == first.id
    # tagged, "held", identified: the refused batch wrote nothing.
    assert count_jobs(conn) == 3


# --- insert_tx on psycopg ------------------------------------------------------------------------


def test_insert_tx_exists_iff_commit_and_notifies_only_then(
    db_url: str, conn: Conn, listener: psycopg.Connection[Any]
) -> None:
    async def go() -> tuple[drover.JobRow, int]:
        async with drover.AsyncClient(db_url) as client:
            async with await psycopg.AsyncConnection.connect(db_url) as aconn:
                rolled: list[drover.JobRow] = []

                async def rolled_back() -> None:
                    async with aconn.transaction():
                        rolled.append(await client.insert_tx(aconn, Report(day=1)))
                        raise Rollback

                with pytest.raises(Rollback):
                    await rolled_back()
                async with aconn.transaction():
                    kept = await client.insert_tx(aconn.cursor(), Report(day=2))
                    assert count_jobs(conn) == 0, "visible before commit"
            return kept, rolled[0].id

    kept, rolled_id = run(go)
    assert heard(listener, 5.0) == ["reports"]
    assert heard(listener, 0.2) == [], "a rolled-back insert_tx was announced"
    ids = [r[0] for r in conn.execute("SELECT id FROM drover_jobs").fetchall()]
    assert ids == [kept.id]
    assert rolled_id not in ids


def test_insert_tx_refuses_misuse_and_keeps_the_transaction(db_url: str, conn: Conn) -> None:
    async def go() -> None:
        client = drover.AsyncClient(db_url)
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as auto:
            with pytest.raises(drover.NotInTransaction, match="autocommit"):
                await client.insert_tx(auto, Email(to="a"))
            with pytest.raises(drover.NotInTransaction):
                await client.insert_many_tx(auto, [Email(to="a")])
        with (
            psycopg.connect(db_url) as sync_conn,
            pytest.raises(drover.UnsupportedConnection, match="drover.Client.insert_tx"),
        ):
            await client.insert_tx(sync_conn, Email(to="a"))
        with pytest.raises(drover.UnsupportedConnection, match="AsyncSession"):
            await client.insert_tx(object(), Email(to="a"))
        async with (
            await psycopg.AsyncConnection.connect(db_url) as aconn,
            aconn.transaction(),
        ):
            await aconn.execute("CREATE TABLE marks (n int)")
            await aconn.execute("INSERT INTO marks VALUES (1)")
            with pytest.raises(drover.InvalidJobArgs):
                await client.insert_tx(aconn, Email(to="nul\x00"))
            await client.insert_tx(aconn, Email(to="a"), drover.InsertOpts(unique_key="u"))
            with pytest.raises(drover.DuplicateJob):
                await client.insert_tx(aconn, Email(to="b"), drover.InsertOpts(unique_key="u"))
            with pytest.raises(drover.DuplicateJob):
                await client.insert_many_tx(
                    aconn, [(Email(to="c"), drover.InsertOpts(unique_key="u"))]
                )
            await aconn.execute("INSERT INTO marks VALUES (2)")
        await client.close()

    run(go)
    assert conn.execute("SELECT count(*) FROM marks").fetchone() == (2,)
    assert count_jobs(conn) == 1


def test_insert_many_tx_exists_iff_commit(db_url: str, conn: Conn) -> None:
    async def go() -> list[drover.JobRow]:
        async with drover.AsyncClient(db_url) as client:
            async with await psycopg.AsyncConnection.connect(db_url) as aconn:

                async def rolled_back() -> None:
                    async with aconn.transaction():
                        await client.insert_many_tx(aconn, [Email(to="r1"), Email(to="r2")])
                        raise Rollback

                with pytest.raises(Rollback):
                    await rolled_back()
                async with aconn.transaction():
                    rows = await client.insert_many_tx(
                        aconn,
                        [Email(to="k1"), (Email(to="k2"), drover.InsertOpts(tags=("t",)))],
                    )
                    rows += await client.insert_many_tx(aconn, [Report(day=i) for i in range(3)])
            return rows

    rows = run(go)
    got = conn.execute("SELECT id FROM drover_jobs ORDER BY id").fetchall()
    assert [r[0] for r in got] == sorted(r.id for r in rows)
    assert len(rows) == 5


# --- insert_tx on SQLAlchemy ---------------------------------------------------------------------


def test_insert_tx_with_sqlalchemy_async_session_and_connection(db_url: str, conn: Conn) -> None:
    async def go() -> list[int]:
        engine = async_engine(db_url)
        kept = []
        try:
            async with drover.AsyncClient(db_url) as client:
                async with engine.begin() as aconn:
                    await aconn.execute(text("CREATE TABLE orders (id int)"))
                    kept.append((await client.insert_tx(aconn, Email(to="c"))).id)
                async with AsyncSession(engine) as session:
                    async with session.begin():
                        await session.execute(text("INSERT INTO orders VALUES (1)"))
                        kept.append((await client.insert_tx(session, Email(to="s"))).id)
                        many = await client.insert_many_tx(session, [Report(day=1)])
                        kept.append(many[0].id)

                    async def rolled_back() -> None:
                        async with session.begin():
                            await session.execute(text("INSERT INTO orders VALUES (2)"))
                            await client.insert_tx(session, Email(to="gone"))
                            raise Rollback

                    with pytest.raises(Rollback):
                        await rolled_back()
        finally:
            await engine.dispose()
        return kept

    kept = run(go)
    assert [r[0] for r in conn.execute("SELECT id FROM drover_jobs ORDER BY id")] == kept
    assert conn.execute("SELECT array_agg(id) FROM orders").fetchone() == ([1],)


def test_sqlalchemy_asyncpg_is_refused_by_name(db_url: str) -> None:
    class FakeRaw:
        driver_connection = object()

    class FakeAsyncConnection:
        sync_connection = object()
        closed = False

        async def get_raw_connection(self) -> FakeRaw:
            return FakeRaw()

    async def go() -> None:
        client = drover.AsyncClient(db_url)
        with pytest.raises(drover.UnsupportedConnection, match=r"postgresql\+psycopg"):
            await client.insert_tx(FakeAsyncConnection(), Email(to="a"))
        await client.close()

    run(go)


# --- pools and wake-ups --------------------------------------------------------------------------


def test_app_owned_pool_is_used_and_left_open(
    db_url: str, conn: Conn, listener: psycopg.Connection[Any]
) -> None:
    async def go() -> bool:
        async with AsyncConnectionPool(db_url, min_size=1, max_size=2, open=False) as pool:
            async with drover.AsyncClient(pool) as client:
                assert client.pool is pool
                await client.insert(Email(to="a"))
                await client.insert_many([Email(to="b"), Email(to="c")])
            still_open = not pool.closed
            # After close, inserts on the application's pool still work and notify inline.
            await client.insert(Report(day=1))
        return still_open

    assert run(go)
    assert count_jobs(conn) == 4
    payloads: set[str] = set()
    while "reports" not in payloads:
        got = heard(listener, 5.0)
        assert got, f"no wake-up for reports; heard {payloads}"
        payloads.update(got)
    assert "default" in payloads


def test_wake_up_follows_the_commit(db_url: str, listener: psycopg.Connection[Any]) -> None:
    async def go() -> tuple[drover.JobRow, int]:
        async with drover.AsyncClient(db_url) as client:
            row = await client.insert(Report(day=9))
            # The wake-up is sent by the notifier task: let the loop run it.
            for _ in range(500):
                if client._notifier is not None and client._notifier.rounds:
                    break
                await asyncio.sleep(0.01)
            return row, client._notifier.rounds if client._notifier else 0

    row, rounds = run(go)
    assert rounds >= 1
    assert heard(listener, 5.0) == ["reports"]
    # The listener is woken after the commit: the job is visible to it.
    with psycopg.connect(listener.info.dsn, autocommit=True) as other:
        assert other.execute(
            "SELECT count(*) FROM drover_jobs WHERE id = %s", (row.id,)
        ).fetchone() == (1,)


def test_notify_false_sends_no_wake_up(db_url: str, listener: psycopg.Connection[Any]) -> None:
    async def go() -> None:
        async with drover.AsyncClient(db_url, drover.Config(notify=False)) as client:
            await client.insert(Email(to="quiet"))
            async with (
                await psycopg.AsyncConnection.connect(db_url) as aconn,
                aconn.transaction(),
            ):
                await client.insert_tx(aconn, Email(to="quiet too"))

    run(go)
    assert heard(listener, 0.3) == []


def test_failed_wake_up_is_logged_not_raised(db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    async def go() -> drover.JobRow:
        async with drover.AsyncClient(db_url) as client:
            row = await client.insert(Email(to="a"))
            await client.pool.close()  # the round cannot borrow a connection
            return row

    with caplog.at_level(logging.ERROR, logger="drover"):
        row = run(go)
    assert row.id > 0
    assert any("notify listeners of insert failed" in r.getMessage() for r in caplog.records)


def test_a_listening_worker_starts_an_async_insert_promptly(
    make_client: MakeClient, conn: Conn, db_url: str, poll: Poll
) -> None:
    started: dict[int, float] = {}
    workers = drover.Workers()

    @workers.register(args=Email)
    def send(job: drover.Job[Email]) -> None:
        started[job.id] = time.monotonic()

    # A poll interval no wake-up could be mistaken for.
    worker = make_client(workers=workers, poll_interval=30.0)
    worker.start()
    engine: Any = worker._engine
    poll(lambda: engine.fetcher.claims >= 1, message="first empty round")
    poll(engine.listener.listening.is_set, message="listener connected")
    poll(
        lambda: conn.execute(
            "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
            "AND query = 'LISTEN drover'"
        ).fetchone(),
        message="a backend running LISTEN drover",
    )

    async def go() -> tuple[drover.JobRow, float]:
        async with drover.AsyncClient(db_url) as client:
            sent = time.monotonic()
            return await client.insert(Email(to="prompt")), sent

    row, sent = run(go)
    # Half the 30 s poll interval: only a wake-up starts it this soon on a busy machine.
    poll(lambda: row.id in started, timeout=15.0, message="the woken worker starting the job")
    assert started[row.id] - sent < 15.0
    worker.stop(timeout=5)
