"""``drover cancel ID [--reason TEXT] [--hard] [--grace SECONDS]`` on a running job (ADR 0030)."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from clihelp import cli, ok, one_line, refused
from jobdb import table_snapshot

Conn = psycopg.Connection[tuple[Any, ...]]


def _running(conn: Conn) -> int:
    row = conn.execute(
        "INSERT INTO drover_jobs (kind, queue, args, state, attempt, leased_until) "
        "VALUES ('task', 'default', '{}', 'running', 1, now() + interval '1 hour') RETURNING id"
    ).fetchone()
    assert row is not None
    return int(row[0])


def _request(conn: Conn, job_id: int) -> Any:
    row = conn.execute("SELECT cancel_request FROM drover_jobs WHERE id = %s", (job_id,))
    found = row.fetchone()
    assert found is not None
    return found[0]


def test_cancel_of_a_running_job_records_the_request_and_says_so(db_url: str, conn: Conn) -> None:
    job_id = _running(conn)
    out = ok(
        cli(db_url, "cancel", str(job_id), "--reason", "wrong input", "--hard", "--grace", "3")
    )
    assert out.startswith(
        f"asked the worker running job {job_id} to cancel it (hard): it ends cancelled when its "
        "attempt ends\n"
    )
    assert "state:        running\n" in out
    request = _request(conn, job_id)
    assert (request["reason"], request["hard"], request["grace"]) == ("wrong input", True, 3.0)
    document = json.loads(ok(cli(db_url, "--json", "cancel", str(job_id))))
    assert (document["id"], document["state"]) == (job_id, "running")
    assert _request(conn, job_id)["hard"] is False  # the second request replaced the first


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--reason", "x" * 1001], "reason must be at most 1000 characters, not 1001"),
        (["--grace", "-1"], "--grace"),
        (["--grace", "soon"], "--grace"),
    ],
)
def test_bad_options_exit_2_and_write_nothing(
    db_url: str, conn: Conn, args: list[str], message: str
) -> None:
    job_id = _running(conn)
    before = table_snapshot(conn)
    result = cli(db_url, "cancel", str(job_id), *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert table_snapshot(conn) == before


def test_a_reason_too_long_is_one_line(db_url: str, conn: Conn) -> None:
    job_id = _running(conn)
    err = one_line(refused(cli(db_url, "cancel", str(job_id), "--reason", "y" * 1001), 2))
    assert err == "drover: reason must be at most 1000 characters, not 1001\n"
