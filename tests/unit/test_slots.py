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
