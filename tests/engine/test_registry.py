"""The registry of live clients: every started client registers, stays fresh, leaves cleanly,
and a crashed one disappears. Against a real database, services driven by ``run_once``."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jobdb import Conn, MakeClient, Poll, db_now, idle_workers, sample_row, wiring

import drover
from drover._db.store import Store
from drover._kernel.claims import Claim
from drover._runtime.registry import Registry
from drover.inspector import WorkerInfo

HERE = Path(__file__).resolve().parent
CLI_APP_DIR = HERE.parent / "cli"


@pytest.fixture
def inspector(db_url: str) -> Iterator[drover.Inspector]:
    with drover.Inspector(db_url) as i:
        yield i


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = Store.open(db_url, who="test", max_size=2)
    yield s
    s.close()


def _rows(conn: Conn) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT client_id, pid, running, started_at, heartbeat_at, expires_at "
        "FROM drover_clients ORDER BY started_at"
    ).fetchall()


def _plant(conn: Conn, client_id: str, pid: int, *, expires_in: float) -> None:
    conn.execute(
        "INSERT INTO drover_clients (id, client_id, host, pid, version, queues, concurrency, "
        "expires_at) VALUES (%s, %s, 'elsewhere', %s, '0.0', ARRAY['default'], 4, "
        "now() + make_interval(secs => %s))",
        (f"planted-{client_id}", client_id, pid, expires_in),
    )


def test_a_started_client_registers_itself_and_a_clean_stop_removes_it(
    make_client: MakeClient, inspector: drover.Inspector, poll: Poll
) -> None:
    workers = idle_workers()
    client = make_client(workers=workers, concurrency=3, queues={"default": 1, "mail": 2})
    client.start()
    [row] = inspector.workers()  # written before start() returned

    assert (row.host, row.pid, row.version) == (
        socket.gethostname(),
        os.getpid(),
        drover.__version__,
    )
    assert row.queues == ("default", "mail") and row.concurrency == 3 and row.running == 0
    assert row.client_id in repr(client)
    assert row.name == f"{row.client_id} (pid {os.getpid()} on {socket.gethostname()})"
    assert row.started_at <= row.heartbeat_at < row.expires_at
    client.stop(timeout=5)
    # stop() returned after the registry thread deleted the row: no wait, no expiry.
    assert inspector.workers() == []


def test_run_once_writes_the_row_then_refreshes_it_with_the_jobs_running_now(
    store: Store, conn: Conn
) -> None:
    registry = Registry(wiring(store, heartbeat_interval=2, lease_duration=10))
    before = db_now(conn)
    assert registry.run_once() == 0
    (client_id, pid, running, started, beat, expires) = _rows(conn)[0]
    assert (client_id, pid, running) == ("test", os.getpid(), 0)
    assert before <= started == beat <= db_now(conn)  # the database clock
    assert (expires - beat).total_seconds() == pytest.approx(3 * 2)

    registry._inflight.add(Claim(sample_row(id=1, attempt=1)))
    registry._inflight.add(Claim(sample_row(id=2, attempt=1)))
    registry.run_once()
    [(_, _, running, started_again, beat_again, _)] = _rows(conn)
    assert running == 2
    assert started_again == started and beat_again >= beat


def test_expired_rows_are_hidden_from_readers_and_reaped_by_any_client(
    store: Store, conn: Conn, inspector: drover.Inspector
) -> None:
    _plant(conn, "crashd", 111, expires_in=-1)  # its client stopped refreshing
    _plant(conn, "alive1", 222, expires_in=60)
    assert [w.client_id for w in inspector.workers()] == ["alive1"]
    assert len(_rows(conn)) == 2  # reading reaps nothing
    registry = Registry(wiring(store, heartbeat_interval=2, lease_duration=10))
    assert registry.run_once() == 1
    assert sorted(r[0] for r in _rows(conn)) == ["alive1", "test"]
    assert registry.run_once() == 0  # its own row is never reaped by itself


def test_a_client_whose_row_was_reaped_registers_again_with_its_first_start_time(
    store: Store, conn: Conn
) -> None:
    registry = Registry(wiring(store, heartbeat_interval=2, lease_duration=10))
    registry.run_once()
    [(_, _, _, started, _, _)] = _rows(conn)
    conn.execute("DELETE FROM drover_clients")  # reaped while it could not reach the database
    registry.run_once()
    [(_, _, _, started_again, _, _)] = _rows(conn)
    assert started_again == started
    assert registry.unregister() is True
    assert registry.unregister() is False
    assert _rows(conn) == []


def _wait_line(process: subprocess.Popen[str], prefix: str) -> str:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith(prefix), (line, process.stderr.read() if process.stderr else "")
    return line


def test_a_killed_process_disappears_once_its_row_expires(
    db_url: str, conn: Conn, store: Store, inspector: drover.Inspector, poll: Poll
) -> None:
    # crash_worker: a one-second lease, so a heartbeat (and registry) interval of 1/3 s.
    process = subprocess.Popen(
        [sys.executable, str(HERE / "crash_worker.py"), db_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        producer = drover.Client(db_url)
        producer.insert(_Crashy())
        producer.close()
        _wait_line(process, "RUNNING ")
        poll(
            lambda: [w for w in inspector.workers() if w.pid == process.pid and w.running == 1],
            message="the worker process registered, running its job",
        )
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        poll(
            lambda: not [w for w in inspector.workers() if w.pid == process.pid],
            timeout=10,
            message="the killed process to leave the live list",
        )
        registry = Registry(wiring(store, heartbeat_interval=2, lease_duration=10))
        assert registry.run_once() == 1
        pids = [r[1] for r in _rows(conn)]
        assert process.pid not in pids and pids == [os.getpid()]
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=10)


class _Crashy(drover.JobArgs, kind="lifecycle_crashy"):
    n: int = 0


@pytest.mark.slow
def test_every_process_of_drover_worker_processes_registers_and_leaves_on_sigterm(
    db_url: str, inspector: drover.Inspector, poll: Poll
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DROVER_DATABASE_URL"}
    env["DATABASE_URL"] = db_url
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "drover", "worker", "cli_app:client", "--processes", "2"],
        cwd=CLI_APP_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        live: Callable[[], list[WorkerInfo]] = inspector.workers
        rows = poll(lambda: len(live()) == 2 and live(), timeout=30, message="two registrations")
        pids = {w.pid for w in rows}
        assert len(pids) == 2 and supervisor.pid not in pids
        assert len({w.client_id for w in rows}) == 2
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(30) == 0
        assert inspector.workers() == []  # each child unregistered as it stopped
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
        supervisor.communicate(timeout=10)


def _drover(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DROVER_DATABASE_URL",)}
    env["DATABASE_URL"] = db_url
    return subprocess.run(
        [sys.executable, "-m", "drover", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_drover_workers_lists_the_live_clients(db_url: str, make_client: MakeClient) -> None:
    empty = _drover(db_url, "workers")
    assert (empty.returncode, empty.stdout.strip()) == (0, "no live workers")
    client = make_client(workers=idle_workers(), queues={"default": 1, "mail": 1})
    client.start()
    listed = _drover(db_url, "--json", "workers")
    assert listed.returncode == 0, listed.stderr
    [worker] = json.loads(listed.stdout)["workers"]
    assert worker["pid"] == os.getpid() and worker["queues"] == ["default", "mail"]
    assert worker["client_id"] in repr(client) and worker["heartbeat_at"].endswith("Z")
    table = _drover(db_url, "workers")
    assert table.stdout.splitlines()[0].split() == [
        "CLIENT", "HOST", "PID", "VERSION", "QUEUES", "RUNNING", "CONCURRENCY", "HEARTBEAT"
    ]  # fmt: skip
    assert f" {os.getpid()} " in table.stdout and "default,mail" in table.stdout
    client.stop(timeout=5)
