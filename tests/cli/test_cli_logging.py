"""What `drover worker` prints: logging set up by the CLI unless the application did it.

Every test runs a real `python -m drover worker` process from `tests/cli`
(its APP is `cli_app.py`, or `cli_app_logging.py` for an application that
configures logging itself) and reads its standard error.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import psycopg
import pytest
from clihelp import invoke, refused
from jobdb import Conn, Poll, table_snapshot

import drover

CLI_DIR = Path(__file__).resolve().parent
PASSWORD = "s3cret-in-the-url"
UNREACHABLE = f"postgresql://drover:{PASSWORD}@127.0.0.1:1/nowhere"


class Boom(drover.JobArgs, kind="cli_boom"):
    """`cli_app`'s kind that always fails (inserted here, run there)."""


class Ping(drover.JobArgs, kind="cli_ping"):
    """`cli_app`'s kind that completes at once."""

    note: str = ""


class Worker:
    """`python -m drover worker ARGS` with its standard error in a file."""

    def __init__(self, db_url: str, tmp_path: Path, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if k != "DROVER_DATABASE_URL"}
        env["DATABASE_URL"] = db_url
        self.path = tmp_path / f"worker-{len(list(tmp_path.iterdir()))}.stderr"
        self._file: IO[str] = self.path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "drover", "worker", *args],
            cwd=CLI_DIR,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=self._file,
        )

    @property
    def err(self) -> str:
        return self.path.read_text()

    def lines(self) -> list[str]:
        return self.err.splitlines()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        finally:
            self._file.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._file.close()


@pytest.fixture
def workers(db_url: str, tmp_path: Path) -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.kill()


def _start(started: list[Worker], db_url: str, tmp_path: Path, *args: str) -> Worker:
    worker = Worker(db_url, tmp_path, *args)
    started.append(worker)
    return worker


def _insert(db_url: str, items: list[drover.InsertItem]) -> list[drover.JobRow]:
    producer = drover.Client(db_url)
    try:
        return producer.insert_many(items)
    finally:
        producer.close()


def _with_password(db_url: str) -> str:
    # The test server trusts local connections: the password is carried, never checked.
    return psycopg.conninfo.make_conninfo(db_url, password=PASSWORD)


def _target(db_url: str) -> tuple[str, str]:
    params = psycopg.conninfo.conninfo_to_dict(db_url)
    return str(params.get("host") or "localhost"), str(params["dbname"])


def test_the_worker_logs_a_start_line_failures_at_warning_and_dead_jobs_at_error(
    db_url: str, poll: Poll, tmp_path: Path, workers: list[Worker]
) -> None:
    url = _with_password(db_url)
    dies, retries = _insert(
        db_url,
        [
            (Boom(), drover.InsertOpts(max_attempts=1)),
            (Boom(), drover.InsertOpts(max_attempts=5)),
        ],
    )
    worker = _start(workers, url, tmp_path, "cli_app:client", "--concurrency", "3")

    def logged() -> bool:
        text = worker.err
        return f"job {dies.id} (cli_boom" in text and f"job {retries.id} (cli_boom" in text

    poll(lambda: worker.proc.poll() is not None or logged(), timeout=30, message="both logged")
    assert worker.stop() == 0, worker.err
    lines = worker.lines()
    host, dbname = _target(db_url)
    (start,) = [line for line in lines if "worker starting" in line]
    assert f" INFO drover.cli[{worker.proc.pid}] drover {drover.__version__} worker starting" in (
        start
    )
    assert f"{host}:" in start and f"/{dbname}," in start
    assert "queues default=1, concurrency 3, processes 1" in start
    assert PASSWORD not in worker.err

    def one(needle: str) -> str:
        found = [line for line in lines if needle in line]
        assert len(found) == 1, (needle, worker.err)
        return found[0]

    # One record per failed execution: how long it ran, what next, what failed,
    # then the traceback under it (down to the handler's line), then nothing
    # else about that attempt.
    failed = one(f"job {retries.id} (cli_boom, queue default, attempt 1/5) failed after")
    assert " WARNING drover[" in failed and ", retry scheduled at " in failed
    assert failed.endswith(": RuntimeError: boom")
    after = lines[lines.index(failed) + 1 :]
    assert after[0] == "Traceback (most recent call last):", worker.err
    end = after.index("RuntimeError: boom")
    assert any("cli_app.py" in line for line in after[:end]), worker.err
    about = [
        line for line in lines if f"job {retries.id} (cli_boom, queue default, attempt 1/5)" in line
    ]
    assert len(about) == 2 and about[0].endswith(" started") and about[1] == failed, about
    dead = one(f"job {dies.id} (cli_boom, queue default, attempt 1/1) dead after ")
    assert " ERROR drover[" in dead and dead.endswith(" ms: RuntimeError: boom")
    assert lines[-1] == "drover worker stopped cleanly"


