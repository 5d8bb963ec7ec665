"""The SQLAlchemy helpers share the unique path: flags inside the session's transaction."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session

import drover
from drover.contrib import sqlalchemy as drover_sa

Conn = psycopg.Connection[tuple[Any, ...]]


class Receipt(drover.JobArgs, kind="sa_unique_receipt"):
    order: int


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    eng = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(db_url))
    try:
        yield eng
    finally:
        eng.dispose()


def test_sqlalchemy_insert_and_insert_many_flag_duplicates(engine: Engine, conn: Conn) -> None:
    opts = drover.InsertOpts(unique=drover.Unique(by_args=True))
    with Session(engine) as session:
        first = drover_sa.insert(session, Receipt(order=1), opts)
        again = drover_sa.insert(session, Receipt(order=1), opts)
        rows = drover_sa.insert_many(session, [(Receipt(order=1), opts), (Receipt(order=2), opts)])
        session.commit()
    assert not first.duplicate
    assert again.duplicate
    assert again.id == first.id
    assert [r.duplicate for r in rows] == [True, False]
    found = conn.execute("SELECT count(*) FROM drover_jobs").fetchone()
    assert found == (2,)
    with Session(engine) as session:
        debounced = drover.InsertOpts(debounce=60)
        drover_sa.insert(session, Receipt(order=3), debounced)
        drover_sa.insert(session, Receipt(order=4), debounced)
        session.rollback()
    found = conn.execute("SELECT count(*) FROM drover_jobs").fetchone()
    assert found == (2,)
