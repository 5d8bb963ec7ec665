"""weighted_order: every queue in every round, weight deciding only who is tried first."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from drover._kernel.fetcher import weighted_order

ROUNDS = 60_000


def test_every_round_is_a_full_permutation() -> None:
    queues = {"a": 7, "b": 2, "c": 1, "d": 100_000, "e": 1}
    rng = random.Random(1)
    for _ in range(5_000):
        order = weighted_order(queues, rng)
        assert len(order) == len(queues), order
        assert sorted(order) == sorted(queues), order


def test_a_single_queue_is_returned_as_is() -> None:
    rng = random.Random(2)
    for weight in (1, 5, 100_000):
        assert weighted_order({"only": weight}, rng) == ["only"]


def test_the_callers_mapping_is_left_untouched() -> None:
    queues = {"a": 7, "b": 2, "c": 1}
    for _ in range(100):
        weighted_order(queues, random.Random(3))
    assert queues == {"a": 7, "b": 2, "c": 1}
    assert list(queues) == ["a", "b", "c"]


def test_the_same_seed_gives_the_same_orders() -> None:
    queues = {"a": 7, "b": 2, "c": 1}
    first, second = random.Random(4), random.Random(4)
    assert [weighted_order(queues, first) for _ in range(200)] == [
        weighted_order(queues, second) for _ in range(200)
    ]


def test_first_position_frequency_matches_the_weight_share() -> None:
    queues = {"a": 7, "b": 2, "c": 1}
    total = sum(queues.values())
    rng = random.Random(20240531)
    firsts: Counter[str] = Counter()
    for _ in range(ROUNDS):
        firsts[weighted_order(queues, rng)[0]] += 1
    for name, weight in queues.items():
        share = firsts[name] / ROUNDS
        assert share == pytest.approx(weight / total, abs=0.02), (name, share, dict(firsts))


def test_second_position_follows_sampling_without_replacement() -> None:
    # P(x second) = sum over y != x of P(y first) * w_x / (total - w_y): the rest of the
    # order is weighted too, not uniform and not fixed.
    queues = {"a": 7, "b": 2, "c": 1}
    total = sum(queues.values())
    expected = {
        x: sum((wy / total) * (queues[x] / (total - wy)) for y, wy in queues.items() if y != x)
        for x in queues
    }
    rng = random.Random(77)
    seconds: Counter[str] = Counter()
    for _ in range(ROUNDS):
        seconds[weighted_order(queues, rng)[1]] += 1
    for name in queues:
        share = seconds[name] / ROUNDS
        assert share == pytest.approx(expected[name], abs=0.02), (name, share, expected)


@pytest.mark.parametrize(
    "queues",
    [{"heavy": 1000, "light": 1}, {"light": 1, "heavy": 1000}],
    ids=["heavy-first", "light-first"],
)
def test_a_one_to_a_thousand_queue_is_rarely_first_but_always_present(
    queues: dict[str, int],
) -> None:
    rounds = 100_000
    rng = random.Random(99)
    light_first = 0
    for _ in range(rounds):
        order = weighted_order(queues, rng)
        assert sorted(order) == ["heavy", "light"], order
        if order[0] == "light":
            light_first += 1
    # Expected rounds / 1001 ~ 100; the bounds are five standard deviations wide.
    expected = rounds / 1001
    assert expected - 50 <= light_first <= expected + 50, light_first
