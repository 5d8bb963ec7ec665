"""``drover queues list | pause | resume`` against a real database, in-process and as a process."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from clihelp import cli, ok, one_line, refused, run
from test_cli import put

Conn = psycopg.Connection[tuple[Any, ...]]


def _paused(conn: Conn) -> list[tuple[str, bool]]:
    rows = conn.execute(
        "SELECT name, paused_at IS NOT NULL FROM drover_queues ORDER BY name"
    ).fetchall()
    return [(str(n), bool(p)) for n, p in rows]


def test_queues_list_shows_counts_and_paused_state(db_url: str, conn: Conn) -> None:
    put(conn, "available", queue="mail", due_ago=2)
    put(conn, "dead", queue="mail", attempt=25)
    put(conn, "scheduled", queue="bulk")
    ok(cli(db_url, "queues", "pause", "bulk"))

    lines = ok(cli(db_url, "queues", "list")).splitlines()
    assert lines[0].split() == [
        "QUEUE",
        "PAUSED_SINCE",
        "PENDING",
        "AVAILABLE",
        "SCHEDULED",
        "RETRYABLE",
        "RUNNING",
        "DEAD",
        "OLDEST_AGE_SECONDS",
    ]
    bulk, mail = (line.split() for line in lines[1:])
    assert bulk[0] == "bulk" and bulk[1].endswith("Z")
    assert bulk[2:8] == ["0", "0", "1", "0", "0", "0"]
    assert bulk[8] == "-"
    assert mail[:8] == ["mail", "-", "0", "1", "0", "0", "0", "1"]
    assert float(mail[8]) >= 2.0

    listed = json.loads(ok(cli(db_url, "--json", "queues", "list")))
    assert [(q["name"], q["paused"]) for q in listed] == [("bulk", True), ("mail", False)]
    assert listed[1]["counts"] == {
        "pending": 0,
        "available": 1,
        "scheduled": 0,
        "retryable": 0,
        "running": 0,
        "dead": 1,
    }


def test_queues_list_on_an_empty_database_prints_the_header_only(db_url: str) -> None:
    assert len(ok(cli(db_url, "queues", "list")).splitlines()) == 1
    assert json.loads(ok(cli(db_url, "queues", "list", "--json"))) == []


def test_pause_then_resume(db_url: str, conn: Conn) -> None:
    out = ok(cli(db_url, "queues", "pause", "mail"))
    assert out.startswith("paused queue mail (since ") and out.rstrip().endswith("Z)")
    ok(cli(db_url, "queues", "pause", "mail"))  # idempotent
    assert _paused(conn) == [("mail", True)]
    assert ok(cli(db_url, "queues", "resume", "mail")) == "resumed queue mail\n"
    assert _paused(conn) == [("mail", False)]
    assert ok(cli(db_url, "queues", "resume", "mail")) == "queue mail was not paused\n"
    document = json.loads(ok(cli(db_url, "--json", "queues", "pause", "x")))
    assert document["name"] == "x" and document["paused"] is True
    assert document["paused_at"].endswith("Z")


@pytest.mark.parametrize("command", ["pause", "resume"])
@pytest.mark.parametrize(
    ("name", "message"), [("", "must not be empty"), ("x" * 129, "129 characters long")]
)
def test_a_bad_queue_name_is_a_usage_error_that_writes_nothing(
    db_url: str, conn: Conn, command: str, name: str, message: str
) -> None:
    err = one_line(refused(cli(db_url, "queues", command, name), 2))
    assert "queue NAME" in err and message in err
    assert _paused(conn) == []


def test_queues_without_a_subcommand_or_name_is_a_usage_error(db_url: str) -> None:
    assert cli(db_url, "queues").exit_code == 2
    assert cli(db_url, "queues", "pause").exit_code == 2


def test_queues_as_a_subprocess(db_url: str, conn: Conn) -> None:
    paused = run("queues", "pause", "mail", url=db_url)
    assert (paused.returncode, paused.stderr) == (0, ""), paused.stderr
    listed = run("--json", "queues", "list", url=db_url)
    assert listed.returncode == 0, listed.stderr
    assert [q["name"] for q in json.loads(listed.stdout)] == ["mail"]
    resumed = run("queues", "resume", "mail", url=db_url)
    assert (resumed.returncode, resumed.stdout) == (0, "resumed queue mail\n")
    assert _paused(conn) == [("mail", False)]
