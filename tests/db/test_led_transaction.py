"""``Atomic(lead=True)``: a transaction whose BEGIN travels with its first statement (issue 41).

The direct COPY of ``insert_many`` saves a round trip per batch this way; the
transaction must still be all or nothing, and the connection left idle and
usable whatever happened inside it.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from jobdb import Conn
from psycopg.pq import TransactionStatus

import drover
from drover._db.plans import ONE, Atomic, Copy, Execute, Plan, run

IDLE = TransactionStatus.IDLE


class Bulk(drover.JobArgs, kind="led_bulk"):
    n: int


@pytest.fixture
def table(conn: Conn) -> Conn:
    conn.execute("CREATE TABLE led (v integer NOT NULL)")
    return conn


def _count(conn: Conn) -> int:
    row = conn.execute("SELECT count(*) FROM led").fetchone()
    assert row is not None
    return int(row[0])


def _writes(fail: str | None) -> Plan[int]:
    row = yield Execute("SELECT txid_current_if_assigned() IS NULL, 1", None, ONE)
    yield Execute("INSERT INTO led VALUES (1)", None)
    yield Copy("COPY led (v) FROM STDIN", ["2\n", "x\n" if fail == "copy" else "3\n"])
    if fail == "python":
        raise ValueError("the plan refused")
    return int(row[1])


def _led(plan: Plan[Any]) -> Plan[Any]:
    result = yield Atomic(plan, lead=True)
    return result


def test_a_led_transaction_commits_every_step(db_url: str, table: Conn) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert run(conn, _led(_writes(None)), "write") == 1
        assert conn.info.transaction_status == IDLE
    assert _count(table) == 3


@pytest.mark.parametrize("fail", ["copy", "python"])
def test_a_failure_inside_rolls_everything_back(db_url: str, table: Conn, fail: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        error = drover.DatabaseError if fail == "copy" else ValueError
        with pytest.raises(error):
            run(conn, _led(_writes(fail)), "write")
        assert conn.info.transaction_status == IDLE
        assert conn.execute("SELECT 1").fetchone() == (1,)  # still usable
    assert _count(table) == 0


def test_a_plan_that_starts_with_a_copy_or_does_nothing(db_url: str, table: Conn) -> None:
    def copy_first() -> Plan[str]:
        yield Copy("COPY led (v) FROM STDIN", ["5\n"])
        return "copied"

    def nothing() -> Plan[str]:
        return "nothing"
        yield  # a generator

    with psycopg.connect(db_url, autocommit=True) as conn:
        assert run(conn, _led(copy_first()), "write") == "copied"
        assert run(conn, _led(nothing()), "write") == "nothing"
        assert conn.info.transaction_status == IDLE
    assert _count(table) == 1


def test_inside_a_callers_transaction_it_is_a_savepoint(db_url: str, table: Conn) -> None:
    with psycopg.connect(db_url) as conn:  # not autocommit: the caller's transaction
        conn.execute("INSERT INTO led VALUES (9)")
        with pytest.raises(ValueError, match="refused"):
            run(conn, _led(_writes("python")), "write")
        conn.commit()
    assert _count(table) == 1  # the caller's own row, none of the plan's


def test_insert_many_is_one_transaction_and_nothing_on_failure(
    client: drover.Client, conn: Conn
) -> None:
    rows = client.insert_many([Bulk(n=i) for i in range(2500)])
    assert [r.args for r in rows] == [{"n": i} for i in range(2500)]
    stored = conn.execute(
        "SELECT count(*), count(DISTINCT xmin::text), min(created_at) = max(created_at) "
        "FROM drover_jobs WHERE kind = 'led_bulk'"
    ).fetchone()
    assert stored == (2500, 1, True)
    assert {r.created_at for r in rows} == {
        conn.execute("SELECT created_at FROM drover_jobs LIMIT 1").fetchone()[0]  # type: ignore[index]
    }
