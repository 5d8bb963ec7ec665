"""`manage.py drover worker` (`python -m django drover worker`): its refusal and its logging.

Each run is a real Django process with `djworker_settings` (in this directory),
on the test's database.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from jobdb import Conn, Poll, table_snapshot

import drover

CLI_DIR = Path(__file__).resolve().parent

pytest.importorskip("django")


class DjBoom(drover.JobArgs, kind="dj_boom"):
    """`djworker_jobs`'s kind that always fails."""


def _env(db_url: str, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJ_", "DJANGO_"))}
    env.update(DATABASE_URL=db_url, DJANGO_SETTINGS_MODULE="djworker_settings", **settings)
    return env


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "django", "drover", "worker", *args]


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)


def _run_until_dead(
    db_url: str,
    poll: Poll,
    tmp_path: Path,
    processes: list[subprocess.Popen[str]],
    *args: str,
    **settings: str,
) -> str:
    """Start the worker, wait until a job it kills is logged, stop it; its standard error."""
    producer = drover.Client(db_url)
    try:
        job = producer.insert(DjBoom(), drover.InsertOpts(max_attempts=1))
    finally:
        producer.close()
    path = tmp_path / "django-worker.stderr"
    with path.open("w") as stderr:
        proc = subprocess.Popen(
            _command(*args),
            cwd=CLI_DIR,
            env=_env(db_url, DJ_WORKERS="djworker_jobs.workers", **settings),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            text=True,
        )
        processes.append(proc)
        poll(
            lambda: proc.poll() is not None or f"job {job.id} (dj_boom" in path.read_text(),
            timeout=30,
            message="the dead job logged",
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, path.read_text()
    return path.read_text()


def test_a_worker_with_nothing_to_run_refuses_to_start(db_url: str, conn: Conn) -> None:
    before = table_snapshot(conn)
    result = subprocess.run(
        _command(), cwd=CLI_DIR, env=_env(db_url), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2, result.stderr
    assert "DROVER['WORKERS'] registers no job kind" in result.stderr
    assert "drover.Config(workers=...)" in result.stderr
    assert table_snapshot(conn) == before


def test_the_worker_logs_its_start_and_a_dead_job_in_drovers_format(
    db_url: str, poll: Poll, tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    err = _run_until_dead(db_url, poll, tmp_path, processes)
    assert " INFO drover.cli[" in err and "worker starting under Django: database " in err
    dead = [line for line in err.splitlines() if ") dead after " in line and "dj boom" in line]
    assert len(dead) == 1 and " ERROR drover[" in dead[0], err
    assert err.rstrip().endswith("drover worker stopped cleanly")


def test_djangos_logging_setting_with_a_root_handler_wins(
    db_url: str, poll: Poll, tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    err = _run_until_dead(
        db_url, poll, tmp_path, processes, "--log-format", "json", DJ_LOGGING="root"
    )
    lines = err.rstrip().splitlines()[:-1]  # the last: "drover worker stopped cleanly"
    # Every record in the application's format (a traceback's lines follow its record).
    lines = [line for line in lines if not line.startswith(("Traceback ", " ", "RuntimeError"))]
    assert lines and all(line.startswith("DJANGOAPP ") for line in lines), err
    assert any(line.startswith("DJANGOAPP ERROR drover job ") for line in lines), err


def test_a_bad_log_level_is_a_usage_error(db_url: str) -> None:
    result = subprocess.run(
        _command("--log-level", "loud"),
        cwd=CLI_DIR,
        env=_env(db_url, DJ_WORKERS="djworker_jobs.workers"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "--log-level must be one of DEBUG, INFO, WARNING, ERROR, not 'loud'" in result.stderr
