"""Prefetch slots (ADR 0058) against a real database: claims run ahead, handlers do not.

While recent jobs are short, a worker claims up to ``concurrency`` jobs more than
it has free threads or tasks, so work waits in hand while the next claim is on
its way. What must not change: at most ``concurrency`` handlers run at once, on
pool threads or on the event loop; with sync and async kinds both registered
there is no prefetch (each side caps only itself); and every job runs.
"""

from __future__ import annotations

import asyncio
import threading

import pytest
from jobdb import Conn, MakeClient, Poll

import drover
from drover._kernel import claims

JOBS = 300


class Quick(drover.JobArgs, kind="prefetch_quick"):
    n: int = 0


class Other(drover.JobArgs, kind="prefetch_other"):
    n: int = 0


class _Peak:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inside = 0
        self.peak = 0
        self.done = 0
        self.held_peak = 0

    def enter(self) -> None:
        with self.lock:
            self.inside += 1
            self.peak = max(self.peak, self.inside)

    def leave(self) -> None:
        with self.lock:
            self.inside -= 1
            self.done += 1


def _sample_held(clients: list[drover.Client], peak: _Peak) -> None:
    """Note how many claims the client holds (running, waiting, unwritten) right now."""
    engine = clients[0]._engine if clients else None
    if engine is None:
        return
    held = len(engine.inflight.held())
    with peak.lock:
        peak.held_peak = max(peak.held_peak, held)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_prefetched_claims_wait_and_never_run_beyond_the_concurrency(
    make_client: MakeClient, conn: Conn, poll: Poll, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every job counts as short, however slowly a loaded machine runs the 1 ms
    # wait: the prefetch slots stay open (their threshold is tested in test_slots).
    monkeypatch.setattr(claims, "_SHORT", 60.0)
    peak = _Peak()
    clients: list[drover.Client] = []
    workers = drover.Workers()
    if kind == "sync":

        @workers.register
        def quick(job: drover.Job[Quick]) -> None:
            _sample_held(clients, peak)
            peak.enter()
            # Short (the prefetch stays open) but long enough to overlap.
            threading.Event().wait(0.001)
            peak.leave()

    else:

        @workers.register
        async def quick_async(job: drover.Job[Quick]) -> None:
            _sample_held(clients, peak)
            peak.enter()
            await asyncio.sleep(0.001)
            peak.leave()

    client = make_client(workers=workers, concurrency=3, poll_interval=0.05)
    clients.append(client)
    client.insert_many([Quick(n=i) for i in range(JOBS)])
    with client:
        engine = client._engine
        assert engine is not None
        poll(lambda: peak.done == JOBS, timeout=60, message="the jobs did not all run")
        assert engine.slots.extra == 3  # the prefetch slots opened
    assert peak.peak <= 3, f"{peak.peak} handlers ran at once at concurrency 3"
    # Claims did run ahead of the handlers (sampled as each job starts): more held
    # than may run at once, never more than twice the concurrency.
    assert 3 < peak.held_peak <= 6, peak.held_peak
    completed = conn.execute(
        "SELECT count(*) FROM drover_jobs WHERE state = 'completed' AND attempt = 1"
    ).fetchone()
    assert completed == (JOBS,)


def test_with_sync_and_async_kinds_both_registered_nothing_is_prefetched(
    make_client: MakeClient, poll: Poll
) -> None:
    ran = threading.Semaphore(0)
    workers = drover.Workers()

    @workers.register
    def quick(job: drover.Job[Quick]) -> None:
        ran.release()

    @workers.register
    async def other(job: drover.Job[Other]) -> None:
        ran.release()

    client = make_client(workers=workers, concurrency=2, poll_interval=0.05)
    client.insert_many([Quick(n=i) for i in range(50)])
    with client:
        for _ in range(50):
            assert ran.acquire(timeout=30)
        engine = client._engine
        assert engine is not None
        assert engine.slots.extra == 0
