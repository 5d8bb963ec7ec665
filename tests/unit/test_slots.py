"""``Slots``: the pool's idle capacity, and the claim budget of a recycled process."""

from __future__ import annotations

import threading

from drover._kernel.claims import Slots


def test_take_all_takes_every_idle_slot_and_finished_jobs_return_them() -> None:
    slots = Slots(4)
    never = threading.Event()
    assert slots.take_all(never, timeout=0) == 4
    assert slots.take_all(never, timeout=0) == 0
    slots.free(3)
    assert slots.take_all(never, timeout=0) == 3


def test_a_budget_caps_the_slots_ever_taken() -> None:
    slots = Slots(4, budget=6)
    never = threading.Event()
    assert slots.take_all(never, timeout=0) == 4
    slots.free(4)  # four jobs ran: the budget does not come back
    assert slots.take_all(never, timeout=0) == 2
    slots.free(2)
    assert slots.take_all(never, timeout=0) == 0


def test_slots_given_back_unused_return_to_the_budget() -> None:
    slots = Slots(4, budget=5)
    never = threading.Event()
    assert slots.take_all(never, timeout=0) == 4
    slots.free(3, unused=True)  # the claim found only one job
    assert slots.take_all(never, timeout=0) == 3
    slots.free(4)
    # 1 + 3 ran; one of the five is left.
    assert slots.take_all(never, timeout=0) == 1


def test_a_spent_budget_still_notices_stop() -> None:
    slots = Slots(2, budget=0)
    stopping = threading.Event()
    stopping.set()
    assert slots.take_all(stopping) == 0


# --- prefetch (ADR 0058) -----------------------------------------------------------------------


def test_prefetch_slots_open_after_short_jobs_and_close_at_a_long_one() -> None:
    slots = Slots(4, prefetch=4)
    never = threading.Event()
    assert slots.take_all(never, timeout=0) == 4
    assert slots.extra == 0  # nothing known yet: no job waits for a thread
    slots.free(ran=0.0005)
    assert slots.extra == 4
    # One slot freed by the short job, and the four prefetch slots.
    assert slots.take_all(never, timeout=0) == 5
    # Eight claims unfinished now; a long job closes the prefetch slots.
    slots.free(ran=2.0)
    assert slots.extra == 0
    # 8 unfinished on 4 slots, one of them ended: none idle until four more end.
    assert slots.take_all(never, timeout=0) == 0
    for _ in range(4):
        slots.free(ran=0.0001)  # short, but the long one still weighs
    assert slots.extra == 0
    assert slots.take_all(never, timeout=0) == 1


def test_prefetch_stays_shut_until_the_long_job_has_decayed() -> None:
    slots = Slots(2, prefetch=2)
    never = threading.Event()
    slots.take_all(never, timeout=0)
    slots.free(ran=1.0)
    short = 0
    while slots.extra == 0:
        slots.take_all(never, timeout=0)
        slots.free(ran=0.0001)
        short += 1
        assert short < 1000
    # 1 s decays below 5 ms by 0.95 a job in about a hundred jobs.
    assert 90 <= short <= 110


def test_without_prefetch_no_job_ever_waits_for_a_thread() -> None:
    slots = Slots(3)
    never = threading.Event()
    assert slots.take_all(never, timeout=0) == 3
    for _ in range(3):
        slots.free(ran=0.0001)
    assert slots.extra == 0
    assert slots.take_all(never, timeout=0) == 3
