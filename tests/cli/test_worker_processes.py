"""``drover worker --processes N``: the supervisor as a real process, against a real database.

The APP is ``tests/cli/cli_app.py``; every worker process records its lease
holder (which names its pid) in the jobs it claims, so the tests can tell the
processes apart from the database.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jobdb import Conn, Poll

import drover

pytestmark = pytest.mark.slow

APP_DIR = Path(__file__).resolve().parent


class Ping(drover.JobArgs, kind="cli_ping"):
    """``cli_app``'s kind that completes at once (inserted here, worked there)."""

    note: str = ""


class Hold(drover.JobArgs, kind="cli_hold"):
    """``cli_app``'s kind whose first attempt blocks."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Supervised:
    """``python -m drover worker APP --processes N ...`` and its ops port."""

    def __init__(self, db_url: str, app: str, *args: str) -> None:
        self.port = _free_port()
        env = {k: v for k, v in os.environ.items() if k != "DROVER_DATABASE_URL"}
        env["DATABASE_URL"] = db_url
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "drover",
                "worker",
                app,
                "--ops-addr",
                f"127.0.0.1:{self.port}",
                *args,
            ],
            cwd=APP_DIR,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return int(r.status), r.read().decode()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode()
        except OSError as exc:
            return 0, str(exc)

    def children(self) -> list[int]:
        """The supervisor's live child processes (Linux: from /proc)."""
        pid = self.proc.pid
        try:
            text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
        except OSError:
            return []
        return sorted(int(p) for p in text.split())

    def stop(self, timeout: float = 30) -> tuple[int, str]:
        self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, err


@pytest.fixture
def supervised(db_url: str) -> Iterator[list[Supervised]]:
    started: list[Supervised] = []
    yield started
    for s in started:
        if s.proc.poll() is None:
            for child in s.children():
                os.kill(child, signal.SIGKILL)
            s.proc.kill()
            s.proc.communicate(timeout=10)


def _start(started: list[Supervised], db_url: str, app: str, *args: str) -> Supervised:
    s = Supervised(db_url, app, *args)
    started.append(s)
    return s


def _enqueue(db_url: str, jobs: list[drover.JobArgs]) -> list[drover.JobRow]:
    """Insert ``jobs`` from a client of the test's own, as an application would."""
    producer = drover.Client(db_url)
    try:
        return producer.insert_many(jobs)
    finally:
        producer.close()


def _holders(conn: Conn, kind: str) -> set[str]:
    rows = conn.execute(
        "SELECT DISTINCT leased_by FROM drover_jobs WHERE kind = %s AND leased_by IS NOT NULL",
        (kind,),
    ).fetchall()
    return {str(r[0]) for r in rows}


def _jobs_per_holder(conn: Conn, kind: str) -> dict[str, int]:
    rows = conn.execute(
        "SELECT leased_by, count(*) FROM drover_jobs WHERE kind = %s GROUP BY leased_by",
        (kind,),
    ).fetchall()
    return {str(r[0]): int(r[1]) for r in rows}


def _completed(conn: Conn, kind: str) -> int:
    row = conn.execute(
        "SELECT count(*) FROM drover_jobs WHERE kind = %s AND state = 'completed'", (kind,)
    ).fetchone()
    assert row is not None
    return int(row[0])


