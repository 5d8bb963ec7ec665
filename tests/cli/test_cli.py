"""The ``drover`` command line against a real database.

Every command runs in-process through typer's ``CliRunner`` (with
``hoist_globals``, as ``main`` does) and at least once as a real
``python -m drover`` subprocess. Every refused command is checked to leave the
jobs table exactly as it was.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from clihelp import cli, invoke, ok, one_line, refused, run
from jobdb import table_snapshot

import drover
import drover.cli
from drover._db.queries import load_migrations

Conn = psycopg.Connection[tuple[Any, ...]]
Poll = Callable[..., Any]

CLI_DIR = Path(__file__).resolve().parent
PASSWORD = "s3cret"
UNREACHABLE = f"postgresql://drover:{PASSWORD}@127.0.0.1:1/x"
ISO_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
JOB_KEYS = [
    "id",
    "kind",
    "queue",
    "state",
    "attempt",
    "max_attempts",
    "args",
    "errors",
    "scheduled_at",
    "leased_until",
    "created_at",
    "finalized_at",
    "unique_key",
    "priority",
    "progress",
    "progress_message",
    "meta",
    "tags",
]
HOSTILE = [
    "'; DROP TABLE drover_jobs; --",
    'it\'s "quoted"',
    "semi;colon;",
    "ünïcødé ☃ 日本語 🚀",
]
TRACE = (
    "Traceback (most recent call last):\n"
    '  File "app/workers.py", line 12, in work\n'
    "    raise ValueError('boom')\n"
    "ValueError: boom"
)
ERRORS = [
    {
        "attempt": 1,
        "at": "2030-01-02T03:04:05.000006Z",
        "error": "ValueError: boom",
        "trace": TRACE,
    },
    {"attempt": 2, "at": "2030-01-02T03:09:05Z", "error": "TimeoutError: slow"},
]
DATA_COMMANDS = [
    ["stats"],
    ["jobs", "list"],
    ["jobs", "get", "1"],
    ["retry", "1"],
    ["cancel", "1"],
    ["enqueue", "--kind", "task"],
    ["queues", "list"],
    ["queues", "pause", "q"],
    ["queues", "resume", "q"],
    ["periodic", "list"],
]


# --- helpers ------------------------------------------------------------------------------------


def put(
    conn: Conn,
    state: str = "available",
    *,
    kind: str = "task",
    queue: str = "default",
    args: Any = None,
    errors: list[dict[str, Any]] | None = None,
    attempt: int = 0,
    unique_key: str | None = None,
    due_ago: float = 0.0,
) -> int:
    """Plant one job in ``state`` with SQL; return its id."""
    row = conn.execute(
        "INSERT INTO drover_jobs (kind, queue, args, state, attempt, errors, unique_key, "
        "  scheduled_at, leased_until, finalized_at) "
        "VALUES (%(kind)s, %(queue)s, %(args)s::jsonb, %(state)s::drover_job_state, "
        "  %(attempt)s, %(errors)s::jsonb, %(unique_key)s, "
        "  CASE WHEN %(state)s = 'scheduled' THEN now() + interval '1 hour' "
        "       ELSE now() - make_interval(secs => %(ago)s) END, "
        "  CASE WHEN %(state)s = 'running' THEN now() + interval '1 hour' END, "
        "  CASE WHEN %(state)s IN ('completed', 'cancelled', 'dead') THEN now() END) "
        "RETURNING id",
        {
            "kind": kind,
            "queue": queue,
            "args": json.dumps({} if args is None else args),
            "state": state,
            "attempt": attempt,
            "errors": json.dumps(errors or []),
            "unique_key": unique_key,
            "ago": due_ago,
        },
    ).fetchone()
    assert row is not None
    return int(row[0])


def state_of(conn: Conn, job_id: int) -> str:
    row = conn.execute("SELECT state::text FROM drover_jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return str(row[0])


def public_tables(url: str) -> list[str]:
    with psycopg.connect(url, autocommit=True) as c:
        rows = c.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = 'public'::regnamespace "
            "AND relkind = 'r' ORDER BY relname"
        ).fetchall()
    return [r[0] for r in rows]


def expected_job(conn: Conn, job_id: int) -> dict[str, Any]:
    """The job as ``--json`` must print it, read independently from the table."""
    row = conn.execute(
        "SELECT id, kind, queue, state::text, attempt, max_attempts, args, errors, "
        "  scheduled_at, leased_until, created_at, finalized_at, unique_key, priority, "
        "  progress, progress_message, meta, tags "
        "FROM drover_jobs WHERE id = %s",
        (job_id,),
    ).fetchone()
    assert row is not None

    def ts(value: datetime | None) -> str | None:
        return None if value is None else value.astimezone(UTC).isoformat().replace("+00:00", "Z")

    values = list(row)
    for i in (8, 9, 10, 11):
        values[i] = ts(values[i])
    return dict(zip(JOB_KEYS, values, strict=True))


def body_ids(stdout: str) -> list[int]:
    """Ids of a ``jobs list`` table (first column, header skipped)."""
    lines = stdout.splitlines()
    assert lines[0].split() == [
        "ID",
        "KIND",
        "QUEUE",
        "STATE",
        "ATTEMPT",
        "SCHEDULED_AT",
        "CREATED_AT",
    ]
    return [int(line.split()[0]) for line in lines[1:]]


# --- the database URL and global flags ----------------------------------------------------------


@pytest.mark.parametrize(
    "command", [*DATA_COMMANDS, ["migrate"], ["migrate", "--status"]], ids=" ".join
)
def test_no_database_url_is_a_usage_error_saying_how_to_pass_one(command: list[str]) -> None:
    err = one_line(refused(invoke(command), 2))
    assert "--database" in err
    assert "DROVER_DATABASE_URL" in err


def test_no_database_url_as_a_subprocess() -> None:
    result = run("stats")
    assert result.returncode == 2
    assert result.stdout == ""
    one_line(result.stderr)
    assert "--database" in result.stderr
    assert "DROVER_DATABASE_URL" in result.stderr


@pytest.mark.parametrize(
    ("flag", "drover_env", "plain_env", "works"),
    [
        ("good", "bad", "bad", True),
        ("bad", "good", "good", False),
        (None, "good", "bad", True),
        (None, "bad", "good", False),
        (None, None, "good", True),
        (None, None, "bad", False),
    ],
)
def test_database_url_precedence(
    db_url: str,
    flag: str | None,
    drover_env: str | None,
    plain_env: str | None,
    works: bool,
) -> None:
    urls: dict[str | None, str | None] = {"good": db_url, "bad": UNREACHABLE, None: None}
    args = ["stats", "--json"]
    if flag is not None:
        args += ["--database", UNREACHABLE if flag == "bad" else db_url]
    result = invoke(
        args, env={"DROVER_DATABASE_URL": urls[drover_env], "DATABASE_URL": urls[plain_env]}
    )
    if works:
        assert json.loads(ok(result)) == {"depths": [], "oldest": [], "paused": []}
    else:
        err = one_line(refused(result, 1))
        assert "127.0.0.1:1" in err


def test_global_flags_work_before_and_after_the_command(db_url: str, conn: Conn) -> None:
    put(conn, "dead", queue="q")
    forms = [
        ["--json", "--database", db_url, "stats"],
        ["stats", "--json", "--database", db_url],
        ["--json", "stats", "-d", db_url],
        ["-d", db_url, "stats", "--json"],
        [f"--database={db_url}", "stats", "--json"],
        ["stats", f"--database={db_url}", "--json"],
    ]
    outputs = {ok(invoke(form)) for form in forms}
    assert len(outputs) == 1
    assert json.loads(outputs.pop())["depths"] == [{"queue": "q", "state": "dead", "count": 1}]
    # On a nested command, between its options too.
    listed = ok(invoke(["jobs", "list", "--json", "--state", "dead", "-d", db_url]))
    assert [j["queue"] for j in json.loads(listed)] == ["q"]
    # Without --json the same command prints the table.
    assert ok(invoke(["stats", "-d", db_url])).startswith("QUEUE")


@pytest.mark.parametrize("form", [["--database="], ["--database", ""]])
def test_an_empty_database_flag_is_a_usage_error(db_url: str, form: list[str]) -> None:
    result = invoke(["stats", *form], env={"DATABASE_URL": db_url})
    assert result.exit_code == 2, result.output


# --- stats --------------------------------------------------------------------------------------


def test_stats_on_an_empty_database(db_url: str) -> None:
    assert ok(cli(db_url, "stats")) == "no job waits or runs in any queue\n"
    assert json.loads(ok(cli(db_url, "stats", "--json"))) == {
        "depths": [],
        "oldest": [],
        "paused": [],
    }


def test_stats_prints_depths_ages_and_paused_queues(
    db_url: str, conn: Conn, client: drover.Client
) -> None:
    put(conn, "available", queue="alpha", due_ago=100)
    put(conn, "available", queue="alpha", due_ago=10)
    put(conn, "retryable", queue="alpha", due_ago=20)
    put(conn, "running", queue="alpha", attempt=1)
    put(conn, "dead", queue="alpha", attempt=25)
    put(conn, "completed", queue="alpha", attempt=1)
    put(conn, "cancelled", queue="alpha")
    put(conn, "scheduled", queue="b")
    put(conn, "available", queue="paused_q", due_ago=300)
    client.pause_queue("paused_q")

    human = ok(cli(db_url, "stats"))
    depths, ages, paused = human.rstrip("\n").split("\n\n")
    assert depths.splitlines() == [
        "QUEUE     STATE      COUNT",
        "alpha     available  2",
        "alpha     retryable  1",
        "alpha     running    1",
        "alpha     dead       1",
        "b         scheduled  1",
        "paused_q  available  1",
    ]
    header, line = ages.splitlines()
    assert header == "QUEUE  OLDEST_AGE_SECONDS"
    match = re.fullmatch(r"alpha  (\d+\.\d{3})", line)
    assert match is not None, line
    assert 100.0 <= float(match.group(1)) < 110.0
    assert paused == "paused queues: paused_q"

    document = json.loads(ok(cli(db_url, "stats", "--json")))
    assert list(document) == ["depths", "oldest", "paused"]
    assert document["depths"] == [
        {"queue": "alpha", "state": "available", "count": 2},
        {"queue": "alpha", "state": "retryable", "count": 1},
        {"queue": "alpha", "state": "running", "count": 1},
        {"queue": "alpha", "state": "dead", "count": 1},
        {"queue": "b", "state": "scheduled", "count": 1},
        {"queue": "paused_q", "state": "available", "count": 1},
    ]
    (oldest,) = document["oldest"]
    assert oldest["queue"] == "alpha"
    assert 100.0 <= oldest["age_seconds"] < 110.0
    assert document["paused"] == ["paused_q"]


def test_stats_as_a_subprocess(db_url: str, conn: Conn) -> None:
    put(conn, "dead", queue="q")
    put(conn, "available", queue="q", due_ago=60)
    result = run("stats", "--json", url=db_url)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    document = json.loads(result.stdout)
    assert document["depths"] == [
        {"queue": "q", "state": "available", "count": 1},
        {"queue": "q", "state": "dead", "count": 1},
    ]
    assert [a["queue"] for a in document["oldest"]] == ["q"]
    assert 60.0 <= document["oldest"][0]["age_seconds"] < 70.0


# --- jobs list ----------------------------------------------------------------------------------


def test_jobs_list_newest_first_with_filters_and_limit(db_url: str, conn: Conn) -> None:
    conn.execute(
        "INSERT INTO drover_jobs (kind, queue) SELECT 'bulk', 'bulk' FROM generate_series(1, 101)"
    )
    a_dead = put(conn, "dead", queue="a")
    a_live = put(conn, "available", queue="a")
    b_dead = put(conn, "dead", queue="b")

    assert body_ids(ok(cli(db_url, "jobs", "list"))) == list(range(b_dead, b_dead - 100, -1))
    assert body_ids(ok(cli(db_url, "jobs", "list", "--limit", "3"))) == [b_dead, a_live, a_dead]
    assert body_ids(ok(cli(db_url, "jobs", "list", "--limit", "1000"))) == list(
        range(b_dead, 0, -1)
    )
    assert body_ids(ok(cli(db_url, "jobs", "list", "--queue", "a"))) == [a_live, a_dead]
    assert body_ids(ok(cli(db_url, "jobs", "list", "--state", "dead"))) == [b_dead, a_dead]
    both = ok(cli(db_url, "jobs", "list", "--queue", "a", "--state", "dead"))
    assert body_ids(both) == [a_dead]
    (line,) = both.splitlines()[1:]
    assert line.split()[:5] == [str(a_dead), "task", "a", "dead", "0/25"]
    assert body_ids(ok(cli(db_url, "jobs", "list", "--queue", "nowhere"))) == []


def test_jobs_list_by_kind_and_args(db_url: str, conn: Conn) -> None:
    ada = put(conn, "dead", kind="send_email", args={"to": "ada", "n": 1})
    put(conn, "dead", kind="send_email", args={"to": "bob"})
    other = put(conn, "dead", kind="resize", args={"to": "ada"})
    assert body_ids(ok(cli(db_url, "jobs", "list", "--kind", "resize"))) == [other]
    by_args = ok(cli(db_url, "jobs", "list", "--args", '{"to": "ada"}'))
    assert body_ids(by_args) == [other, ada]
    both = ok(cli(db_url, "jobs", "list", "--kind", "send_email", "--args", '{"to": "ada"}'))
    assert body_ids(both) == [ada]
    for bad, message in (
        ("{to: ada}", "--args is not valid JSON"),
        ("[1]", "must be a JSON object"),
    ):
        assert message in refused(cli(db_url, "jobs", "list", "--args", bad), 2)


def test_jobs_list_json(db_url: str, conn: Conn) -> None:
    assert json.loads(ok(cli(db_url, "jobs", "list", "--json"))) == []
    first = put(conn, "dead", args={"to": "ada"}, errors=ERRORS, attempt=25)
    second = put(conn, "running", queue="q", attempt=1, unique_key="u1")
    document = json.loads(ok(cli(db_url, "--json", "jobs", "list")))
    assert isinstance(document, list)
    assert [job["id"] for job in document] == [second, first]
    for job in document:
        assert list(job) == JOB_KEYS
        for key in ("scheduled_at", "created_at"):
            assert ISO_Z.match(job[key]), job[key]
    assert document == [expected_job(conn, second), expected_job(conn, first)]
    assert document[1]["errors"] == ERRORS
    assert document[1]["args"] == {"to": "ada"}
    assert ISO_Z.match(document[0]["leased_until"])
    assert ISO_Z.match(document[1]["finalized_at"])
    assert document[0]["unique_key"] == "u1"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--state", "exploded"], "unknown --state 'exploded'"),
        (["--state", "DEAD"], "unknown --state 'DEAD'"),
        (["--limit", "0"], "--limit must be between 1 and 1000, not 0"),
        (["--limit", "-1"], "--limit must be between 1 and 1000, not -1"),
        (["--limit", "1001"], "--limit must be between 1 and 1000, not 1001"),
        (["--limit", "many"], "Invalid value for '--limit'"),
        (["--queue", ""], "--queue"),
        (["unexpected"], "unexpected"),
    ],
)
def test_jobs_list_bad_input_is_a_usage_error(
    db_url: str, conn: Conn, args: list[str], message: str
) -> None:
    put(conn)
    before = table_snapshot(conn)
    err = refused(cli(db_url, "jobs", "list", *args), 2)
    assert message in err
    if "state" in message:
        assert "available, scheduled, running" in err  # it names the states it knows
    assert table_snapshot(conn) == before


def test_jobs_list_as_a_subprocess(db_url: str, conn: Conn) -> None:
    put(conn, "available", queue="q")
    dead = put(conn, "dead", queue="q")
    result = run("jobs", "list", "--state", "dead", "--json", url=db_url)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [expected_job(conn, dead)]
    bad = run("jobs", "list", "--limit", "1001", url=db_url)
    assert bad.returncode == 2
    assert "--limit must be between 1 and 1000" in bad.stderr


# --- jobs get -----------------------------------------------------------------------------------


def test_jobs_get_shows_args_and_errors_with_tracebacks(db_url: str, conn: Conn) -> None:
    job_id = put(
        conn,
        "dead",
        kind="send_email",
        queue="mail",
        args={"to": "ada@example.com", "tags": ["a", "b"]},
        errors=ERRORS,
        attempt=2,
        unique_key="welcome:ada",
    )
    lines = ok(cli(db_url, "jobs", "get", str(job_id))).splitlines()
    assert lines[:5] == [
        f"id:           {job_id}",
        "kind:         send_email",
        "queue:        mail",
        "state:        dead",
        "attempt:      2/25",
    ]
    assert "unique_key:   welcome:ada" in lines
    assert "priority:     0" in lines
    assert any(line.startswith("finalized_at: ") and line.endswith("Z") for line in lines)
    args_at = lines.index("args:")
    assert json.loads("\n".join(lines[args_at + 1 : lines.index("errors (2):")])) == {
        "to": "ada@example.com",
        "tags": ["a", "b"],
    }
    assert '    "to": "ada@example.com",' in lines
    errors_at = lines.index("errors (2):")
    assert lines[errors_at + 1 :] == [
        "  attempt 1 at 2030-01-02T03:04:05.000006Z: ValueError: boom",
        # The traceback is printed as text, one line per line, not as an escaped string.
        "    Traceback (most recent call last):",
        '      File "app/workers.py", line 12, in work',
        "        raise ValueError('boom')",
        "    ValueError: boom",
        "  attempt 2 at 2030-01-02T03:09:05Z: TimeoutError: slow",
    ]

    document = json.loads(ok(cli(db_url, "jobs", "get", str(job_id), "--json")))
    assert document == {
        **expected_job(conn, job_id),
        "result": None,
        "cancel_request": None,
        "ledger": [],
    }
    assert document["errors"][0]["trace"] == TRACE


def test_jobs_get_shows_a_completed_jobs_result(db_url: str, conn: Conn) -> None:
    job_id = put(conn, "completed")
    conn.execute(
        "UPDATE drover_jobs SET result = %s::jsonb WHERE id = %s",
        (json.dumps({"sent": 3, "to": ["ada"]}), job_id),
    )
    lines = ok(cli(db_url, "jobs", "get", str(job_id))).splitlines()
    at = lines.index("result:")
    assert json.loads("\n".join(lines[at + 1 :])) == {"sent": 3, "to": ["ada"]}
    assert '    "sent": 3' in lines  # indented JSON, not one escaped string
    document = json.loads(ok(cli(db_url, "jobs", "get", str(job_id), "--json")))
    assert document["result"] == {"sent": 3, "to": ["ada"]}
    no_result = put(conn, "completed")
    assert "result:" not in ok(cli(db_url, "jobs", "get", str(no_result))).splitlines()


def test_jobs_get_of_a_job_without_errors_prints_no_errors_section(db_url: str, conn: Conn) -> None:
    job_id = put(conn, args=[1, "two"])
    out = ok(cli(db_url, "jobs", "get", f" {job_id} "))
    assert out.endswith('args:\n  [\n    1,\n    "two"\n  ]\n')
    assert "errors" not in out


@pytest.mark.parametrize("command", ["jobs get", "retry", "cancel"])
@pytest.mark.parametrize("bad_id", ["abc", "0", "-1", "99999999999999999999", "1.5", "", "0x1"])
def test_bad_job_ids_are_usage_errors(db_url: str, conn: Conn, command: str, bad_id: str) -> None:
    put(conn, "dead")  # job 1 exists: a mis-parse would find (and change) it
    before = table_snapshot(conn)
    err = one_line(refused(cli(db_url, *command.split(), "--", bad_id), 2))
    assert f"invalid job id {bad_id!r}" in err
    assert table_snapshot(conn) == before


def test_a_superscript_digit_is_an_invalid_job_id(db_url: str, conn: Conn) -> None:
    put(conn)
    err = refused(cli(db_url, "jobs", "get", "²"), 2)
    assert "invalid job id" in err


def test_jobs_get_of_a_missing_job_exits_1(db_url: str, conn: Conn) -> None:
    put(conn)
    err = one_line(refused(cli(db_url, "jobs", "get", "4242"), 1))
    assert "job 4242 does not exist" in err


def test_jobs_get_as_a_subprocess(db_url: str, conn: Conn) -> None:
    job_id = put(conn, "dead", errors=ERRORS, attempt=2)
    result = run("jobs", "get", str(job_id), url=db_url)
    assert result.returncode == 0, result.stderr
    assert "    Traceback (most recent call last):\n" in result.stdout
    assert "  attempt 2 at 2030-01-02T03:09:05Z: TimeoutError: slow\n" in result.stdout
    missing = run("jobs", "get", "999", url=db_url)
    assert missing.returncode == 1
    assert missing.stderr == "drover: job 999 does not exist\n"


# --- retry / cancel -----------------------------------------------------------------------------


def test_cancel_prints_the_cancelled_job(db_url: str, conn: Conn) -> None:
    job_id = put(conn, "retryable", errors=ERRORS[:1], attempt=1)
    out = ok(cli(db_url, "cancel", str(job_id)))
    assert out.startswith(f"cancelled job {job_id}\nid:           {job_id}\n")
    assert "state:        cancelled\n" in out
    assert "finalized_at: " in out
    assert state_of(conn, job_id) == "cancelled"
    other = put(conn, "dead")
    document = json.loads(ok(cli(db_url, "--json", "cancel", str(other))))
    assert document == expected_job(conn, other)
    assert document["state"] == "cancelled"


def test_retry_prints_the_redriven_job(db_url: str, conn: Conn) -> None:
    job_id = put(conn, "dead", errors=ERRORS, attempt=25)
    out = ok(cli(db_url, "retry", str(job_id)))
    assert out.startswith(f"retried job {job_id}: now available\nid:           {job_id}\n")
    assert "attempt:      0/25\n" in out
    assert "errors (2):" in out  # kept
    row = conn.execute(
        "SELECT state::text, attempt, finalized_at, jsonb_array_length(errors) "
        "FROM drover_jobs WHERE id = %s",
        (job_id,),
    ).fetchone()
    assert row == ("available", 0, None, 2)
    other = put(conn, "dead", attempt=25)
    document = json.loads(ok(cli(db_url, "retry", str(other), "--json")))
    assert document == expected_job(conn, other)
    assert (document["state"], document["attempt"]) == ("available", 0)


@pytest.mark.parametrize(
    ("command", "state", "want"),
    [
        ("cancel", "completed", "running or cancellable"),
        ("cancel", "cancelled", "running or cancellable"),
        ("retry", "available", "dead or cancelled"),
        ("retry", "scheduled", "dead or cancelled"),
        ("retry", "retryable", "dead or cancelled"),
        ("retry", "running", "dead or cancelled"),
        ("retry", "completed", "dead or cancelled"),
    ],
)
def test_refused_transitions_exit_1_with_the_state(
    db_url: str, conn: Conn, command: str, state: str, want: str
) -> None:
    job_id = put(conn, state, attempt=1, errors=ERRORS[1:])
    before = table_snapshot(conn)
    err = one_line(refused(cli(db_url, command, str(job_id)), 1))
    assert err == f"drover: cannot {command} job {job_id}: job {job_id} is {state}, want {want}\n"
    assert table_snapshot(conn) == before


@pytest.mark.parametrize("command", ["retry", "cancel"])
def test_retry_and_cancel_of_a_missing_job_exit_1(db_url: str, conn: Conn, command: str) -> None:
    put(conn, "dead")
    before = table_snapshot(conn)
    err = one_line(refused(cli(db_url, command, "77"), 1))
    assert err == f"drover: cannot {command} job 77: job 77 does not exist\n"
    assert table_snapshot(conn) == before


def test_retry_refused_by_a_unique_key_held_again_exits_1(db_url: str, conn: Conn) -> None:
    dead = put(conn, "dead", kind="report", unique_key="day:1", attempt=25)
    put(conn, "available", kind="report", unique_key="day:1")
    before = table_snapshot(conn)
    err = one_line(refused(cli(db_url, "retry", str(dead)), 1))
    assert f"cannot retry job {dead}" in err
    assert "same unique key" in err
    assert table_snapshot(conn) == before


def test_retry_and_cancel_as_subprocesses(db_url: str, conn: Conn) -> None:
    dead = put(conn, "dead", attempt=25)
    running = put(conn, "running", attempt=1)
    retried = run("retry", str(dead), "--json", url=db_url)
    assert retried.returncode == 0, retried.stderr
    assert json.loads(retried.stdout) == expected_job(conn, dead)
    assert state_of(conn, dead) == "available"
    cancel = run("cancel", str(running), "--reason", "wrong input", url=db_url)
    assert cancel.returncode == 0, cancel.stderr
    assert cancel.stdout.startswith(
        f"asked the worker running job {running} to cancel it: it ends cancelled when its "
        "attempt ends\n"
    )
    assert state_of(conn, running) == "running"
    request = conn.execute(
        "SELECT cancel_request FROM drover_jobs WHERE id = %s", (running,)
    ).fetchone()
    assert request is not None
    assert request[0]["reason"] == "wrong input"
    cancelled = run("cancel", str(dead), url=db_url)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.startswith(f"cancelled job {dead}\n")
    assert state_of(conn, dead) == "cancelled"


# --- enqueue ------------------------------------------------------------------------------------


def test_enqueue_inserts_with_kind_queue_and_args(db_url: str, conn: Conn) -> None:
    out = ok(
        cli(db_url, "enqueue", "--kind", "send_email", "--queue", "mail", "--args", '{"to": "ada"}')
    )
    assert out == (
        "enqueued job 1 (kind send_email, queue mail, available); "
        "its args were not validated (no --app)\n"
    )
    row = conn.execute("SELECT kind, queue, args, state::text, max_attempts FROM drover_jobs")
    assert row.fetchall() == [("send_email", "mail", {"to": "ada"}, "available", 25)]

    document = json.loads(ok(cli(db_url, "enqueue", "--kind", "k", "--json", "--args", "[1, 2]")))
    assert document == expected_job(conn, 2)
    assert (document["queue"], document["args"], document["state"]) == (
        "default",
        [1, 2],
        "available",
    )
    ok(cli(db_url, "enqueue", "--kind", "bare"))
    assert conn.execute("SELECT queue, args FROM drover_jobs WHERE id = 3").fetchone() == (
        "default",
        {},
    )


def test_enqueue_priority_as_a_subprocess(db_url: str, conn: Conn) -> None:
    result = run("enqueue", "--kind", "urgent", "--priority", "-7", "--json", url=db_url)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["priority"] == -7 and document == expected_job(conn, document["id"])
    stored = conn.execute("SELECT priority FROM drover_jobs WHERE id = %s", (document["id"],))
    assert stored.fetchone() == (-7,)
    shown = run("jobs", "get", str(document["id"]), url=db_url)
    assert "priority:     -7" in shown.stdout.splitlines()
    before = table_snapshot(conn)
    for bad in ("101", "-101"):
        refused_run = run("enqueue", "--kind", "urgent", "--priority", bad, url=db_url)
        assert refused_run.returncode == 2, refused_run.stderr
        assert "--priority: InsertOpts.priority must be between -100 and 100" in refused_run.stderr
        assert f"not {bad}" in refused_run.stderr
    not_a_number = run("enqueue", "--kind", "urgent", "--priority", "high", url=db_url)
    assert not_a_number.returncode == 2 and "'--priority'" in not_a_number.stderr
    assert table_snapshot(conn) == before


@pytest.mark.parametrize(
    ("at", "expected"),
    [
        ("2099-01-02T03:04:05Z", datetime(2099, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2099-01-02T05:04:05.5+02:00", datetime(2099, 1, 2, 3, 4, 5, 500000, tzinfo=UTC)),
    ],
)
def test_enqueue_at_a_future_time_schedules_the_job(
    db_url: str, conn: Conn, at: str, expected: datetime
) -> None:
    out = ok(cli(db_url, "enqueue", "--kind", "later", "--at", at))
    assert out.startswith("enqueued job 1 (kind later, queue default, scheduled);")
    row = conn.execute("SELECT state::text, scheduled_at FROM drover_jobs").fetchone()
    assert row == ("scheduled", expected)


def test_enqueue_at_a_past_time_is_available_now(db_url: str, conn: Conn) -> None:
    ok(cli(db_url, "enqueue", "--kind", "k", "--at", "2001-01-01T00:00:00Z"))
    row = conn.execute("SELECT state::text, now() - scheduled_at FROM drover_jobs").fetchone()
    assert row is not None
    assert row[0] == "available"
    assert row[1] < timedelta(seconds=5)


TEN_MB_JSON = '{"blob": "' + "x" * (10 * 1024 * 1024) + '"}'


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--kind", "k", "--args", "{not json"], "valid JSON"),
        (["--kind", "k", "--args", ""], "valid JSON"),
        (["--kind", "k", "--args", "{'a': 1}"], "valid JSON"),
        (["--kind", "k", "--args", TEN_MB_JSON], "larger than 1048576 bytes"),
        (["--kind", "k", "--args", '{"a": "x\\u0000y"}'], "NUL"),
        (["--kind", "k", "--args", '{"a": "x\x00y"}'], "valid JSON"),
        (["--kind", "", "--args", "{}"], "kind must not be empty"),
        (["--kind", "   "], "kind must not be empty"),
        (["--kind", "k\x00"], "NUL"),
        (["--args", "{}"], "--kind"),
        (["--kind", "k", "--queue", ""], "--queue must not be empty"),
        (["--kind", "k", "--queue", "q" * 129], "maximum is 128"),
        (["--kind", "k", "--at", "2099-01-02T03:04:05"], "needs a time zone"),
        (["--kind", "k", "--at", "tomorrow"], "is not an ISO-8601 time"),
        (["--kind", "k", "--at", ""], "is not an ISO-8601 time"),
    ],
    ids=[
        "not-json",
        "empty-args",
        "single-quotes",
        "ten-mb",
        "nul-escape",
        "raw-nul",
        "empty-kind",
        "blank-kind",
        "nul-kind",
        "missing-kind",
        "empty-queue",
        "long-queue",
        "naive-at",
        "garbage-at",
        "empty-at",
    ],
)
def test_enqueue_bad_input_is_a_usage_error_and_writes_nothing(
    db_url: str, conn: Conn, args: list[str], message: str
) -> None:
    put(conn)
    before = table_snapshot(conn)
    err = refused(cli(db_url, "enqueue", *args), 2)
    assert message in err
    assert table_snapshot(conn) == before


def test_enqueue_of_nan_is_a_usage_error(db_url: str, conn: Conn) -> None:
    before = table_snapshot(conn)
    err = refused(cli(db_url, "enqueue", "--kind", "k", "--args", '{"a": NaN}'), 2)
    assert "valid JSON" in err
    assert table_snapshot(conn) == before


@pytest.mark.parametrize("name", HOSTILE)
def test_enqueue_stores_hostile_names_verbatim(db_url: str, conn: Conn, name: str) -> None:
    args = json.dumps({"note": name}, ensure_ascii=False)
    document = json.loads(
        ok(cli(db_url, "enqueue", "--kind", name, "--queue", name, "--args", args, "--json"))
    )
    assert (document["kind"], document["queue"], document["args"]) == (name, name, {"note": name})
    assert conn.execute("SELECT to_regclass('drover_jobs') IS NOT NULL").fetchone() == (True,)
    assert conn.execute("SELECT kind, queue, args->>'note' FROM drover_jobs").fetchall() == [
        (name, name, name)
    ]
    listed = json.loads(ok(cli(db_url, "jobs", "list", "--queue", name, "--json")))
    assert [j["id"] for j in listed] == [document["id"]]


def test_enqueue_as_a_subprocess(db_url: str, conn: Conn) -> None:
    name = "'; DROP TABLE drover_jobs; -- ☃"
    result = run("enqueue", "--kind", name, "--queue", name, "--args", '{"n": 1}', url=db_url)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"enqueued job 1 (kind {name}, queue {name}, available);")
    assert conn.execute("SELECT kind, queue, args FROM drover_jobs").fetchall() == [
        (name, name, {"n": 1})
    ]
    before = table_snapshot(conn)
    bad = run("enqueue", "--kind", "k", "--args", "{oops", url=db_url)
    assert bad.returncode == 2
    assert bad.stdout == ""
    assert "valid JSON" in bad.stderr
    assert table_snapshot(conn) == before


# --- migrate and a missing schema ---------------------------------------------------------------


def test_migrate_status_then_migrate_then_up_to_date(empty_db_url: str) -> None:
    migrations = load_migrations()
    assert migrations
    status = ok(cli(empty_db_url, "migrate", "--status"))
    lines = status.splitlines()
    assert lines[0].split() == ["VERSION", "NAME", "STATUS", "APPLIED_AT"]
    assert [line.split() for line in lines[1:]] == [
        [str(m.version), m.name, "pending"] for m in migrations
    ]
    document = json.loads(ok(cli(empty_db_url, "migrate", "--status", "--json")))
    assert document == {
        "current_version": 0,
        "applied": [],
        "pending": [{"version": m.version, "name": m.name} for m in migrations],
    }
    assert public_tables(empty_db_url) == []  # --status changed nothing

    applied = ok(cli(empty_db_url, "migrate"))
    assert applied.splitlines() == [f"applied {m.label}" for m in migrations]
    assert "drover_jobs" in public_tables(empty_db_url)
    assert ok(cli(empty_db_url, "migrate")) == "schema is up to date\n"
    assert json.loads(ok(cli(empty_db_url, "migrate", "--json"))) == {"applied": []}

    after = json.loads(ok(cli(empty_db_url, "--json", "migrate", "--status")))
    assert after["current_version"] == migrations[-1].version
    assert after["pending"] == []
    assert [(m["version"], m["name"]) for m in after["applied"]] == [
        (m.version, m.name) for m in migrations
    ]
    assert all(ISO_Z.match(m["applied_at"]) for m in after["applied"])
    human = ok(cli(empty_db_url, "migrate", "--status")).splitlines()[1:]
    assert [line.split()[:3] for line in human] == [
        [str(m.version), m.name, "applied"] for m in migrations
    ]
    # Now the data commands work.
    assert json.loads(ok(cli(empty_db_url, "stats", "--json")))["depths"] == []


def test_migrate_json_lists_what_it_applied(empty_db_url: str) -> None:
    document = json.loads(ok(cli(empty_db_url, "migrate", "--json")))
    assert document == {
        "applied": [{"version": m.version, "name": m.name} for m in load_migrations()]
    }


def test_migrate_as_a_subprocess(empty_db_url: str) -> None:
    status = run("migrate", "--status", url=empty_db_url)
    assert status.returncode == 0, status.stderr
    assert "pending" in status.stdout
    assert public_tables(empty_db_url) == []
    applied = run("migrate", url=empty_db_url)
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.splitlines() == [f"applied {m.label}" for m in load_migrations()]
    again = run("migrate", url=empty_db_url)
    assert (again.returncode, again.stdout) == (0, "schema is up to date\n")


@pytest.mark.parametrize("command", DATA_COMMANDS, ids=" ".join)
def test_data_commands_refuse_a_database_without_the_schema(
    empty_db_url: str, command: list[str]
) -> None:
    err = one_line(refused(cli(empty_db_url, *command), 1))
    assert "`drover migrate`" in err
    assert public_tables(empty_db_url) == []  # nothing was created behind the operator's back


def test_data_commands_refuse_an_outdated_schema(empty_db_url: str) -> None:
    from drover._db.migrator import _apply_next

    migrations = load_migrations()
    if len(migrations) < 2:
        pytest.skip("needs at least two migrations")
    with psycopg.connect(empty_db_url, autocommit=True) as c:
        assert _apply_next(c, migrations[:1]) == migrations[0]
    before = public_tables(empty_db_url)
    err = one_line(refused(cli(empty_db_url, "enqueue", "--kind", "k"), 1))
    assert f"at version {migrations[0].version}" in err
    assert f"needs {migrations[-1].version}" in err
    assert "`drover migrate`" in err
    assert public_tables(empty_db_url) == before
    with psycopg.connect(empty_db_url) as c:
        assert c.execute("SELECT count(*) FROM drover_jobs").fetchone() == (0,)


def test_a_missing_schema_as_a_subprocess(empty_db_url: str) -> None:
    result = run("jobs", "list", url=empty_db_url)
    assert result.returncode == 1
    one_line(result.stderr)
    assert "`drover migrate`" in result.stderr


# --- unreachable and refusing databases ---------------------------------------------------------


@pytest.mark.parametrize(
    "command", [*DATA_COMMANDS, ["migrate"], ["migrate", "--status"]], ids=" ".join
)
def test_an_unreachable_database_is_one_line_without_the_password(command: list[str]) -> None:
    started = time.monotonic()
    result = cli(UNREACHABLE, *command)
    assert time.monotonic() - started < 20  # not the pool's 30 s
    err = one_line(refused(result, 1))
    assert "127.0.0.1:1" in err
    assert PASSWORD not in result.output


def test_an_unreachable_database_as_a_subprocess() -> None:
    started = time.monotonic()
    result = run("stats", "--database", UNREACHABLE, timeout=30)
    # Not the pool's 30 s; an interpreter's start on a busy machine takes seconds.
    assert time.monotonic() - started < 20
    assert result.returncode == 1
    assert result.stdout == ""
    one_line(result.stderr)
    assert "127.0.0.1" in result.stderr
    assert "1" in result.stderr.split("127.0.0.1", 1)[1][:3]  # the port, right after the host
    assert PASSWORD not in result.stdout + result.stderr


def _refusing_urls(pg_server: str) -> list[str]:
    """The test server with a password, asked for a database or role that does not exist.

    The test server trusts local connections, so a wrong password cannot be
    provoked; a nonexistent database or role is refused the same way.
    """
    params = psycopg.conninfo.conninfo_to_dict(pg_server)
    host = str(params.get("host") or "localhost")
    port = str(params.get("port") or "5432")
    user = str(params.get("user") or "postgres")
    return [
        psycopg.conninfo.make_conninfo(pg_server, dbname="drover_no_such_db", password=PASSWORD),
        psycopg.conninfo.make_conninfo(pg_server, user="drover_no_such_role", password=PASSWORD),
        f"postgresql://{user}:{PASSWORD}@/drover_no_such_db"
        f"?host={quote(host, safe='')}&port={port}",
    ]


@pytest.mark.parametrize("which", [0, 1, 2], ids=["no-database", "no-role", "url-form"])
def test_a_refusing_server_is_one_line_without_the_password(pg_server: str, which: int) -> None:
    url = _refusing_urls(pg_server)[which]
    for command in (["stats"], ["migrate"], ["enqueue", "--kind", "k"]):
        result = cli(url, *command)
        err = one_line(refused(result, 1))
        assert "does not exist" in err
        assert PASSWORD not in result.output
    sub = run("jobs", "list", "--database", url)
    assert sub.returncode == 1
    one_line(sub.stderr)
    assert PASSWORD not in sub.stdout + sub.stderr


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://u:{PASSWORD}@h/x?bogus_parameter=1",
        f"postgresql://u:{PASSWORD}@h/x x=y=z",
        f"host=h password={PASSWORD} broken",
    ],
)
def test_an_unparsable_database_url_is_a_usage_error(url: str) -> None:
    result = invoke(["stats", "--database", url])
    err = refused(result, 2)
    assert err.startswith("drover: the database URL cannot be parsed")
    assert PASSWORD not in result.output


def test_an_unparsable_database_url_is_reported_in_one_line() -> None:
    one_line(refused(invoke(["stats", "--database", "postgresql://u@h/x?bogus=1"]), 2))


def test_a_badly_encoded_password_is_not_printed() -> None:
    result = invoke(["stats", "--database", f"postgresql://u:{PASSWORD}%ZZ@h/x"])
    assert result.exit_code == 2
    assert PASSWORD not in result.output


# --- version ------------------------------------------------------------------------------------


def test_version_and_dash_dash_version_print_the_package_version() -> None:
    assert drover.__version__
    assert ok(invoke(["version"])) == f"{drover.__version__}\n"
    assert ok(invoke(["--version"])) == f"{drover.__version__}\n"


def test_version_as_subprocesses() -> None:
    for args in (["version"], ["--version"]):
        result = run(*args)
        assert (result.returncode, result.stdout, result.stderr) == (
            0,
            f"{drover.__version__}\n",
            "",
        )


# --- worker -------------------------------------------------------------------------------------


def _run_worker(app: str, db_url: str, conn: Conn, poll: Poll, tmp_path: Path, *flags: str) -> None:
    with drover.Inspector(db_url) as inspector:
        job = inspector.enqueue("cli_ping", '{"note": "hello"}')
    env = {k: v for k, v in os.environ.items() if k != "DROVER_DATABASE_URL"}
    env["DATABASE_URL"] = db_url
    stderr_path = tmp_path / "worker.stderr"
    with stderr_path.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "drover", "worker", app, *flags],
            cwd=CLI_DIR,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        try:
            poll(
                lambda: proc.poll() is not None or state_of(conn, job.id) == "completed",
                timeout=30,
                message="the worker completed the cli_ping job",
            )
            assert proc.poll() is None, stderr_path.read_text()
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert code == 0, stderr_path.read_text()
    assert "drover worker stopped cleanly" in stderr_path.read_text()
    row = conn.execute("SELECT state::text, attempt FROM drover_jobs WHERE id = %s", (job.id,))
    assert row.fetchone() == ("completed", 1)


def test_worker_runs_a_client_attribute_until_sigterm(
    db_url: str, conn: Conn, poll: Poll, tmp_path: Path
) -> None:
    _run_worker("cli_app:client", db_url, conn, poll, tmp_path, "--concurrency", "2")


def test_worker_runs_a_client_factory_until_sigterm(
    db_url: str, conn: Conn, poll: Poll, tmp_path: Path
) -> None:
    _run_worker("cli_app:make_client", db_url, conn, poll, tmp_path)


@pytest.fixture
def app_dir(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run in-process worker commands from this directory; close what importing cli_app opened."""
    monkeypatch.chdir(CLI_DIR)
    monkeypatch.setattr(sys, "path", list(sys.path))  # undo the CLI's sys.path insert
    sys.modules.pop("cli_app", None)
    yield
    module = sys.modules.pop("cli_app", None)
    if module is not None:
        module.client.close()


