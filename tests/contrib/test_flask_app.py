"""examples/flask_app end to end: an order and its job commit together; a worker runs it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

Conn = psycopg.Connection[tuple[Any, ...]]
Poll = Callable[..., Any]
APP_DIR = Path(__file__).resolve().parents[2] / "examples" / "flask_app"


@pytest.fixture
def shop(db_url: str) -> Iterator[Any]:
    sys.path.insert(0, str(APP_DIR))
    try:
        import app as shop_app  # type: ignore[import-not-found]

        flask_app = shop_app.create_app(db_url)
        with flask_app.app_context():
            shop_app.db.create_all()
        yield flask_app
        with flask_app.app_context():
            shop_app.db.engine.dispose()
    finally:
        sys.path.remove(str(APP_DIR))
        for name in ("app", "jobs", "worker"):
            sys.modules.pop(name, None)


def _one(conn: Conn, sql: str) -> Any:
    row = conn.execute(sql).fetchone()
    assert row is not None
    return row[0]


def test_an_order_and_its_job_commit_together_and_a_worker_runs_it(
    shop: Any, db_url: str, conn: Conn, poll: Poll
) -> None:
    client = shop.test_client()
    placed = client.post("/orders", data={"email": "ada@example.com"})
    assert placed.status_code == 200, placed.text
    declined = client.post("/orders", data={"email": "bob@example.com", "fail": "1"})
    assert declined.status_code == 409
    assert _one(conn, "SELECT count(*) FROM orders") == 1
    assert _one(conn, "SELECT count(*) FROM drover_jobs") == 1
    assert _one(conn, "SELECT id FROM drover_jobs") == placed.json["job"]

    env = {k: v for k, v in os.environ.items() if k != "DROVER_DATABASE_URL"}
    env["DATABASE_URL"] = db_url
    worker = subprocess.Popen(
        [sys.executable, "-m", "drover", "worker", "worker:make_client"],
        cwd=APP_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        poll(
            lambda: _one(conn, "SELECT state::text FROM drover_jobs") == "completed",
            timeout=30,
            message="the receipt job completed by `drover worker worker:make_client`",
        )
        assert _one(conn, "SELECT email FROM orders") == "ada@example.com (receipt sent)"
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
