"""``drover doctor``: exit codes, one line per finding, ``--json``, bad thresholds."""

from __future__ import annotations

import json
from typing import Any

import psycopg
from clihelp import cli, one_line, refused, run

Conn = psycopg.Connection[tuple[Any, ...]]


def _waiting(conn: Conn, queue: str) -> None:
    conn.execute(
        "INSERT INTO drover_jobs (kind, queue, args, scheduled_at) "
        "VALUES ('doctor_job', %s, '{}', now() - interval '5 minutes')",
        (queue,),
    )


def test_doctor_exits_0_when_healthy_and_1_with_one_line_per_finding(
    db_url: str, conn: Conn
) -> None:
    healthy = run("doctor", url=db_url)
    assert healthy.returncode == 0, healthy.stderr
    assert healthy.stdout == "healthy\n"

    _waiting(conn, "mail")
    _waiting(conn, "bulk")
    sick = run("doctor", url=db_url)
    assert sick.returncode == 1, sick.stderr
    lines = sick.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["QUEUE_UNSERVED", "QUEUE_UNSERVED"]
    assert lines[0].startswith("QUEUE_UNSERVED  queue bulk has 1 waiting job(s)")
    assert " — start a worker with --queue bulk" in lines[0]

    machine = run("--json", "doctor", url=db_url)
    assert machine.returncode == 1
    report = json.loads(machine.stdout)
    assert report["healthy"] is False
    [bulk, mail] = report["findings"]
    assert (bulk["code"], bulk["severity"], bulk["evidence"]["queue"]) == (
        "QUEUE_UNSERVED",
        "critical",
        "bulk",
    )
    assert mail["evidence"]["waiting"] == 1 and mail["remedy"]


def test_doctor_thresholds_come_from_options(db_url: str, conn: Conn) -> None:
    _waiting(conn, "mail")
    result = cli(db_url, "doctor", "--unserved-grace", "3600")
    assert result.exit_code == 0, result.output
    assert result.stdout == "healthy\n"


def test_doctor_names_a_missing_schema(empty_db_url: str) -> None:
    result = cli(empty_db_url, "doctor")
    assert result.exit_code == 1
    assert result.stdout.startswith("SCHEMA_MISSING  ")


def test_a_bad_threshold_is_a_usage_error(db_url: str) -> None:
    assert "--dead-tuples-ratio" in one_line(
        refused(cli(db_url, "doctor", "--dead-tuples-ratio", "1.5"), 2)
    )
    assert "--xmin-age" in one_line(refused(cli(db_url, "doctor", "--xmin-age", "-1"), 2))
    assert "--claim-p99" in one_line(refused(cli(db_url, "doctor", "--claim-p99", "-1"), 2))
