"""When sweeps and depth counts read in full, and where the floored ones begin (ADR 0059)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from drover._db import sweeps
from drover._db.sweeps import DepthFloors, Sweep, SweepFloors

AT = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
MARGIN = timedelta(seconds=1)


def _sweep(floors: SweepFloors, now: float, at: datetime, found: int = 0) -> Sweep:
    sweep = Sweep(floors.next_floor(now))
    sweep.ran(at, found, 100)
    floors.swept(sweep, now)
    return sweep


def test_the_first_sweep_is_full_and_the_next_start_at_its_time_less_the_margin() -> None:
    floors = SweepFloors()
    assert _sweep(floors, 0.0, AT).floor is None
    assert floors.next_floor(1.0) == AT - MARGIN
    assert _sweep(floors, 1.0, AT + timedelta(seconds=1)).floor == AT - MARGIN
    assert floors.next_floor(2.0) == AT


def test_a_full_sweep_follows_ten_floored_ones() -> None:
    floors = SweepFloors()
    kinds = [_sweep(floors, float(i), AT + timedelta(seconds=i)).floor is None for i in range(23)]
    assert kinds == [True, *[False] * 10, True, *[False] * 10, True]


def test_a_full_sweep_follows_a_minute_after_the_last() -> None:
    floors = SweepFloors()
    _sweep(floors, 0.0, AT)
    assert floors.next_floor(59.9) is not None
    assert floors.next_floor(60.0) is None
    _sweep(floors, 60.0, AT + timedelta(seconds=60))
    assert floors.next_floor(61.0) == AT + timedelta(seconds=59)


def test_a_sweep_that_reached_its_limit_leaves_the_floor() -> None:
    floors = SweepFloors()
    # A full one: the next is full again.
    _sweep(floors, 0.0, AT, found=100)
    assert floors.next_floor(1.0) is None
    _sweep(floors, 1.0, AT, found=3)
    # A floored one: the next starts at the same floor.
    _sweep(floors, 2.0, AT + timedelta(seconds=2), found=100)
    assert floors.next_floor(3.0) == AT - MARGIN


def test_a_sweep_that_failed_or_never_ran_makes_the_next_full() -> None:
    floors = SweepFloors()
    _sweep(floors, time.monotonic(), AT)  # the context reads the clock

    def failing() -> None:
        with floors.sweep() as sweep:
            assert sweep.floor == AT - MARGIN
            sweep.ran(AT + timedelta(seconds=1), 0, 100)
            raise RuntimeError("the commit failed")

    with pytest.raises(RuntimeError):
        failing()
    assert floors.floor is None
    _sweep(floors, 1.0, AT)
    floors.swept(Sweep(AT - MARGIN), 2.0)  # never told it ran
    assert floors.next_floor(3.0) is None


def test_the_context_notes_a_sweep_that_ran() -> None:
    floors = SweepFloors()
    with floors.sweep() as sweep:
        assert sweep.floor is None
        sweep.ran(AT, 2, 100)
    assert floors.floor == AT - MARGIN


# --- depth ------------------------------------------------------------------------------------


def test_depth_counts_full_first_then_each_known_level_from_its_floor() -> None:
    depth = DepthFloors()
    first = depth.params(0.0)
    assert first["full"] is True
    early = AT - timedelta(hours=1)
    later = AT + timedelta(days=1)
    depth.counted(first, AT, [("a", 0, early), ("a", 5, later)], AT + timedelta(seconds=30), 0.0)
    params = depth.params(1.0)
    assert params == {
        "full": False,
        "queues": ["a", "a"],
        "priorities": [0, 5],
        # A level's earliest due job, or the count's time less the margin if earlier.
        "floors": [early, AT - MARGIN],
        "running_floor": AT - MARGIN,
    }
    # A level's rows (one per waiting state) set its floor together: the earliest of them.
    rows = [("a", 0, later), ("a", 0, early), ("a", 0, AT + timedelta(hours=1))]
    depth.counted(params, AT, rows, None, 1.0)
    assert depth.params(1.5)["floors"][0] == early
    # A level found empty keeps a floor: the count's time less the margin.
    depth.counted(params, AT + timedelta(seconds=15), [("a", 5, later)], None, 1.0)
    assert depth.params(2.0)["floors"] == [AT + timedelta(seconds=14)] * 2


def test_depth_counts_in_full_every_ten_counts_a_minute_and_after_a_failure() -> None:
    depth = DepthFloors()
    fulls = []
    for i in range(12):
        params = depth.params(float(i))
        fulls.append(params["full"])
        depth.counted(params, AT, [], None, float(i))
    assert fulls == [True, *[False] * 10, True]
    assert depth.params(11.0 + sweeps._FULL_AFTER)["full"] is True
    depth.forget()
    assert depth.params(12.0)["full"] is True
