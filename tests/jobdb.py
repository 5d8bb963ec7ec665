"""Test helpers: reading drover_jobs and checking returned rows (tests/ is on sys.path)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

import drover

Conn = psycopg.Connection[tuple[Any, ...]]


def count_jobs(conn: Conn) -> int:
    """Rows in drover_jobs."""
    row = conn.execute("SELECT count(*) FROM drover_jobs").fetchone()
    assert row is not None
    return int(row[0])


def table_snapshot(conn: Conn) -> tuple[list[tuple[Any, ...]], object]:
    """Every row with its ``xmin`` (any write changes it), and the id sequence's position."""
    rows = conn.execute("SELECT xmin::text, * FROM drover_jobs ORDER BY id").fetchall()
    seq = conn.execute(
        "SELECT pg_sequence_last_value(pg_get_serial_sequence('drover_jobs', 'id')::regclass)"
    ).fetchone()
    assert seq is not None
    return rows, seq[0]


def db_now(conn: Conn) -> datetime:
    """The database clock."""
    row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    moment: datetime = row[0]
    return moment


def job_row(conn: Conn, job_id: int) -> dict[str, Any]:
    """One job as a dict (state as text)."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            "SELECT id, kind, queue, state::text AS state, attempt, max_attempts, errors, "
            "scheduled_at, leased_until, created_at, finalized_at FROM drover_jobs WHERE id = %s",
            (job_id,),
        )
        row = cur.fetchone()
    assert row is not None
    return row


def await_job_state(
    poll: Callable[..., Any], conn: Conn, job_id: int, state: str, **match: Any
) -> dict[str, Any]:
    """Poll until the job is in ``state`` (and its columns equal ``match``); return that row."""

    def reached() -> dict[str, Any] | None:
        row = job_row(conn, job_id)
        if row["state"] == state and all(row[k] == v for k, v in match.items()):
            return row
        return None

    result: dict[str, Any] = poll(reached, 10.0, message=f"job {job_id} reaching {state} {match}")
    return result


def typed(value: Any) -> Any:
    """``value`` with every scalar paired with its type: ``1 == 1.0`` but not here."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    return (type(value).__name__, value)


def invisible(client: drover.Client, job_id: int) -> bool:
    """True when ``client`` (another connection) cannot see the job: ``get_job`` raises NotFound."""
    try:
        client.get_job(job_id)
    except drover.NotFound:
        return True
    return False


def assert_stored(client: drover.Client, rows: list[drover.JobRow]) -> None:
    """Each returned row equals, field for field and type for type, what ``get_job`` reads."""
    for row in rows:
        stored = client.get_job(row.id)  # NotFound if it was not stored
        assert row == stored
        assert typed(row.args) == typed(stored.args)
        assert type(row.state) is type(stored.state) is drover.JobState


def sample_row(**changes: Any) -> drover.JobRow:
    """A plausible ``JobRow`` built in memory (no database), with ``changes`` applied."""
    now = datetime.now(UTC)
    row = drover.JobRow(
        id=1,
        kind="k",
        queue="default",
        args={},
        state=drover.JobState.AVAILABLE,
        attempt=0,
        max_attempts=25,
        errors=[],
        scheduled_at=now,
        leased_until=None,
        created_at=now,
        finalized_at=None,
        unique_key=None,
    )
    return row._replace(**changes)
