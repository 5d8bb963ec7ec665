"""The README's examples run as written, and .ci/run runs the README's commands."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

# Django settings are process-global, so the examples run in a fresh interpreter
# that configures Django for the test database first, as a project's settings would.
_RUNNER = """
import os, sys
import django, psycopg
from django.conf import settings

p = psycopg.conninfo.conninfo_to_dict(os.environ["DATABASE_URL"])
settings.configure(
    USE_TZ=True,
    DATABASES={"default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": p.get("dbname", ""), "HOST": p.get("host", ""), "PORT": p.get("port", ""),
        "USER": p.get("user", ""), "PASSWORD": p.get("password", ""),
    }},
)
django.setup()
namespace = {"__name__": "__readme__"}
for index, block in enumerate(sys.argv[1:]):
    exec(compile(block, f"README.md python block {index}", "exec"), namespace)
from django.db import connections
connections.close_all()
"""


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_readme_python_examples_run(db_url: str, conn: psycopg.Connection[Any]) -> None:
    conn.execute("CREATE TABLE users (id bigserial PRIMARY KEY, email text NOT NULL)")
    blocks = _blocks("python")
    assert len(blocks) >= 6
    env = {**os.environ, "DATABASE_URL": db_url}
    result = subprocess.run(
        [sys.executable, "-c", _RUNNER, *blocks],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "already queued: reminder/ada" in result.stdout
    users = conn.execute("SELECT email FROM users ORDER BY id").fetchall()
    assert users == [("grace@example.com",), ("alan@example.com",), ("edsger@example.com",)]
    by_kind = dict(conn.execute("SELECT kind, count(*) FROM drover_jobs GROUP BY kind").fetchall())
    # ada, the reminder, three transactional inserts, a batch of 1000 + 1, one charge,
    # one receipt completed in its handler's transaction, and the Inspector's enqueue
    # (which it then cancels).
    assert by_kind == {
        "send_email": 1 + 1 + 3 + 1000 + 1,
        "resize_image": 1,
        "charge_card": 1,
        "receipt_in_tx": 1,
    }
    receipt = conn.execute(
        "SELECT j.state::text, r.order_id FROM drover_jobs j, receipts r"
        " WHERE j.kind = 'receipt_in_tx'"
    ).fetchone()
    assert receipt == ("completed", 7)
    cancelled = conn.execute(
        "SELECT count(*) FROM drover_jobs WHERE state = 'cancelled' AND args->>'to' = %s",
        ["ops@example.com"],
    ).fetchone()
    assert cancelled == (1,)
    charge = conn.execute(
        "SELECT state::text, attempt FROM drover_jobs WHERE kind = 'charge_card'"
    ).fetchone()
    assert charge == ("completed", 1)


def test_ci_runs_the_readme_commands() -> None:
    install, test = _blocks("sh")[:2]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert install.strip() in ci
    assert test.strip() in ci
