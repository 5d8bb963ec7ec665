"""examples/fastapi_app and docs/fastapi.md: an async endpoint that writes a row and enqueues in
one transaction, run end to end (request, real worker, effect checked).

The guide's steps run as subprocesses (uvicorn on a loopback port, ``drover
worker``), in the guide's order, against a database nothing has touched. The
rest imports the example in this process and drives it over httpx.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

import drover

Conn = psycopg.Connection[tuple[Any, ...]]
Poll = Callable[..., Any]
ROOT = Path(__file__).resolve().parents[2]
APP_DIR = ROOT / "examples" / "fastapi_app"
_EXAMPLE_MODULES = ("app", "init_db", "jobs", "models", "worker")

# The commands of docs/fastapi.md's "Run the example", in its order. The test
# runs what the page says; a change to the page must come here too.
GUIDE_STEPS = [
    "cd examples/fastapi_app",
    "export DATABASE_URL=postgresql://localhost/shop",
    "python init_db.py",
    "uvicorn app:app",
    "drover worker worker:make_client",
    "curl -H 'Content-Type: application/json' -d '{\"email\": \"ada@example.com\"}' "
    "http://127.0.0.1:8000/orders",
]


def _guide_steps() -> list[str]:
    page = (ROOT / "docs" / "fastapi.md").read_text()
    section = page.split("## Run the example", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.strip() for line in block.splitlines() if line.strip()]


def _command(line: str) -> list[str]:
    """A documented command line as argv: its console script beside this interpreter."""
    argv = shlex.split(line)
    if argv[0] == "python":
        return [sys.executable, *argv[1:]]
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


def _one(conn: Conn, sql: str) -> Any:
    row = conn.execute(sql).fetchone()
    assert row is not None
    return row[0]


@pytest.mark.slow
def test_the_guides_steps_work_as_written_on_a_fresh_database(
    empty_db_url: str, poll: Poll
) -> None:
    steps = _guide_steps()
    assert steps == GUIDE_STEPS
    cd, export, init_db, serve, worker, curl = steps
    cwd = ROOT / cd.split()[1]
    env = {k: v for k, v in os.environ.items() if k != "DROVER_DATABASE_URL"}
    env[export.split()[1].split("=")[0]] = empty_db_url  # the guide's placeholder URL: ours

    initialised = subprocess.run(
        _command(init_db), cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert initialised.returncode == 0, initialised.stderr
    assert "the shop's tables are ready" in initialised.stdout

    # The guide's port is 8000; a test takes a free one from the kernel instead.
    server = subprocess.Popen(
        [*_command(serve), "--host", "127.0.0.1", "--port", "0"],
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
            lambda: served.find(r"Uvicorn running on http://127\.0\.0\.1:(\d+)"),
            timeout=30,
            message="uvicorn printing its address",
        ).group(1)
        argv = shlex.split(curl)
        assert argv[:4] == ["curl", "-H", "Content-Type: application/json", "-d"]
        url = argv[5].replace("127.0.0.1:8000", f"127.0.0.1:{port}")
        response = httpx.post(url, content=argv[4], headers={"Content-Type": "application/json"})
        assert response.status_code == 200, response.text
        placed = response.json()
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
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        served.join()
        if server.stderr is not None:
            server.stderr.close()
        workers.send_signal(signal.SIGTERM)
        _, err = workers.communicate(timeout=30)
    assert workers.returncode == 0, err


@pytest.fixture
def shop(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The example's modules, imported here, with its database initialised on ``db_url``."""
    monkeypatch.setenv("DATABASE_URL", db_url)
    for name in _EXAMPLE_MODULES:
        sys.modules.pop(name, None)
    sys.path.insert(0, str(APP_DIR))
    try:
        import app as shop_app  # type: ignore[import-not-found]
        import init_db  # type: ignore[import-not-found]
        import jobs  # type: ignore[import-not-found]

        init_db.init_db(db_url)
        yield shop_app
        if jobs._engine is not None:
            jobs._engine.dispose()
    finally:
        sys.path.remove(str(APP_DIR))
        for name in _EXAMPLE_MODULES:
            sys.modules.pop(name, None)


def _requests(app: Any, *requests: dict[str, Any]) -> list[httpx.Response]:
    """Send ``requests`` to the ASGI ``app`` over httpx, inside the app's lifespan (its
    engine and its drover.AsyncClient)."""

    async def send() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://shop") as http,
        ):
            return [await http.post("/orders", **request) for request in requests]

    return asyncio.run(send())


def test_an_order_and_its_job_commit_together_and_a_worker_runs_it(
    shop: Any, db_url: str, conn: Conn, poll: Poll
) -> None:
    placed, declined = _requests(
        shop.create_app(db_url),
        {"json": {"email": "ada@example.com"}},
        {"json": {"email": "bob@example.com", "fail": True}},
    )
    assert placed.status_code == 200, placed.text
    assert declined.status_code == 409, declined.text
    assert _one(conn, "SELECT count(*) FROM orders") == 1
    assert _one(conn, "SELECT count(*) FROM drover_jobs") == 1
    job_id = placed.json()["job"]
    assert _one(conn, "SELECT id FROM drover_jobs") == job_id

    import worker  # type: ignore[import-not-found]

    client: drover.Client = worker.make_client()
    client.start()
    try:
        poll(
            lambda: _one(conn, "SELECT receipt_sent FROM orders") is True,
            timeout=30,
            message="the worker marking the order receipt_sent",
        )
        assert client.get_job(job_id).state is drover.JobState.COMPLETED
    finally:
        client.stop(timeout=10)


def test_the_endpoint_refuses_bad_input_with_nothing_written(shop: Any, conn: Conn) -> None:
    (refused,) = _requests(shop.create_app(), {"json": {"mail": "x"}})
    assert refused.status_code == 422, refused.text
    assert _one(conn, "SELECT count(*) FROM orders") == 0
    assert _one(conn, "SELECT count(*) FROM drover_jobs") == 0
