"""A worker process ends after its drain, even when a handler never returns (ADR 0053).

``drover worker`` runs ``tests/cli/cli_app.py`` as a real process. Its
``cli_stuck`` handler sleeps a million seconds, deaf to ``job.context``. Once
the shutdown budget runs out, the job is handed back, and the process must
end (status 1) with the thread still inside the handler; until it has ended,
no other worker may claim the job. A second signal during the drain ends the
process at once and quietly. The tests wait on the processes' log lines and
on the database, never on the clock.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from jobdb import Conn, MakeClient, Poll

import drover

pytestmark = pytest.mark.slow

APP_DIR = Path(__file__).resolve().parent
WAIT = 60.0
"""How long any awaited line or exit may take on a loaded machine (only a failing test waits
that long)."""


class Stuck(drover.JobArgs, kind="cli_stuck"):
    """``cli_app``'s kind whose handler never returns (inserted here, worked there)."""


class Worker:
    """``python -m drover worker APP ...`` with its standard error read line by line."""

    def __init__(self, db_url: str, *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if k != "DROVER_DATABASE_URL"}
        env["DATABASE_URL"] = db_url
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "drover", "worker", *args],
            cwd=APP_DIR,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, name="test-stderr", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._changed:
                self._lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._lines.append("")  # EOF marker: no line will come
            self._changed.notify_all()

    @property
    def err(self) -> str:
        self._reader.join(WAIT)
        with self._changed:
            return "\n".join(self._lines)

    def wait_for(self, text: str, count: int = 1) -> None:
        """Until ``text`` appears in ``count`` lines of standard error (fails at EOF or after
        ``WAIT`` seconds)."""

        def seen() -> bool:
            return sum(text in line for line in self._lines) >= count

        with self._changed:
            if not self._changed.wait_for(
                lambda: seen() or self.proc.poll() is not None, timeout=WAIT
            ):
                pytest.fail(f"no {text!r} on stderr within {WAIT}s:\n" + "\n".join(self._lines))
            if not seen():
                pytest.fail(f"the process ended before {text!r}:\n" + "\n".join(self._lines))

    def snapshot(self) -> str:
        """Standard error so far."""
        with self._changed:
            return "\n".join(self._lines)

    def close(self) -> None:
        self._reader.join(WAIT)
        if self.proc.stderr is not None:
            self.proc.stderr.close()

    def children(self) -> list[int]:
        pid = self.proc.pid
        try:
            text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
        except OSError:
            return []
        return sorted(int(p) for p in text.split())


@pytest.fixture
def started() -> Iterator[list[Worker]]:
    workers: list[Worker] = []
    yield workers
    for w in workers:
        if w.proc.poll() is None:
            for child in w.children():
                os.kill(child, signal.SIGKILL)
            w.proc.kill()
        w.proc.wait(WAIT)
        w.close()


def _start(started: list[Worker], db_url: str, *args: str) -> Worker:
    w = Worker(db_url, *args)
    started.append(w)
    return w


def _stuck_job_running(db_url: str, conn: Conn, poll: Poll) -> int:
    producer = drover.Client(db_url)
    try:
        job = producer.insert(Stuck())
    finally:
        producer.close()
    poll(lambda: _row(conn, job.id)[:2] == ("running", 1), timeout=WAIT, message="running")
    return job.id


def _row(conn: Conn, job_id: int) -> tuple[str, int, str | None]:
    row = conn.execute(
        "SELECT state::text, attempt, leased_by FROM drover_jobs WHERE id = %s", (job_id,)
    ).fetchone()
    assert row is not None
    state, attempt, leased_by = row
    assert isinstance(state, str) and isinstance(attempt, int)
    return state, attempt, None if leased_by is None else str(leased_by)


