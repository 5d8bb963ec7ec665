"""`drover worker --queues name=weight:max_workers,...`: parsed, checked, and enforced.

In-process (typer's runner) for the usage errors, and as a real `python -m
drover worker` process from `tests/cli` (APP `cli_app:client`) for the cap.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from clihelp import invoke, one_line, refused, run
from jobdb import Conn, Poll, observe, table_snapshot
from test_cli_logging import Worker

import drover

CLI_DIR = Path(__file__).resolve().parent


@pytest.fixture
def app_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run in-process worker commands from this directory; close what importing cli_app opened."""
    monkeypatch.chdir(CLI_DIR)
    monkeypatch.setattr(sys, "path", list(sys.path))  # undo the CLI's sys.path insert
    sys.modules.pop("cli_app", None)
    yield
    module = sys.modules.pop("cli_app", None)
    if module is not None:
        module.client.close()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--queues", "images=2:"], "--queues must look like name=weight:max_workers"),
        (["--queues", "images=2:x"], "--queues must look like"),
        (["--queues", "images=:4"], "--queues must look like"),
        (["--queues", "images=2:4:1"], "--queues must look like"),
        (["--queues", "images=2:³"], "--queues must look like"),
        (["--queues", "images=2:-1"], "--queues must look like"),
        (["--queues", "images=2,"], "--queues must look like"),
        (["--queues", "images=2:0"], "--queues images=2:0: Queue max_workers must be at least 1"),
        (["--queues", "images=0"], "--queues images=0: Queue weight must be between 1 and 100000"),
        (["--queues", "images=1,images=2:1"], "--queues names queue 'images' twice"),
        (["--queues", "images=1:11"], "max_workers 11 is more than Config.concurrency 10"),
        (
            ["--concurrency", "2", "--queues", "images=1:3,default"],
            "Config.queues['images']: max_workers 3 is more than Config.concurrency 2",
        ),
    ],
)
def test_a_bad_queues_option_is_a_usage_error_that_changes_nothing(
    db_url: str, conn: Conn, app_dir: None, flags: list[str], message: str
) -> None:
    with drover.Inspector(db_url) as inspector:
        inspector.enqueue("cli_ping", "{}")
    before = table_snapshot(conn)
    err = one_line(
        refused(invoke(["worker", "cli_app:client", *flags], env={"DATABASE_URL": db_url}), 2)
    )
    assert message in err
    assert table_snapshot(conn) == before


def test_a_bad_queues_option_as_a_subprocess_is_refused_before_any_process_starts(
    db_url: str, conn: Conn
) -> None:
    # Under --processes the supervisor checks the whole Config itself: a child
    # refusing it would only be restarted.
    before = table_snapshot(conn)
    result = run(
        "worker", "cli_app:client", "--processes", "2", "--concurrency", "2",
        "--queues", "default=1:5", url=db_url, cwd=CLI_DIR, timeout=30,
    )  # fmt: skip
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    err = one_line(result.stderr)
    assert "max_workers 5 is more than Config.concurrency 2" in err
    assert table_snapshot(conn) == before


@pytest.fixture
def started(db_url: str) -> Iterator[list[Worker]]:
    workers: list[Worker] = []
    yield workers
    for worker in workers:
        worker.kill()


def _states(conn: Conn) -> dict[str, int]:
    rows = conn.execute("SELECT state::text, count(*) FROM drover_jobs GROUP BY 1").fetchall()
    return {str(state): int(n) for state, n in rows}


def test_the_worker_caps_a_queue_at_the_max_workers_the_option_gives(
    db_url: str, conn: Conn, poll: Poll, tmp_path: Path, started: list[Worker]
) -> None:
    # cli_hold's first attempt blocks: with three threads and no cap all three
    # would run; `default=1:1` lets one run and leaves two waiting.
    with drover.Inspector(db_url) as inspector:
        for _ in range(3):
            inspector.enqueue("cli_hold", "{}")
    worker = Worker(
        db_url, tmp_path, "cli_app:client", "--concurrency", "3", "--queues", "default=1:1,mail"
    )
    started.append(worker)
    poll(
        lambda: worker.proc.poll() is not None or _states(conn).get("running") == 1,
        timeout=30,
        message="one cli_hold job runs",
    )
    assert worker.proc.poll() is None, worker.err

    def capped() -> None:
        assert _states(conn) == {"running": 1, "available": 2}

    observe(0.5, capped)
    (start,) = [line for line in worker.lines() if "worker starting" in line]
    assert "queues default=1:1,mail=1, concurrency 3, processes 1" in start
