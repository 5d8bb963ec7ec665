"""drover.contrib.sqlalchemy: the job shares the SQLAlchemy transaction, whatever its shape."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.orm import Session, scoped_session, sessionmaker

import drover
from drover.contrib import sqlalchemy as drover_sa

Conn = psycopg.Connection[tuple[Any, ...]]


class Receipt(drover.JobArgs, kind="sa_receipt"):
    order: int


@pytest.fixture
def engine(db_url: str, conn: Conn) -> Iterator[Engine]:
    conn.execute("CREATE TABLE orders (id serial PRIMARY KEY, note text)")
    eng = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(db_url))
    try:
        yield eng
    finally:
        eng.dispose()


def _jobs(conn: Conn) -> list[int]:
    return [int(r[0]) for r in conn.execute("SELECT (args->>'order')::int FROM drover_jobs")]


def _orders(conn: Conn) -> int:
    row = conn.execute("SELECT count(*) FROM orders").fetchone()
    assert row is not None
    return int(row[0])


def test_session_commit_keeps_order_and_job_rollback_drops_both(engine: Engine, conn: Conn) -> None:
    with Session(engine) as session:
        session.execute(text("INSERT INTO orders (note) VALUES ('kept')"))
        row = drover_sa.insert(session, Receipt(order=1))
        assert _jobs(conn) == []  # invisible until the commit
        session.commit()
    assert row.kind == "sa_receipt" and _jobs(conn) == [1] and _orders(conn) == 1
    with Session(engine) as session:
        session.execute(text("INSERT INTO orders (note) VALUES ('dropped')"))
        drover_sa.insert(session, Receipt(order=2))
        session.rollback()
    assert _jobs(conn) == [1] and _orders(conn) == 1


def test_a_savepoint_rollback_removes_the_job_inside_it(engine: Engine, conn: Conn) -> None:
    with Session(engine) as session, session.begin():
        drover_sa.insert(session, Receipt(order=1))
        nested = session.begin_nested()
        drover_sa.insert(session, Receipt(order=2))
        nested.rollback()
        drover_sa.insert(session, Receipt(order=3))
    assert sorted(_jobs(conn)) == [1, 3]


def test_a_bare_connection_is_begun_so_its_commit_commits_the_job(
    engine: Engine, conn: Conn
) -> None:
    with engine.connect() as connection:
        assert not connection.in_transaction()
        drover_sa.insert(connection, Receipt(order=7))
        assert connection.in_transaction()
        connection.commit()
    assert _jobs(conn) == [7]
    with engine.connect() as connection:
        drover_sa.insert(connection, Receipt(order=8))
        # Closed without commit: rolled back, as any statement would be.
    assert _jobs(conn) == [7]


def test_scoped_session_and_insert_many(engine: Engine, conn: Conn) -> None:
    factory = scoped_session(sessionmaker(engine))
    try:
        rows = drover_sa.insert_many(factory, [Receipt(order=i) for i in range(3)])
        assert [r.args["order"] for r in rows] == [0, 1, 2]
        assert drover_sa.insert_many(factory, []) == []
        factory.commit()
    finally:
        factory.remove()
    assert sorted(_jobs(conn)) == [0, 1, 2]


def test_a_duplicate_key_leaves_the_transaction_usable(engine: Engine, conn: Conn) -> None:
    opts = drover.InsertOpts(unique_key="order-1")
    with Session(engine) as session, session.begin():
        drover_sa.insert(session, Receipt(order=1), opts)
        with pytest.raises(drover.DuplicateJob):
            drover_sa.insert(session, Receipt(order=1), opts)
        session.execute(text("INSERT INTO orders (note) VALUES ('still usable')"))
    assert _jobs(conn) == [1] and _orders(conn) == 1


def test_what_is_not_sqlalchemy_is_refused(conn: Conn) -> None:
    with pytest.raises(drover.UnsupportedConnection, match="needs a SQLAlchemy Session"):
        drover_sa.insert(conn, Receipt(order=1))  # type: ignore[arg-type]
    with pytest.raises(drover.InvalidJobArgs):
        drover_sa.insert(conn, "not args")  # type: ignore[arg-type]


class Ship(drover.JobArgs, kind="sa_ship"):
    order: int
    lose: bool = False


def test_complete_in_a_session_commits_the_orm_write_and_the_completion_together(
    engine: Engine, conn: Conn, db_url: str, make_client: Any, poll: Any
) -> None:
    refusals: list[drover.LeaseLost] = []

    class ShipWorker(drover.Worker[Ship]):
        def work(self, job: drover.Job[Ship]) -> None:
            try:
                with Session(engine) as session, session.begin():
                    session.execute(text("INSERT INTO orders (note) VALUES ('shipped')"))
                    if job.args.lose:  # another worker takes the job over meanwhile
                        with psycopg.connect(db_url, autocommit=True) as other:
                            other.execute(
                                "UPDATE drover_jobs SET attempt = attempt + 1 WHERE id = %s",
                                (job.id,),
                            )
                    drover_sa.complete(session, job)
            except drover.LeaseLost as exc:
                refusals.append(exc)
                raise

    workers = drover.Workers()
    workers.add(ShipWorker())
    client = make_client(workers=workers, poll_interval=0.05)
    client.start()
    shipped = client.insert(Ship(order=1))
    poll(lambda: client.get_job(shipped.id).state == drover.JobState.COMPLETED)
    assert _orders(conn) == 1
    lost = client.insert(Ship(order=2, lose=True))
    poll(lambda: refusals, message="complete refused")
    assert refusals[0].job_id == lost.id
    assert _orders(conn) == 1  # the ORM write rolled back with the refused completion
    client.stop(timeout=5)


def test_schema_puts_the_jobs_in_that_installation_whatever_the_search_path(
    empty_db_url: str,
) -> None:
    drover.migrate(empty_db_url, schema="sa_jobs")
    eng = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(empty_db_url))
    try:
        with Session(eng) as session, session.begin():
            row = drover_sa.insert(session, Receipt(order=1), schema="sa_jobs")
            rows = drover_sa.insert_many(
                session, [Receipt(order=2), Receipt(order=3)], schema="sa_jobs"
            )
        with pytest.raises(drover.InvalidArgument, match="pg_"), Session(eng) as session:
            drover_sa.insert(session, Receipt(order=4), schema="pg_nope")
    finally:
        eng.dispose()
    with psycopg.connect(empty_db_url) as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM sa_jobs.drover_jobs ORDER BY id")]
    assert ids == [row.id, *(r.id for r in rows)]


class _Recorder:
    """An insert middleware (ADR 0047) that tags each job and records each call."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, list[int]]] = []

    @contextlib.contextmanager
    def around_insert(self, batch: drover.InsertBatch) -> Iterator[None]:
        batch.add_tags("sa")
        yield
        self.seen.append((batch.operation, [r.id for r in batch.rows]))


def test_the_helpers_go_through_the_insert_middleware_given(engine: Engine, conn: Conn) -> None:
    recorder = _Recorder()
    with Session(engine) as session:
        first = drover_sa.insert(session, Receipt(order=1), middleware=[recorder])
        waiting = drover_sa.insert(
            session,
            Receipt(order=2),
            drover.InsertOpts(depends_on=[first]),
            middleware=[recorder],
        )
        batch = drover_sa.insert_many(session, [Receipt(order=3)], middleware=[recorder])
        plain = drover_sa.insert(session, Receipt(order=4))
        session.commit()
    assert recorder.seen == [
        ("insert_tx", [first.id]),
        ("insert_tx", [waiting.id]),
        ("insert_many_tx", [batch[0].id]),
    ]
    assert [r.tags for r in (first, waiting, batch[0], plain)] == [("sa",)] * 3 + [()]
    assert waiting.state is drover.JobState.PENDING
    assert conn.execute("SELECT job_id, depends_on FROM drover_job_deps").fetchall() == [
        (waiting.id, first.id)
    ]
    with Session(engine) as session, pytest.raises(drover.InvalidArgument, match="middleware"):
        drover_sa.insert(session, Receipt(order=5), middleware=[object()])  # type: ignore[list-item]