def _alive(pid: int) -> bool:
    """Whether ``pid`` can still run code: not gone, not a zombie, not exiting (Linux)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = text.rsplit(")", 1)[1].split()
    state, flags = fields[0], int(fields[6])
    return state not in ("Z", "X", "x") and not flags & 0x4  # PF_EXITING


def test_after_the_hand_back_the_process_exits_1_before_any_other_worker_claims_the_job(
    db_url: str, conn: Conn, poll: Poll, make_client: MakeClient, started: list[Worker]
) -> None:
    w = _start(started, db_url, "cli_app:make_client", "--shutdown-timeout", "1")
    w.wait_for("worker pool started")
    job_id = _stuck_job_running(db_url, conn, poll)

    # Another worker, polling every 50 ms the whole time: its handler notes
    # whether the first process could still run the job when it got it.
    claims: list[tuple[int, bool]] = []
    rival_workers = drover.Workers()

    @rival_workers.register(args=Stuck)
    def rerun(job: drover.Job[Stuck]) -> None:
        claims.append((job.attempt, _alive(w.proc.pid)))

    rival = make_client(drover.Config(workers=rival_workers, poll_interval=0.05, concurrency=1))
    rival.start()

    w.proc.send_signal(signal.SIGTERM)
    w.wait_for("returned to the queue")
    # The handler still sleeps; the process ends anyway, with the documented status.
    assert w.proc.wait(WAIT) == 1, w.err
    err = w.err
    assert (
        f"shutdown deadline reached: 1 job(s) still running, returned to the queue: [{job_id}]"
        in err
    )
    assert "Traceback" not in err
    assert "drover worker stopped cleanly" not in err
    assert "could not keep" not in err, "the hold was not taken"

    poll(lambda: claims, timeout=WAIT, message="the other worker ran the handed-back job")
    assert claims == [(2, False)], "claimed while the first process could still run it"
    poll(lambda: _row(conn, job_id)[:2] == ("completed", 2), timeout=WAIT, message="completed")
    errors = conn.execute(
        "SELECT errors->0->>'error' FROM drover_jobs WHERE id = %s", (job_id,)
    ).fetchone()
    assert errors == ("drover: worker shut down before this attempt finished",)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_second_signal_during_the_drain_exits_at_once_and_quietly(
    signum: signal.Signals, db_url: str, conn: Conn, poll: Poll, started: list[Worker]
) -> None:
    # A budget no test waits out: only the second signal can end this drain.
    w = _start(started, db_url, "cli_app:make_client", "--shutdown-timeout", "3600")
    w.wait_for("worker pool started")
    job_id = _stuck_job_running(db_url, conn, poll)
    w.proc.send_signal(signum)
    w.wait_for("worker pool stopping")
    w.proc.send_signal(signum)
    assert w.proc.wait(WAIT) == 128 + signum, w.err
    err = w.err
    assert "Traceback" not in err
    assert f"drover: a second {signum.name} during the drain: exiting at once" in err
    # Left running, as after a kill: the rescuer returns it once its lease expires.
    assert _row(conn, job_id)[:2] == ("running", 1)


def test_under_processes_2_the_blocked_process_exits_after_the_hand_back_and_the_supervisor_1(
    db_url: str, conn: Conn, poll: Poll, started: list[Worker]
) -> None:
    s = _start(
        started,
        db_url,
        "cli_app:make_client",
        "--processes",
        "2",
        "--shutdown-timeout",
        "1",
    )
    s.wait_for("worker pool started", count=2)
    job_id = _stuck_job_running(db_url, conn, poll)
    children = s.children()
    assert len(children) == 2
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(WAIT) == 1, s.err
    err = s.err
    # The process with the stuck handler ended itself after the hand-back
    # (status 3), rather than being killed by the supervisor 10 s later.
    assert "ran out of its drain budget; the jobs it was running were handed back" in err
    assert "was killed" not in err
    assert "could not keep" not in err, "the hold was not taken"
    assert "Traceback" not in err
    assert not any(_alive(pid) for pid in children)
    state, attempt, _ = _row(conn, job_id)
    assert (state, attempt) == ("retryable", 1)


def test_a_second_signal_to_the_supervisor_ends_its_processes_and_itself_at_once(
    db_url: str, conn: Conn, poll: Poll, started: list[Worker]
) -> None:
    s = _start(
        started,
        db_url,
        "cli_app:make_client",
        "--processes",
        "2",
        "--shutdown-timeout",
        "3600",
    )
    s.wait_for("worker pool started", count=2)
    job_id = _stuck_job_running(db_url, conn, poll)
    children = s.children()
    assert len(children) == 2
    s.proc.send_signal(signal.SIGTERM)
    s.wait_for("stopping 2 worker processes")
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(WAIT) == 128 + signal.SIGTERM, s.err
    err = s.err
    assert "Traceback" not in err
    assert "drover: a second SIGTERM during the drain: the worker processes were told" in err
    assert not any(_alive(pid) for pid in children)
    assert _row(conn, job_id)[:2] == ("running", 1)


def test_a_recycled_process_whose_drain_runs_out_hands_back_ends_and_is_replaced_at_once(
    db_url: str, conn: Conn, poll: Poll, started: list[Worker]
) -> None:
    # 1 MB is below any Python process: the child drains for a fresh one at its
    # first memory check, with the stuck job running past the 0.5 s budget.
    s = _start(
        started,
        db_url,
        "cli_app:make_client",
        "--processes",
        "1",
        "--max-memory-per-child",
        "1",
        "--shutdown-timeout",
        "0.5",
    )
    s.wait_for("worker pool started")
    producer = drover.Client(db_url)
    try:
        job = producer.insert(Stuck())
    finally:
        producer.close()
    # Ended by itself after the hand-back (status 3), and replaced without the
    # back-off of a crash: five of those within a minute would end the supervisor.
    s.wait_for("ran out of its drain budget; its unfinished jobs were handed back; replacing it")
    assert "restarting it in" not in s.snapshot()
    poll(lambda: _row(conn, job.id)[1] >= 2, timeout=WAIT, message="claimed again by the next")
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(WAIT) in (0, 1), s.err
    assert "Traceback" not in s.err
