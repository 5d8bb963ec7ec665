"""Claims never run ahead of the outcomes written by more than the concurrency (ADR 0003).

A slot takes its next job as soon as its handler returns, while the last
outcome waits for the completer's next batch. When the database falls
behind on those writes, the fetcher must stop claiming: otherwise one
client holds thousands of finished-but-unrecorded jobs, and a crash runs
them all again (found by the soak, docs/reliability.md).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from jobdb import Conn, MakeClient, Poll

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
