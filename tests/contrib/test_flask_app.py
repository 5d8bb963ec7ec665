"""examples/flask_app and docs/flask.md: the guide's steps as written, and jobs in the app context.

The guide's steps run as subprocesses, in the guide's order, against a database
nothing has touched. The rest imports the example in this process.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import drover
import drover.testing
from drover.contrib.flask import app_context

Conn = psycopg.Connection[tuple[Any, ...]]
Poll = Callable[..., Any]
ROOT = Path(__file__).resolve().parents[2]
APP_DIR = ROOT / "examples" / "flask_app"
_EXAMPLE_MODULES = ("app", "jobs", "models", "worker")

# The commands of docs/flask.md's "Run the example", in its order. The test runs
# what the page says; a change to the page must come here too.
GUIDE_STEPS = [
    "cd examples/flask_app",
    "export DATABASE_URL=postgresql://localhost/shop",
    "flask --app app init-db",
    "flask --app app run",
    "drover worker worker:make_client",
    "curl -d email=ada@example.com http://127.0.0.1:5000/orders",
]


def _guide_steps() -> list[str]:
    page = (ROOT / "docs" / "flask.md").read_text()
    section = page.split("## Run the example", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.strip() for line in block.splitlines() if line.strip()]


def _command(line: str) -> list[str]:
    """A documented command line as argv: its console script beside this interpreter."""
    argv = shlex.split(line)
    script = Path(sys.executable).parent / argv[0]
    return [str(script), *argv[1:]] if script.exists() else [sys.executable, "-m", *argv]


class _Lines:
    """Reads a process's stream on a thread, so a test can wait for a line without blocking."""

    def __init__(self, stream: Any) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            self.lines.append(line)

    def find(self, pattern: str) -> re.Match[str] | None:
        for line in list(self.lines):
            if found := re.search(pattern, line):
                return found
        return None

    def join(self) -> str:
        self._thread.join(timeout=30)
        return "".join(self.lines)


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)


def _one(conn: Conn, sql: str) -> Any:
    row = conn.execute(sql).fetchone()
    assert row is not None
    return row[0]