def _metric_sum(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith((name + "{", name + " ")):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_n_processes_share_the_work_one_ops_port_aggregates_and_sigterm_drains_them_all(
    db_url: str, conn: Conn, poll: Poll, supervised: list[Supervised]
) -> None:
    s = _start(supervised, db_url, "cli_app:make_client", "--processes", "2")
    poll(lambda: s.get("/readyz")[0] == 200, timeout=30, message="every worker process ready")
    assert len(s.children()) == 2
    assert s.get("/readyz")[1].startswith("ok: 2 worker processes ready")
    # Enough that both processes must take some: each claims at most its 10 idle slots.
    _enqueue(db_url, [Ping(note=str(i)) for i in range(300)])
    poll(lambda: _completed(conn, "cli_ping") == 300, timeout=60, message="all 300 completed")
    assert len(_holders(conn, "cli_ping")) == 2, "both processes claimed jobs"
    status, metrics = s.get("/metrics")
    assert status == 200
    assert 'child="0"' in metrics and 'child="1"' in metrics
    assert _metric_sum(metrics, "drover_jobs_completed_total") == 300
    code, err = s.stop()
    assert code == 0, err
    assert "drover worker stopped cleanly" in err


def test_a_killed_process_is_replaced_and_its_job_rescued_after_the_lease(
    db_url: str, conn: Conn, poll: Poll, supervised: list[Supervised]
) -> None:
    s = _start(supervised, db_url, "cli_app:short_lease_client", "--processes", "2")
    poll(lambda: s.get("/readyz")[0] == 200, timeout=30, message="ready")
    first = s.children()
    (held,) = _enqueue(db_url, [Hold()])

    def holder_pid() -> int | None:
        row = conn.execute(
            "SELECT leased_by FROM drover_jobs WHERE id = %s AND state = 'running'", (held.id,)
        ).fetchone()
        if row is None or row[0] is None:
            return None
        return int(str(row[0]).split("(pid ")[1].split(" ")[0])

    victim: int = poll(holder_pid, timeout=20, message="the job running in a worker process")
    assert victim in s.children()
    os.kill(victim, signal.SIGKILL)
    poll(
        lambda: len(s.children()) == 2 and victim not in s.children(),
        timeout=20,
        message="the killed process replaced",
    )
    replacement = next(pid for pid in s.children() if pid not in first)
    # Rescued after its 1 s lease, then completed on its second attempt elsewhere.
    poll(lambda: _completed(conn, "cli_hold") == 1, timeout=30, message="rescued and completed")
    row = conn.execute(
        "SELECT attempt, errors FROM drover_jobs WHERE id = %s", (held.id,)
    ).fetchone()
    assert row is not None
    attempt: Any = row[0]
    errors: Any = row[1]
    assert attempt == 2
    assert errors[0]["error"].startswith("drover: lease expired")
    poll(lambda: s.get("/readyz")[0] == 200, timeout=30, message="ready again")
    code, err = s.stop()
    assert code == 0, err
    # The supervisor said what happened, at levels that match (the CLI set logging up).
    lines = err.splitlines()
    assert any(
        f" INFO drover.cli[{s.proc.pid}] drover {drover.__version__} worker starting" in line
        and line.endswith("processes 2")
        for line in lines
    ), err
    for level, text in (
        ("INFO", f"started worker process {victim} (slot "),
        ("ERROR", f"worker process {victim} exited -9; restarting it in 0.5s"),
        ("INFO", f"started worker process {replacement} (slot "),
        ("INFO", "stopping 2 worker processes"),
    ):
        assert any(f" {level} drover.supervisor[{s.proc.pid}] {text}" in line for line in lines), (
            text,
            err,
        )
    # The children's own records reach the same standard error, with their pids.
    assert f" INFO drover[{replacement}] worker pool started" in err


def test_a_process_is_recycled_after_its_job_limit(
    db_url: str, conn: Conn, poll: Poll, supervised: list[Supervised]
) -> None:
    s = _start(
        supervised, db_url, "cli_app:make_client", "--processes", "1", "--max-jobs-per-child", "5"
    )
    poll(lambda: s.get("/readyz")[0] == 200, timeout=30, message="ready")
    _enqueue(db_url, [Ping(note=str(i)) for i in range(30)])
    poll(lambda: _completed(conn, "cli_ping") == 30, timeout=60, message="all 30 completed")
    # A process claims exactly 5 jobs, runs them and is replaced: 30 jobs take
    # six processes, one after another, none of which ran more than its 5.
    per_holder = _jobs_per_holder(conn, "cli_ping")
    assert sorted(per_holder.values()) == [5] * 6, per_holder
    code, err = s.stop()
    assert code == 0, err


def test_a_process_above_its_memory_limit_is_drained_and_replaced(
    db_url: str, conn: Conn, poll: Poll, supervised: list[Supervised]
) -> None:
    # 1 MB is below any Python process: each child drains at its first check
    # (every 0.5 s) and exits for a fresh one, which still works jobs meanwhile.
    s = _start(
        supervised, db_url, "cli_app:make_client", "--processes", "1", "--max-memory-per-child", "1"
    )
    poll(lambda: s.children(), timeout=30, message="a first child")
    seen: set[int] = set(s.children())

    def replaced() -> bool:
        now = set(s.children())
        seen.update(now)
        return len(seen) >= 3

    poll(replaced, timeout=60, message="the child replaced twice")
    _enqueue(db_url, [Ping(note=str(i)) for i in range(5)])
    poll(lambda: _completed(conn, "cli_ping") == 5, timeout=60, message="all 5 completed")
    # A crash loop would have ended the supervisor with status 1 ("giving up");
    # recycled processes are replaced without back-off and end cleanly.
    assert s.proc.poll() is None
    code, err = s.stop()
    assert code == 0, err
    assert "Traceback" not in err


def test_sigint_drains_every_process_and_an_incomplete_drain_exits_1(
    db_url: str, conn: Conn, poll: Poll, supervised: list[Supervised]
) -> None:
    s = _start(
        supervised,
        db_url,
        "cli_app:make_client",
        "--processes",
        "2",
        "--shutdown-timeout",
        "0.5",
    )
    poll(lambda: s.get("/readyz")[0] == 200, timeout=30, message="ready")
    (held,) = _enqueue(db_url, [Hold()])

    def state() -> str:
        row = conn.execute("SELECT state FROM drover_jobs WHERE id = %s", (held.id,)).fetchone()
        assert row is not None
        return str(row[0])

    poll(lambda: state() == "running", timeout=20, message="the held job running")
    children = s.children()
    assert len(children) == 2
    # SIGINT (Ctrl-C in a terminal) reaches every child as SIGTERM. The child
    # running the held job cannot finish within 0.5 s: its drain is incomplete,
    # it hands the job back, and the supervisor reports that with status 1.
    s.proc.send_signal(signal.SIGINT)
    _, err = s.proc.communicate(timeout=30)
    assert s.proc.returncode == 1, err
    assert "ran out of its drain budget; the jobs it was running were handed back" in err
    # Once as the supervisor's ERROR record, once as the command's own last line.
    budget = [line for line in err.splitlines() if "drain budget" in line]
    assert len(budget) == 2, "the other process drained cleanly"
    assert " ERROR drover.supervisor[" in budget[0] and budget[1].startswith("drover: worker")
    # No crash: the one traceback is the held handler's own, under its failure's record
    # (it raised once the stop cancelled it; its late outcome is discarded).
    assert err.count("Traceback") == 1, err
    trace = err.split("Traceback", 1)[1]
    assert "RuntimeError: the first attempt was not meant to finish" in trace.split("\n20", 1)[0]
    assert not any(Path(f"/proc/{pid}").exists() for pid in children)
    # Handed back, not left running until its lease expires: claimable at
    # once, and its first attempt stays counted.
    row = conn.execute(
        "SELECT state, attempt FROM drover_jobs WHERE id = %s", (held.id,)
    ).fetchone()
    assert row is not None
    job_state: Any = row[0]
    attempt: Any = row[1]
    assert job_state in ("available", "retryable"), job_state
    assert attempt == 1


def test_the_supervisor_gives_up_on_processes_that_keep_crashing(
    db_url: str, supervised: list[Supervised]
) -> None:
    s = _start(supervised, db_url, "cli_app:crashing_client", "--processes", "2")
    _, err = s.proc.communicate(timeout=60)
    assert s.proc.returncode == 1
    assert "giving up" in err
    assert " CRITICAL drover.supervisor[" in err
    assert "Traceback" not in err


def test_processes_must_be_a_number_or_auto(db_url: str, supervised: list[Supervised]) -> None:
    s = _start(supervised, db_url, "cli_app:make_client", "--processes", "many")
    _, err = s.proc.communicate(timeout=60)
    assert s.proc.returncode == 2
    assert "--processes must be a number from 1 to 256, or auto" in err
