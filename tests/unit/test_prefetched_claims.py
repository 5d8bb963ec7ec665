"""A prefetched claim (ADR 0058) lost while it waited for a pool thread is never started."""

from __future__ import annotations

import logging
import threading
from typing import Any

from drover._kernel.claims import Claim, InFlight, Slots
from drover._kernel.disposition import Decision
from drover._kernel.executor import Executor
from drover._kernel.memory import MemoryStore
from drover._records import JobInsertParams


class _NoRetry:
    def next_retry(self, row: Any) -> Any:
        raise AssertionError("nothing fails here")


def _claims(n: int) -> list[Claim]:
    store = MemoryStore()
    for _ in range(n):
        store.insert(JobInsertParams("noop", "default", "{}", 5, None, None, 0))
    rows = store.claim_session().claim("default", n, 60, "w").rows
    return [Claim(row, None) for row in rows]


def test_a_claim_lost_before_a_thread_took_it_is_settled_unrun_and_its_slot_freed() -> None:
    ran: list[int] = []
    settled: list[tuple[int, Decision]] = []
    inflight, slots = InFlight(), Slots(2)
    executor = Executor(
        chain=lambda ctx, row: ran.append(row.id),
        retry_policy=_NoRetry(),
        slots=slots,
        inflight=inflight,
        settle=lambda claim, decision: settled.append((claim.row.id, decision)),
        logger=logging.getLogger("test"),
    )
    kept, lost = _claims(2)
    inflight.add_many([kept, lost])
    never = threading.Event()
    assert slots.take_all(never, timeout=0) == 2
    lost.lease._lose("handed back at shutdown")

    executor.run(lost)
    executor.run(kept)

    assert ran == [kept.row.id]
    assert [(job_id, d.outcome is None) for job_id, d in settled] == [
        (lost.row.id, True),  # nothing to write: the hand-back wrote it
        (kept.row.id, False),
    ]
    assert lost.finished
    assert slots.take_all(never, timeout=0) == 2