def test_the_guides_steps_work_as_written_on_a_fresh_database(
    empty_db_url: str, poll: Poll
) -> None:
    steps = _guide_steps()
    assert steps == GUIDE_STEPS
    cd, export, init_db, run, worker, curl = steps
    cwd = ROOT / cd.split()[1]
    env = {k: v for k, v in os.environ.items() if k != "DROVER_DATABASE_URL"}
    env[export.split()[1].split("=")[0]] = empty_db_url  # the guide's placeholder URL: ours

    initialised = subprocess.run(
        _command(init_db), cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert initialised.returncode == 0, initialised.stderr
    assert "the shop's tables are ready" in initialised.stdout

    # The guide's port is 5000; a test takes a free one from the kernel instead.
    server = subprocess.Popen(
        [*_command(run), "--port", "0"],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    served = _Lines(server.stderr)
    workers = subprocess.Popen(
        _command(worker),
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        port = poll(
            lambda: served.find(r"Running on http://127\.0\.0\.1:(\d+)"),
            timeout=30,
            message="flask run printing its address",
        ).group(1)
        curl_argv = shlex.split(curl)
        assert curl_argv[:2] == ["curl", "-d"]
        url = curl_argv[3].replace("127.0.0.1:5000", f"127.0.0.1:{port}")
        assert url.startswith("http://127.0.0.1:")
        posted = urllib.request.urlopen(url, data=curl_argv[2].encode(), timeout=30)  # noqa: S310
        with posted as response:
            placed = json.loads(response.read())
        with psycopg.connect(empty_db_url, autocommit=True) as conn:
            poll(
                lambda: _one(conn, "SELECT receipt_sent FROM orders WHERE id = 1") is True,
                timeout=30,
                message="the worker marking the order receipt_sent",
            )
            assert _one(conn, "SELECT email FROM orders") == "ada@example.com"
            assert _one(conn, "SELECT state::text FROM drover_jobs") == "completed"
            assert _one(conn, "SELECT id FROM drover_jobs") == placed["job"]
    finally:
        _stop(server)
        served.join()
        if server.stderr is not None:
            server.stderr.close()
        workers.send_signal(signal.SIGTERM)
        _, err = workers.communicate(timeout=30)
    assert workers.returncode == 0, err


@pytest.fixture
def shop(db_url: str) -> Iterator[Any]:
    """The example's modules, imported here, with its application on ``db_url``."""
    for name in _EXAMPLE_MODULES:
        sys.modules.pop(name, None)
    sys.path.insert(0, str(APP_DIR))
    try:
        import app as shop_app  # type: ignore[import-not-found]

        flask_app = shop_app.create_app(db_url)
        result = flask_app.test_cli_runner().invoke(args=["init-db"])
        assert result.exit_code == 0, result.output
        yield flask_app
        with flask_app.app_context():
            shop_app.db.engine.dispose()
    finally:
        sys.path.remove(str(APP_DIR))
        for name in _EXAMPLE_MODULES:
            sys.modules.pop(name, None)


def test_an_order_and_its_job_commit_together_or_neither(shop: Any, conn: Conn) -> None:
    client = shop.test_client()
    placed = client.post("/orders", data={"email": "ada@example.com"})
    assert placed.status_code == 200, placed.text
    declined = client.post("/orders", data={"email": "bob@example.com", "fail": "1"})
    assert declined.status_code == 409
    assert _one(conn, "SELECT count(*) FROM orders") == 1
    assert _one(conn, "SELECT count(*) FROM drover_jobs") == 1
    assert _one(conn, "SELECT id FROM drover_jobs") == placed.json["job"]


class Doomed(drover.JobArgs, kind="flask_test_doomed", max_attempts=1):
    """A job whose handler writes through db.session and then fails."""

    order_id: int


def test_jobs_use_the_apps_session_and_leave_none_behind(
    shop: Any, db_url: str, conn: Conn, poll: Poll
) -> None:
    import jobs  # type: ignore[import-not-found]
    import models  # type: ignore[import-not-found]

    db, order_model = models.db, models.Order
    registry = drover.Workers()
    registry.register(args=jobs.SendReceipt)(jobs.send_receipt)

    @registry.register(args=Doomed)
    def doomed(job: drover.Job[Doomed]) -> None:
        order = db.session.get(order_model, job.args.order_id)
        order.email = "overwritten"
        db.session.flush()  # written in the job's transaction, never committed
        raise RuntimeError("failed after writing")

    web = shop.test_client()
    orders = [web.post("/orders", data={"email": f"{n}@example.com"}).json for n in range(8)]
    producer = drover.Client(db_url)
    producer.insert(Doomed(order_id=orders[0]["order"]))
    producer.close()
    config = drover.Config(
        workers=registry,
        concurrency=4,
        queues={"default": 1, "mail": 1},
        poll_interval=0.05,
        middleware=[app_context(shop)],
    )
    with drover.Client(db_url, config):
        poll(
            lambda: _one(conn, "SELECT count(*) FROM drover_jobs WHERE finalized_at IS NULL") == 0,
            timeout=30,
            message="every job finished",
        )
    states: dict[str, list[str]] = dict(
        conn.execute(
            "SELECT kind, array_agg(DISTINCT state::text) FROM drover_jobs GROUP BY kind"
        ).fetchall()
    )
    assert states == {"flask_send_receipt": ["completed"], "flask_test_doomed": ["dead"]}
    # Handlers read and wrote the models through db.session ...
    assert _one(conn, "SELECT count(*) FROM orders WHERE receipt_sent") == 8
    # ... the failed one's write was rolled back with its session ...
    assert _one(conn, "SELECT count(*) FROM orders WHERE email = 'overwritten'") == 0
    # ... and no job left a session, a checked-out connection or an open transaction.
    assert db.session.registry.registry == {}
    with shop.app_context():
        assert db.engine.pool.checkedout() == 0
    open_tx = (
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND state LIKE 'idle in transaction%'"
    )
    assert _one(conn, open_tx) == 0


def test_without_the_app_context_a_handler_cannot_use_the_session(
    shop: Any, db_url: str, conn: Conn, poll: Poll
) -> None:
    import jobs

    registry = drover.Workers()
    registry.register(args=jobs.SendReceipt)(jobs.send_receipt)
    order = shop.test_client().post("/orders", data={"email": "ada@example.com"}).json
    config = drover.Config(workers=registry, queues={"mail": 1}, poll_interval=0.05)
    with drover.Client(db_url, config):
        error = poll(
            lambda: (
                _one(conn, f"SELECT errors::text FROM drover_jobs WHERE id = {order['job']}")
                != "[]"
            ),
            timeout=30,
            message="the attempt failing",
        )
    errors = _one(conn, f"SELECT errors::text FROM drover_jobs WHERE id = {order['job']}")
    assert error and "application context" in errors


def test_app_context_refuses_what_is_not_an_application() -> None:
    with pytest.raises(drover.InvalidArgument, match="needs a Flask application.*builtins.str"):
        app_context("app")  # type: ignore[arg-type]


class _AppName(drover.JobArgs, kind="flask_app_name"):
    pass


def test_app_context_applies_to_async_handlers_too(db_url: str) -> None:
    import asyncio

    import flask

    app = flask.Flask("async_app")
    seen: list[str] = []
    workers = drover.Workers()

    @workers.register
    async def name(job: drover.Job[_AppName]) -> None:
        await asyncio.sleep(0)
        seen.append(flask.current_app.name)

    config = drover.Config(workers=workers, middleware=[app_context(app)], poll_interval=0.05)
    client = drover.Client(db_url, config)
    try:
        with drover.testing.inline(client) as jobs:
            client.insert(_AppName())
            [worked] = jobs.drain()
        assert worked.state is drover.JobState.COMPLETED, worked.error
        assert seen == ["async_app"]
    finally:
        client.close()
