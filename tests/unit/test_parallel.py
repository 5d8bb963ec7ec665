"""The suite's own parallel run: workers sized to the machine, longest tests first (parallel.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import parallel
import pytest

GIB = 1024**3


@pytest.mark.parametrize(
    ("cpus", "memory", "workers"),
    [
        (2, 20 * GIB, 4),  # the 2-core machine: two workers a CPU
        (1, None, 2),
        (4, 64 * GIB, 8),
        (64, 256 * GIB, 16),  # capped: each worker runs a server and collects the suite
        (8, 3 * GIB, 3),  # one worker a GiB of available memory
        (2, 0, 2),  # never fewer than two
    ],
)
def test_workers_follow_the_cpus_and_the_memory(
    cpus: int, memory: int | None, workers: int
) -> None:
    assert parallel.workers_for(cpus, memory) == workers


class _Marker:
    pass


class _Item:
    def __init__(self, nodeid: str, *, slow: bool = False) -> None:
        self.nodeid = nodeid
        self.slow = slow

    def get_closest_marker(self, name: str) -> _Marker | None:
        return _Marker() if name == "slow" and self.slow else None


class _Cache:
    def __init__(self, stored: object) -> None:
        self.stored = stored

    def get(self, key: str, default: object) -> object:
        assert key == parallel.DURATIONS_KEY
        return self.stored


class _Config:
    def __init__(self, stored: object, *, worker: bool) -> None:
        self.cache = _Cache(stored)
        if worker:
            self.workerinput = {"workerid": "gw0"}


def _order(stored: object, items: list[_Item], *, worker: bool = True) -> list[str]:
    config = cast(pytest.Config, _Config(stored, worker=worker))
    collected = cast(list[pytest.Item], list(items))
    parallel.pytest_collection_modifyitems(cast(pytest.Session, None), config, collected)
    return [item.nodeid for item in collected]


def test_workers_take_the_longest_tests_first_and_guess_the_untimed_ones() -> None:
    items = [
        _Item("a"),  # untimed: GUESS (1 s)
        _Item("b"),  # 0.2 s last time
        _Item("c", slow=True),  # untimed and marked slow: GUESS_SLOW (30 s)
        _Item("d"),  # 40 s last time
        _Item("e"),  # 1 s last time: ties with "a", keeps its place after it
        _Item("f", slow=True),  # 3 s last time: the measurement wins over the marker
    ]
    stored: dict[str, Any] = {"b": 0.2, "d": 40.0, "e": 1.0, "f": 3.0, "gone": 99.0}
    assert _order(stored, items) == ["d", "c", "f", "a", "e", "b"]


def test_a_serial_run_and_a_broken_cache_keep_or_guess_the_order() -> None:
    items = [_Item("a"), _Item("b", slow=True), _Item("c")]
    assert _order({"c": 50.0}, items, worker=False) == ["a", "b", "c"]
    assert _order("not a dict", items) == ["b", "a", "c"]


def test_timing_sensitive_files_share_a_unit_and_every_other_test_is_its_own() -> None:
    soak = "tests/faults/test_soak.py::test_a_small_soak_holds_its_bounds"
    races = "tests/faults/test_limit_races.py::test_x[1]"
    suite = "tests/faults/test_fault_suite.py::test_y"
    assert parallel.unit_of(soak) == parallel.unit_of(races) != parallel.unit_of(suite)
    other = "tests/db/test_fence.py::test_claim_limit_caps_the_batch"
    assert parallel.unit_of(other) == other
    for path in parallel.TIMING_GROUPS:
        assert (Path(__file__).parents[2] / path).is_file(), path
