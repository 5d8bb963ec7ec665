"""drover with an ``async def`` handler: system ``drover-async``.

The same client and settings as ``drover_queue`` (``Config(concurrency=c)``,
defaults otherwise), the handler an ``async def``: drover runs it as a task on
the client's event loop, all under the one ``concurrency`` (ADR 0033). Enqueue,
fill and latency are ``drover``'s; only the drain differs. A
``drain-cN-sleepXms`` job awaits ``asyncio.sleep``.
"""

from __future__ import annotations

import threading
import time

import drover
import peers
from peers import drover_queue as base
from peers import wait_for

REQUIRES = None
TABLES = base.TABLES
Noop = base.Noop
setup = base.setup
reset = base.reset
count = base.count
fill = base.fill
enqueue_bulk = base.enqueue_bulk
enqueue_single = base.enqueue_single
latency = base.latency


def drain(url: str, n: int, concurrency: int) -> float:
    finished = threading.Event()
    count = 0
    workers = drover.Workers()

    @workers.register
    async def noop(job: drover.Job[Noop]) -> None:
        nonlocal count
        await peers.awork()
        # One event loop runs every task: no lock needed for the count.
        count += 1
        if count == n:
            finished.set()

    client = drover.Client(url, drover.Config(workers=workers, concurrency=concurrency))
    base._warm_pool(client, 1)
    started = time.perf_counter()
    client.start()
    wait_for(finished, f"drover (async) draining {n} jobs", timeout=1800)
    client.stop()
    return time.perf_counter() - started
