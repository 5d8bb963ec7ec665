"""``drover enqueue --app``: the application's registry gives validation and class defaults.

Run as real processes: importing ``cli_app`` opens a client on ``DATABASE_URL``,
which must not outlive one command (nor leak into this test process).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest
from clihelp import one_line, run
from jobdb import MakeClient, table_snapshot

import drover

Conn = psycopg.Connection[tuple[Any, ...]]
CLI_DIR = Path(__file__).resolve().parent


def enqueue(url: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """``drover --json enqueue ARGV`` from the directory holding ``cli_app.py``."""
    return run("--json", "enqueue", *argv, url=url, cwd=CLI_DIR)


def stored(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    row: dict[str, Any] = json.loads(result.stdout)
    return row


@pytest.mark.parametrize("spec", ["cli_app:workers", "cli_app:client", "cli_app:make_client"])
def test_a_known_kind_gets_its_class_defaults(db_url: str, conn: Conn, spec: str) -> None:
    row = stored(enqueue(db_url, "--kind", "cli_mail", "--app", spec, "--args", '{"to": "a@b"}'))
    assert (row["queue"], row["max_attempts"]) == ("mail", 3)
    assert row["args"] == {"to": "a@b", "template": "welcome"}
    in_table = conn.execute(
        "SELECT queue, max_attempts, args FROM drover_jobs WHERE id = %s", (row["id"],)
    ).fetchone()
    assert in_table == ("mail", 3, {"to": "a@b", "template": "welcome"})


def test_flags_win_over_the_class_defaults(db_url: str) -> None:
    argv = ["--kind", "cli_mail", "--app", "cli_app:workers", "--args", '{"to": "x@y"}']
    row = stored(enqueue(db_url, *argv, "--queue", "urgent", "--max-attempts", "7"))
    assert (row["queue"], row["max_attempts"]) == ("urgent", 7)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--kind", "cli_mail", "--args", "{}"], "do not validate as Mail"),
        (["--kind", "cli_mail", "--args", '{"to": 5}'], "Input should be a valid string"),
        (
            ["--kind", "cli_mial"],
            "has no worker for kind 'cli_mial' "
            "(it knows: cli_boom, cli_hold, cli_mail, cli_ping, cli_stuck)",
        ),
        (["--kind", "cli_mail", "--app", "cli_app"], "--app must look like module:attribute"),
        (["--kind", "k", "--app", "no_such_module:x"], "cannot import 'no_such_module'"),
        (["--kind", "k", "--app", "cli_app:nope"], "has no attribute 'nope'"),
        (
            ["--kind", "k", "--app", "cli_app:NOT_A_CLIENT"],
            "is 42, of type int; it must be a drover.Client, a drover.Workers",
        ),
        (["--kind", "k", "--app", "cli_app:Mail"], "is a drover.JobArgs class (cli_app.Mail)"),
        # A misspelled field is refused, not dropped (and "template" not silently "welcome").
        (
            ["--kind", "cli_mail", "--args", '{"to": "a", "tempalte": "x"}'],
            "tempalte\n  Extra inputs are not permitted",
        ),
    ],
)
def test_what_the_app_refuses_is_a_usage_error_that_writes_nothing(
    db_url: str, conn: Conn, argv: list[str], message: str
) -> None:
    if "--app" not in argv:
        argv = [*argv, "--app", "cli_app:workers"]
    before = table_snapshot(conn)
    result = enqueue(db_url, *argv)
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    assert message in result.stderr
    if not any(m in message for m in ("validate", "valid string", "Extra inputs")):
        one_line(result.stderr)
    assert table_snapshot(conn) == before


def test_without_app_the_queue_is_default_and_the_args_raw(db_url: str) -> None:
    # No live worker reports its kinds: nothing to check the kind against.
    result = enqueue(db_url, "--kind", "cli_mail")
    assert result.returncode == 0, result.stderr
    row: dict[str, Any] = json.loads(result.stdout)
    assert (row["queue"], row["max_attempts"], row["args"]) == ("default", 25, {})
    assert result.stderr == ""  # --json: the row alone; the human line says what went unchecked


class Mail(drover.JobArgs, kind="cli_mail"):
    to: str = ""


def test_without_app_a_kind_no_live_worker_runs_is_refused_unless_forced(
    db_url: str, conn: Conn, make_client: MakeClient
) -> None:
    workers = drover.Workers()

    @workers.register
    def send(job: drover.Job[Mail]) -> None:
        pass

    client = make_client(workers=workers, queues={"elsewhere": 1})
    client.start()
    before = table_snapshot(conn)
    refused = enqueue(db_url, "--kind", "cli_mial", "--args", '{"to": "a@b"}')
    assert refused.returncode == 1, refused.stderr
    message = one_line(refused.stderr)
    assert "no live worker runs kind 'cli_mial' (did you mean 'cli_mail'?)" in message
    assert "--force" in message and "Nothing was enqueued" in message
    assert table_snapshot(conn) == before
    forced = enqueue(db_url, "--kind", "cli_mial", "--force")
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["kind"] == "cli_mial"
    known = enqueue(db_url, "--kind", "cli_mail", "--queue", "elsewhere")
    assert known.returncode == 0, known.stderr
    # The registry row says which kinds the client runs.
    with drover.Inspector(db_url) as inspector:
        (worker,) = inspector.workers()
    assert worker.kinds == ("cli_mail",)