@pytest.mark.parametrize(
    ("app", "extra", "message"),
    [
        ("nonexistent_module:x", [], "cannot import 'nonexistent_module'"),
        ("cli_app:not_there", [], "'cli_app' has no attribute 'not_there'"),
        ("cli_app:clinet", [], "'cli_app' has no attribute 'clinet' (did you mean 'client'?)"),
        (
            "nonexistent_module:x",
            [],
            "run from the directory that holds 'nonexistent_module', or add that directory to "
            "PYTHONPATH",
        ),
        ("drover.contrb:x", [], "No module named 'drover.contrb' (did you mean 'contrib'?)"),
        (
            "cli_app:NOT_A_CLIENT",
            [],
            "is 42, of type int; it must be a drover.Client or a function",
        ),
        (
            "cli_app:Ping",
            [],
            "is a drover.JobArgs class (cli_app.Ping); it must be a drover.Client",
        ),
        ("cli_app:workers", [], "APP names the drover.Client that runs it"),
        ("cli_app:make_producer", [], "no workers, so it has no job it could run"),
        ("cli_app:make_producer", [], "drover.Client(url, drover.Config(workers=workers))"),
        (
            "cli_app.py:client",
            [],
            "names a file, not a module: drop the .py and use cli_app:client",
        ),
        ("tests/cli/cli_app.py:client", [], "tests.cli.cli_app:client from this directory"),
        ("nosuch.py:x", [], "cannot import 'nosuch.py'"),
        ("nosuch.py:x", [], "names a file, not a module: drop the .py and use nosuch:x"),
        ("tests/cli/cli_app.py:client", [], "cli_app:client run from tests/cli/"),
        ("./cli_app.py:client", [], "drop the .py and use cli_app:client"),
        ("../cli/cli_app.py:client", [], "takes a module path: cli_app:client run from ../cli/"),
        ("tests/cli/cli_app.py", [], "tests.cli.cli_app:<name> from this directory"),
        ("no-colon", [], "module:attribute"),
        (":client", [], "module:attribute"),
        ("cli_app:", [], "module:attribute"),
        ("cli_app:client", ["--queues", "a=x"], "--queues must look like"),
        ("cli_app:client", ["--queues", "=1"], "--queues must look like"),
        ("cli_app:client", ["--concurrency", "0"], "--concurrency"),
    ],
)
def test_worker_refuses_an_app_that_is_not_a_client(
    db_url: str, conn: Conn, app_dir: None, app: str, extra: list[str], message: str
) -> None:
    job = put(conn, kind="cli_ping")
    before = table_snapshot(conn)
    err = refused(invoke(["worker", app, *extra], env={"DATABASE_URL": db_url}), 2)
    assert message in err
    assert table_snapshot(conn) == before
    assert state_of(conn, job) == "available"


def test_worker_refuses_a_superscript_queue_weight(db_url: str, app_dir: None) -> None:
    result = invoke(["worker", "cli_app:client", "--queues", "a=²"], env={"DATABASE_URL": db_url})
    assert result.exit_code == 2, result.output
    assert "--queues must look like" in result.stderr


def test_worker_refuses_a_client_without_workers_as_a_subprocess(db_url: str, conn: Conn) -> None:
    job = put(conn, kind="cli_ping")
    before = table_snapshot(conn)
    result = run("worker", "cli_app:make_producer", url=db_url, cwd=CLI_DIR)
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    err = one_line(result.stderr)
    assert "APP cli_app:make_producer is a client with no workers" in err
    assert "drover.Config(workers=workers)" in err
    assert table_snapshot(conn) == before
    assert state_of(conn, job) == "available"