def test_json_logs_are_one_object_per_line_with_the_job_fields(
    db_url: str, poll: Poll, tmp_path: Path, workers: list[Worker]
) -> None:
    (dies,) = _insert(db_url, [(Boom(), drover.InsertOpts(max_attempts=1))])
    worker = _start(
        workers, _with_password(db_url), tmp_path, "cli_app:client", "--log-format", "JSON"
    )
    poll(
        lambda: worker.proc.poll() is not None or '"event": "job_dead"' in worker.err,
        timeout=30,
        message="the dead job logged",
    )
    assert worker.stop() == 0, worker.err
    assert PASSWORD not in worker.err
    *records, last = worker.lines()
    assert last == "drover worker stopped cleanly"
    documents: list[dict[str, Any]] = [json.loads(line) for line in records]
    assert documents, worker.err
    for document in documents:
        assert {"time", "level", "logger", "message", "pid"} <= document.keys()
        assert document["time"].endswith("Z")
    start = next(d for d in documents if d.get("event") == "worker_starting")
    assert start["level"] == "INFO" and start["logger"] == "drover.cli"
    assert start["processes"] == 1 and start["version"] == drover.__version__
    (dead,) = [d for d in documents if d.get("event") == "job_dead"]
    assert dead["level"] == "ERROR" and dead["logger"] == "drover"
    assert (dead["job_id"], dead["job_kind"], dead["queue"]) == (dies.id, "cli_boom", "default")
    assert (dead["attempt"], dead["max_attempts"]) == (1, 1)
    assert dead["error"] == "RuntimeError: boom"
    assert dead["duration_ms"] >= 0
    assert dead["exc_info"].startswith("Traceback (most recent call last):")
    assert dead["exc_info"].endswith("RuntimeError: boom")
    assert [d for d in documents if d.get("event") == "job_failed"] == []


def test_log_level_warning_hides_info_records(
    db_url: str, poll: Poll, tmp_path: Path, workers: list[Worker]
) -> None:
    (dies,) = _insert(db_url, [(Boom(), drover.InsertOpts(max_attempts=1))])
    worker = _start(workers, db_url, tmp_path, "cli_app:client", "--log-level", "warning")
    poll(
        lambda: worker.proc.poll() is not None or f"job {dies.id} " in worker.err,
        timeout=30,
        message="the failure logged",
    )
    assert worker.stop() == 0, worker.err
    text = worker.err
    assert f" ERROR drover[{worker.proc.pid}] job {dies.id} (cli_boom" in text
    assert " INFO " not in text, text


def test_an_application_that_configures_logging_keeps_its_own_format(
    db_url: str, poll: Poll, tmp_path: Path, workers: list[Worker]
) -> None:
    (dies,) = _insert(db_url, [(Boom(), drover.InsertOpts(max_attempts=1))])
    # cli_app_logging calls logging.basicConfig(format="APP ...") when imported.
    worker = _start(workers, db_url, tmp_path, "cli_app_logging:client", "--log-format", "json")
    poll(
        lambda: worker.proc.poll() is not None or f"job {dies.id} " in worker.err,
        timeout=30,
        message="the failure logged",
    )
    assert worker.stop() == 0, worker.err
    *lines, last = worker.lines()
    assert last == "drover worker stopped cleanly"
    # Every record in the application's format (a traceback's lines follow its record).
    records = [line for line in lines if not line.startswith(("Traceback ", "  ", "RuntimeError"))]
    assert records and all(line.startswith("APP ") for line in records), worker.err
    assert "APP WARNING drover.cli --log-format json is ignored" in worker.err
    assert f"APP ERROR drover job {dies.id} (cli_boom" in worker.err
    assert "APP INFO drover.cli drover" in worker.err  # the start line, in the app's format


def test_an_unreachable_database_prints_one_error_without_pool_warnings(
    tmp_path: Path, workers: list[Worker]
) -> None:
    # Importing cli_app opens its client's pool, whose attempts fail in the
    # background while the worker starts.
    worker = _start(workers, UNREACHABLE, tmp_path, "cli_app:client")
    assert worker.proc.wait(timeout=30) == 1
    text = worker.err
    assert "error connecting" not in text, text
    assert PASSWORD not in text
    errors = [line for line in worker.lines() if line.startswith("drover: ")]
    assert len(errors) == 1, text
    assert errors[0].startswith("drover: start: cannot connect to the database at 127.0.0.1:1/")


def _library_run(url: str, configure: str) -> subprocess.CompletedProcess[str]:
    """A script that starts a Client on `url` with no CLI involved, after `configure`."""
    script = f"""
import logging, sys
import drover
{configure}
workers = drover.Workers()
@workers.register(args=type("K", (drover.JobArgs,), {{}}, kind="k"))
def k(job): pass
client = drover.Client(sys.argv[1], drover.Config(workers=workers))
try:
    client.start()
except drover.DatabaseError as exc:
    print("refused:", str(exc).splitlines()[0])
"""
    return subprocess.run(
        [sys.executable, "-c", script, url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_pool_connect_warnings_about_drovers_pools_are_debug_records() -> None:
    # No logging configured: Python's last-resort handler printed every
    # failed attempt beside drover's own error. Now nothing is printed...
    quiet = _library_run(UNREACHABLE, "")
    assert quiet.stdout.startswith("refused: start: cannot connect"), quiet
    assert quiet.stderr == "", quiet.stderr
    # ...and an application that asks psycopg for DEBUG still sees each attempt.
    debug = _library_run(
        UNREACHABLE,
        "logging.basicConfig(level=logging.DEBUG, format='%(levelname)s %(name)s %(message)s')\n"
        "logging.getLogger('psycopg').setLevel(logging.DEBUG)",
    )
    assert debug.stdout.startswith("refused: start: cannot connect"), debug
    assert "DEBUG psycopg.pool error connecting in 'drover'" in debug.stderr, debug.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--log-level", "verbose"], "--log-level must be one of DEBUG, INFO, WARNING, ERROR"),
        (["--log-format", "xml"], "--log-format must be one of text, json, not 'xml'"),
    ],
)
@pytest.mark.parametrize("command", [["worker", "cli_app:client"], ["web"]])
def test_bad_log_flags_are_usage_errors(
    db_url: str, conn: Conn, command: list[str], flags: list[str], message: str
) -> None:
    before = table_snapshot(conn)
    err = refused(invoke([*command, *flags], env={"DATABASE_URL": db_url}), 2)
    assert message in err
    assert table_snapshot(conn) == before
