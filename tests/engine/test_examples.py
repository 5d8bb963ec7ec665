"""The runnable examples work end to end against the test database."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[2]


def test_email_example_sends_retries_cancels_and_shuts_down(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "email" / "main.py")],
        env={**os.environ, "DATABASE_URL": db_url},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "all 3 emails sent" in output
    assert "worker stopped cleanly" in output
    assert "request req-" in output  # the middleware's value reached the worker
    rows = conn.execute(
        "SELECT args->>'to', state::text, attempt, jsonb_array_length(errors) "
        "FROM drover_jobs ORDER BY id"
    ).fetchall()
    assert rows == [
        ("ada@example.com", "completed", 1, 0),
        ("grace@flaky.example", "completed", 2, 1),
        ("alan@example.com", "completed", 1, 0),
        ("nobody@invalid.example", "cancelled", 1, 1),
    ]


def test_demo_command_drains_every_job(db_url: str, conn: psycopg.Connection[Any]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "drover", "demo", "--jobs", "300", "--database", db_url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "done in" in result.stdout
    counts = dict(
        conn.execute("SELECT state::text, count(*) FROM drover_jobs GROUP BY state").fetchall()
    )
    assert counts == {"completed": 300}
    # The flaky images and the snoozed digests took the retry and snooze paths.
    retried = conn.execute(
        "SELECT count(*) FROM drover_jobs WHERE jsonb_array_length(errors) > 0"
    ).fetchone()
    assert retried is not None
    assert retried[0] > 0


def test_demo_reports_an_unreachable_database_in_one_line() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "drover",
            "demo",
            "--database",
            "postgresql://demo:hunter2@127.0.0.1:1/x?connect_timeout=2",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    assert "drover: cannot use the database at 127.0.0.1:1" in result.stderr
    assert "hunter2" not in result.stdout + result.stderr


def test_the_demo_without_a_database_starts_its_own_and_prints_no_warning() -> None:
    # README command 1 on a machine without XDG_RUNTIME_DIR (root shells, CI):
    # the first thing a user sees carries no third-party warning.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "DROVER_DATABASE_URL", "XDG_RUNTIME_DIR")
    }
    result = subprocess.run(
        [sys.executable, "-m", "drover", "demo", "--jobs", "50"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "starting a throwaway embedded PostgreSQL" in result.stderr + result.stdout
    assert "done in" in result.stdout
    assert "Warning" not in result.stderr, result.stderr
