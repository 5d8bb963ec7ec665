"""graphile-worker with its documented batching settings: system ``graphile-batched``.

The ``graphile`` adapter (``graphile_queue``), with the drain's and the latency
runner's worker given ``localQueue: {size: concurrency + 1}``,
``completeJobBatchDelay: 0`` and ``failJobBatchDelay: 0``, the settings of
worker.graphile.org/docs/performance (its 0.16 release notes recommend a local
queue of ``concurrency + 1``). Enqueueing does not batch differently, so bulk
and single enqueue are the ``graphile`` system's.
"""

from __future__ import annotations

from peers import graphile_queue as base

REQUIRES = base.REQUIRES
TABLES = base.TABLES
setup = base.setup
reset = base.reset
count = base.count
fill = base.fill
enqueue_bulk = base.enqueue_bulk
enqueue_single = base.enqueue_single
version = base.version


def drain(url: str, n: int, concurrency: int) -> dict[str, float]:
    return base.drain(url, n, concurrency, batched=True)


def latency(url: str, n: int, rate: float) -> list[float]:
    return base.latency(url, n, rate, batched=True)
