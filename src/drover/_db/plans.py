"""Multi-statement writes as plans: what to send and what to decide, with no I/O (ADR 0047).

An insert that takes more than one statement (a unique insert that may have
to read the holder, a batch through COPY, a graph of jobs with their
dependencies) decides its next statement from the answer to the previous
one. Those decisions are written once, here, as a generator: it yields a
step (``Execute``, ``Copy``, ``Atomic``) and receives the step's answer;
its return value is the write's result. ``run`` carries the steps out on a
psycopg ``Connection`` and ``drover._db.aio.arun`` on an
``AsyncConnection``; the two runners are the only code that differs between
the synchronous and the asyncio paths.

A plan never catches a database error: an error raised by a step leaves the
runner (translated by ``translate``), and ``Atomic`` rolls its block back
on the way out, as ``conn.transaction()`` does. A plan that raises (a
``DuplicateJob`` inside an ``Atomic``, say) rolls that block back the same
way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterable
from typing import Any, LiteralString, NamedTuple, TypeAlias, TypeVar

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row

from drover._db import Connection
from drover._db.errors import translate

__all__ = ["ALL", "NONE", "ONE", "Atomic", "Copy", "Execute", "Plan", "Step", "atomic", "run"]

T = TypeVar("T")

IDLE = TransactionStatus.IDLE
_PIPELINES = psycopg.Pipeline.is_supported()  # libpq 14 or later

NONE, ONE, ALL = 0, 1, 2
"""What ``Execute`` fetches: nothing (its answer is ``None``), one row (or ``None``), all rows."""


class Execute(NamedTuple):
    """Run one statement on the plan's cursor; the answer is what ``fetch`` asks for."""

    statement: LiteralString
    params: Any
    fetch: int = NONE


class Copy(NamedTuple):
    """A ``COPY ... FROM STDIN``: ``data`` is written as text chunks, or row by row with
    ``rows`` (each a tuple psycopg adapts). The answer is ``None``."""

    statement: LiteralString
    data: Iterable[Any]
    rows: bool = False


class Atomic(NamedTuple):
    """Run ``plan`` inside ``conn.transaction()``: a transaction on an autocommit
    connection, a savepoint inside an open one. The answer is the plan's result."""

    plan: Generator[Any, Any, Any]
    lead: bool = False
    """Send the ``BEGIN`` of a transaction (not a savepoint) together with the plan's
    first ``Execute``, pipelined: one round trip for the two. The blocking runner
    honours it; the asyncio runner sends them one after the other."""


Step: TypeAlias = Execute | Copy | Atomic
Plan: TypeAlias = Generator[Step, Any, T]
"""A write: yields steps, receives their answers, returns the result."""


def atomic(plan: Plan[T]) -> Plan[T]:
    """``plan`` inside one ``Atomic`` step: in a transaction (or savepoint) of its own."""
    result: T = yield Atomic(plan)
    return result


def run(conn: Connection, plan: Plan[T], action: str) -> T:
    """Carry ``plan`` out on ``conn`` (one cursor), its errors translated under ``action``."""
    with translate(action), conn.cursor(row_factory=tuple_row) as cur:
        return _drive(conn, cur, plan)


def _drive(conn: Connection, cur: Any, plan: Plan[T], answer: Any = None) -> T:
    # answer: to the step the plan yielded last, when the caller carried it out.
    send = plan.send
    while True:
        try:
            step = send(answer)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        if type(step) is Execute:
            cur.execute(step.statement, step.params)
            fetch = step.fetch
            answer = cur.fetchone() if fetch == ONE else cur.fetchall() if fetch == ALL else None
        elif type(step) is Copy:
            with cur.copy(step.statement) as copy:
                if step.rows:
                    for row in step.data:
                        copy.write_row(row)
                else:
                    for text in step.data:
                        copy.write(text)
            answer = None
        else:
            assert type(step) is Atomic
            if (
                step.lead
                and _PIPELINES
                and conn.autocommit
                and conn.info.transaction_status == IDLE
            ):
                answer = _led(conn, cur, step.plan)
            else:
                with conn.transaction():
                    answer = _drive(conn, cur, step.plan)


def _led(conn: Connection, cur: Any, plan: Plan[T]) -> T:
    """``plan`` in a transaction of its own whose ``BEGIN`` travels with its first statement.

    What ``conn.transaction()`` does on an idle autocommit connection, less a
    round trip: ``BEGIN`` and the first ``Execute`` are sent in one pipeline,
    then the plan goes on as usual; ``COMMIT`` when it returns, ``ROLLBACK``
    when anything raises (the error is raised as it was).
    """
    try:
        first = plan.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]  # nothing to write
    if type(first) is not Execute:
        # Nothing to pipeline with: the plain transaction, from that first step.
        with conn.transaction():
            return _drive(conn, cur, _resumed(first, plan))
    try:
        with conn.pipeline():
            cur.execute("BEGIN")
            cur.execute(first.statement, first.params)
            fetch = first.fetch
            answer = cur.fetchone() if fetch == ONE else cur.fetchall() if fetch == ALL else None
        result = _drive(conn, cur, plan, answer)
    except BaseException:
        if not conn.closed and conn.info.transaction_status != IDLE:
            with contextlib.suppress(psycopg.Error):
                conn.rollback()
        raise
    conn.commit()
    return result


def _resumed(first: Step, plan: Plan[T]) -> Plan[T]:
    # plan, its first step already taken out, as a plan again.
    answer = yield first
    while True:
        try:
            step = plan.send(answer)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        answer = yield step
