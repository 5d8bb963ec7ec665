"""Claims never run ahead of the outcomes written by more than the concurrency (ADR 0003).

A slot takes its next job as soon as its handler returns, while the last
outcome waits for the completer's next batch. When the database falls
behind on those writes, the fetcher must stop claiming: otherwise one
client holds thousands of finished-but-unrecorded jobs, and a crash runs
them all again (found by the soak, docs/reliability.md).

So a crash re-runs at most 2 x concurrency jobs (running, or finished with the
outcome unwritten), not ``concurrency``: the second test shows it on a real
worker process, killed while the database holds its outcome writes back.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
from jobdb import Conn, MakeClient, Poll, observe
from psycopg import sql

import drover
from drover._kernel.completer import Completer

SAFETY = 20.0


class Tick(drover.JobArgs, kind="backlog_tick"):
    n: int = 0


def _running(conn: Conn) -> int:
    row = conn.execute("SELECT count(*) FROM drover_jobs WHERE state = 'running'").fetchone()
    assert row is not None
    return int(row[0])


def test_claims_stop_at_twice_the_concurrency_while_outcomes_are_unwritten(
    make_client: MakeClient, conn: Conn, poll: Poll, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()
    original = Completer._write

    def slow_write(self: Completer, batch: list[Any]) -> None:
        # The database is slow to take outcomes: nothing is written until the gate opens.
        gate.wait(SAFETY)
        original(self, batch)

    monkeypatch.setattr(Completer, "_write", slow_write)
    # The completer's own writes: no completion rides with a claim (ADR 0058),
    # which would slow the claims with them.
    monkeypatch.setattr(Completer, "ride", lambda self, on: None)
    workers = drover.Workers()

    @workers.register
    def tick(job: drover.Job[Tick]) -> None:
        pass

    client = make_client(workers=workers, concurrency=4, poll_interval=0.05)
    client.insert_many([Tick(n=i) for i in range(200)])
    with client:
        fetcher = client._engine.fetcher  # type: ignore[union-attr]
        poll(lambda: fetcher.held_back >= 1, message="the fetcher never held back")
        # Running in the database = claimed and not recorded: 4 running + 4 unwritten at most.
        assert _running(conn) <= 8
        assert client._engine.inflight.unwritten() >= 4  # type: ignore[union-attr]
        gate.set()
        poll(
            lambda: (
                conn.execute(
                    "SELECT count(*) FROM drover_jobs WHERE state = 'completed'"
                ).fetchone()
                == (200,)
            ),
            timeout=30,
            message="the queue did not drain once outcomes were written again",
        )
    assert _running(conn) == 0


# --- a real worker process, killed while the database holds its outcomes back ------------

BACKLOG_WORKER = Path(__file__).with_name("backlog_worker.py")

HOLD_KEY = 4040
"""The advisory lock the test holds to keep the worker's outcome writes waiting."""

HOLD_OUTCOMES = sql.SQL(
    """
    CREATE FUNCTION test_hold_outcomes() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_advisory_xact_lock_shared({key});
        RETURN NEW;
    END $$;
    CREATE TRIGGER test_hold_outcomes BEFORE UPDATE ON drover_jobs FOR EACH ROW
        WHEN (OLD.state = 'running' AND NEW.state <> 'running')
        EXECUTE FUNCTION test_hold_outcomes();
    """
).format(key=sql.Literal(HOLD_KEY))


class Instant(drover.JobArgs, kind="backlog_instant"):
    """Must match ``Instant`` in ``backlog_worker.py``."""

    n: int = 0


def _count(conn: Conn, where: str) -> int:
    row = conn.execute(
        sql.SQL("SELECT count(*) FROM drover_jobs WHERE {}").format(sql.SQL(where))
    ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.slow
def test_a_killed_worker_re_runs_at_most_twice_its_concurrency(
    db_url: str, conn: Conn, make_client: MakeClient, poll: Poll, tmp_path: Path
) -> None:
    """The bound docs/reliability.md states, end to end: at concurrency c a worker holds at
    most 2c claims (running, or finished with the outcome unwritten), so a SIGKILL
    re-runs at most 2c jobs. With the writes held back it holds at least its c slots'
    worth; it reached 2c before completions rode with the claims (ADR 0058): a claim
    carrying held-back completions now waits with them.

    The worker is a real process that knows nothing of the test: its handlers return at
    once, and the database makes every outcome write wait (a trigger that waits on an
    advisory lock the test holds), as a database that fell behind would.
    """
    c = 4
    jobs = 200
    conn.execute(HOLD_OUTCOMES)
    producer = make_client()
    producer.insert_many([Instant(n=i) for i in range(jobs)])
    producer.close()
    stderr = tmp_path / "backlog_worker.stderr"
    with psycopg.connect(db_url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", [HOLD_KEY])
        with stderr.open("w") as err:
            proc = subprocess.Popen(
                [sys.executable, str(BACKLOG_WORKER), db_url, str(c)],
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        try:

            def claims_held() -> int:
                assert proc.poll() is None, f"the worker exited: {stderr.read_text()}"
                # Until its outcome is written a claimed job is `running` in the
                # database, whether its handler still runs or has returned.
                return _count(conn, "state = 'running'")

            poll(
                lambda: claims_held() >= c,
                timeout=60,
                message="the worker never held concurrency claims",
            )
            peak = 0

            def within_bound() -> None:
                nonlocal peak
                held = claims_held()
                peak = max(peak, held)
                assert held <= 2 * c, f"{held} claims held at concurrency {c}"

            # Unbounded, the fetcher would claim every job within a few poll intervals (0.05 s).
            observe(2.0, within_bound)
            assert c <= peak <= 2 * c
        finally:
            proc.kill()
            proc.wait(SAFETY)
        # The dead worker's connections go with it: its blocked outcome write must not
        # commit once the lock is released (the server notices a dead client only when
        # it next talks to it).
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND backend_type = 'client backend'"
            " AND pid <> ALL(%s)",
            [[conn.info.backend_pid, holder.info.backend_pid]],
        )
        poll(
            lambda: (
                conn.execute(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND backend_type = 'client backend'"
                    " AND pid <> ALL(%s)",
                    [[conn.info.backend_pid, holder.info.backend_pid]],
                ).fetchone()
                == (0,)
            ),
            timeout=SAFETY,
            message="the dead worker's sessions did not end",
        )
        holder.execute("SELECT pg_advisory_unlock(%s)", [HOLD_KEY])
    conn.execute("DROP TRIGGER test_hold_outcomes ON drover_jobs")
    stranded = _count(conn, "state = 'running'")
    assert c <= stranded <= 2 * c
    # Stand-in for waiting out the 300 s lease: the rows' leases are over now.
    conn.execute("UPDATE drover_jobs SET leased_until = now() WHERE state = 'running'")
    workers = drover.Workers()

    @workers.register
    def instant(job: drover.Job[Instant]) -> None:
        pass

    rescuer = make_client(workers=workers, concurrency=c, poll_interval=0.05, rescue_interval=0.2)
    with rescuer:
        poll(
            lambda: _count(conn, "state = 'completed'") == jobs,
            timeout=60,
            message="the queue did not drain after the kill",
        )
    # What the kill re-ran: the stranded claims, rescued and run a second time.
    re_run = _count(conn, "attempt > 1")
    assert re_run == stranded <= 2 * c
