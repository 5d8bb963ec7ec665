"""``drover --schema`` and ``DROVER_SCHEMA``: commands on one installation of several (ADR 0043)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from clihelp import cli, invoke, ok, one_line, refused

import drover

CLI_DIR = Path(__file__).resolve().parent
Poll = Any


def _schemas(url: str) -> set[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%' "
            "AND nspname NOT IN ('public', 'information_schema')"
        ).fetchall()
    return {str(r[0]) for r in rows}


def test_migrate_stats_and_jobs_work_on_the_schema_named(empty_db_url: str) -> None:
    applied = json.loads(ok(cli(empty_db_url, "migrate", "--schema", "a", "--json")))
    assert applied["applied"]
    # DROVER_SCHEMA is the flag's fallback, as DROVER_DATABASE_URL is --database's.
    ok(invoke(["--database", empty_db_url, "migrate"], env={"DROVER_SCHEMA": "b"}))
    assert _schemas(empty_db_url) == {"a", "b"}
    status = json.loads(ok(cli(empty_db_url, "--json", "migrate", "--status")))
    assert status["applied"] == [], "the default installation was never migrated"

    with drover.Inspector(empty_db_url, schema="a") as inspector:
        job = inspector.enqueue("cli_ping", "{}")
    in_a = json.loads(ok(cli(empty_db_url, "--schema", "a", "--json", "stats")))
    in_b = json.loads(
        ok(invoke(["--database", empty_db_url, "--json", "stats"], env={"DROVER_SCHEMA": "b"}))
    )
    assert sum(d["count"] for d in in_a["depths"]) == 1
    assert in_b["depths"] == []
    listed = json.loads(ok(cli(empty_db_url, "jobs", "list", "--schema", "a", "--json")))
    assert [j["id"] for j in listed] == [job.id]
    refused(cli(empty_db_url, "--schema", "b", "jobs", "get", str(job.id)), 1)


def test_an_unmigrated_schema_is_named_in_the_refusal(empty_db_url: str) -> None:
    ok(cli(empty_db_url, "--schema", "a", "migrate"))
    err = one_line(refused(cli(empty_db_url, "--schema", "other", "stats"), 1))
    assert "schema other" in err and "drover migrate" in err


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        (["--schema", "Bad", "migrate"], {}, "--schema"),
        (["--schema", "pg_toast2", "stats"], {}, "--schema"),
        (["migrate"], {"DROVER_SCHEMA": "no-dash"}, "DROVER_SCHEMA"),
        (["roles", "--schema", "pg_x"], {}, "--schema"),
    ],
)
def test_a_bad_schema_is_a_usage_error_naming_where_it_came_from(
    empty_db_url: str, args: list[str], env: dict[str, str | None], named: str
) -> None:
    err = refused(invoke(["--database", empty_db_url, *args], env=env), 2)
    assert named in err
    assert _schemas(empty_db_url) == set()


def test_roles_takes_the_schema_every_other_command_takes() -> None:
    flag = ok(invoke(["roles", "--schema", "tenant_a"]))
    root = ok(invoke(["--schema", "tenant_a", "roles"]))
    env = ok(invoke(["roles"], env={"DROVER_SCHEMA": "tenant_a"}))
    assert flag == root == env
    assert "GRANT SELECT, INSERT ON tenant_a.drover_jobs" in flag
    assert "public." not in flag
    assert "ON public.drover_jobs" in ok(invoke(["roles"], env={"DROVER_SCHEMA": None}))


def test_the_worker_refuses_a_schema_other_than_its_apps(
    empty_db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(CLI_DIR)
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in ("cli_schema_app", "cli_app"):
        sys.modules.pop(name, None)
    env: dict[str, str | None] = {"DATABASE_URL": empty_db_url, "CLI_APP_SCHEMA": "a"}
    try:
        err = refused(invoke(["--schema", "b", "worker", "cli_schema_app:client"], env=env), 2)
    finally:
        # cli_schema_app imports cli_app, which opens a client of its own.
        for name in ("cli_schema_app", "cli_app"):
            module = sys.modules.pop(name, None)
            if module is not None:
                module.client.close()
    assert "'a'" in err and "'b'" in err


@pytest.mark.slow
@pytest.mark.parametrize("flags", [[], ["--processes", "2"]], ids=["one", "supervised"])
def test_the_worker_works_the_schema_given_on_the_command_line(
    empty_db_url: str, poll: Poll, tmp_path: Path, flags: list[str]
) -> None:
    drover.migrate(empty_db_url, schema="a")
    with drover.Inspector(empty_db_url, schema="a") as inspector:
        job = inspector.enqueue("cli_ping", '{"note": "hello"}')
    env = {k: v for k, v in os.environ.items() if k not in ("DROVER_DATABASE_URL", "DROVER_SCHEMA")}
    env["DATABASE_URL"] = empty_db_url
    stderr_path = tmp_path / "worker.stderr"
    with (
        stderr_path.open("w") as stderr,
        drover.Inspector(empty_db_url, schema="a") as inspector,
    ):
        proc = subprocess.Popen(
            [sys.executable, "-m", "drover", "--schema", "a", "worker", "cli_app:client", *flags],
            cwd=CLI_DIR,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        try:
            poll(
                lambda: (
                    proc.poll() is not None
                    or inspector.get_job(job.id).state == drover.JobState.COMPLETED
                ),
                timeout=60,
                message="the worker completed the job in schema a",
            )
            assert proc.poll() is None, stderr_path.read_text()
            # Every process started (each got the schema), so each can drain.
            processes = 2 if flags else 1
            poll(
                lambda: stderr_path.read_text().count("worker pool started") >= processes,
                timeout=60,
                message="every worker process started",
            )
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert code == 0, stderr_path.read_text()
