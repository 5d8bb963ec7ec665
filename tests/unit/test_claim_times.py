"""A claimer's claim times (ADR 0060): the histogram's quantiles, windows and sums."""

from __future__ import annotations

import threading

import pytest

from drover._db.clients import ClaimWindow
from drover._db.floors import Backdated, ClaimCursors, ClaimTimes

BUCKET = 2 ** (1 / 4)
"""How far above the true quantile a bucket's top may be."""


def _times(seconds: list[float], walks: frozenset[int] = frozenset()) -> ClaimTimes:
    times = ClaimTimes()
    for i, s in enumerate(seconds):
        times.add(s, walk=i in walks)
    return times


def test_an_empty_window_has_no_quantile() -> None:
    times = ClaimTimes()
    assert (times.claims, times.quantile(0.5), times.quantile(0.99)) == (0, None, None)
    assert ClaimWindow.of(times) == ClaimWindow(claims=0)


@pytest.mark.parametrize("spread", [1e-5, 1e-3, 0.05, 2.0, 5_000.0])
def test_p50_and_p99_are_at_most_one_bucket_high_and_never_above_the_max(spread: float) -> None:
    seconds = [spread * i / 1000 for i in range(1, 1001)]
    times = _times(seconds)
    for q, true in ((0.5, seconds[499]), (0.99, seconds[989])):
        found = times.quantile(q)
        assert found is not None
        assert true <= found <= max(true * BUCKET, 1e-4) or found == times.max_seconds
        assert found <= times.max_seconds == seconds[-1]


def test_one_slow_claim_in_a_hundred_sets_the_p99_not_the_p50() -> None:
    times = _times([0.002] * 98 + [0.9, 0.9])
    assert times.quantile(0.5) == pytest.approx(0.002, rel=0.2)
    assert times.quantile(0.99) == pytest.approx(0.9)
    assert times.quantile(0.98) == pytest.approx(0.002, rel=0.2)


def test_walks_keep_their_own_count_and_max() -> None:
    times = _times([0.001, 0.4, 0.002, 0.3], walks=frozenset({1, 3}))
    assert (times.claims, times.walks, times.walk_max_seconds) == (4, 2, 0.4)
    window = ClaimWindow.of(times)
    assert (window.claims, window.walk_max_seconds, window.claim_max_seconds) == (4, 0.4, 0.4)
    assert ClaimWindow.of(_times([0.001])).walk_max_seconds is None


def test_take_returns_the_window_and_starts_a_new_one() -> None:
    times = _times([0.01, 0.02])
    taken = times.take()
    assert (taken.claims, taken.max_seconds) == (2, 0.02)
    assert (times.claims, times.max_seconds, sum(times.buckets)) == (0, 0.0, 0)
    times.add(0.5, walk=True)
    merged = times.take()
    merged.merge(taken)
    assert (merged.claims, merged.walks, merged.max_seconds) == (3, 1, 0.5)


def test_a_store_sums_its_claim_sessions_and_loses_no_claim_to_a_concurrent_take() -> None:
    backdated = Backdated()
    cursors = [ClaimCursors(backdated) for _ in range(2)]
    per_thread = 20_000

    def claim(c: ClaimCursors) -> None:
        for i in range(per_thread):
            c.claimed("q", [], None if i % 100 == 0 else [], 1.0, 1.001)

    threads = [threading.Thread(target=claim, args=(c,)) for c in cursors]
    for t in threads:
        t.start()
    seen = 0
    while any(t.is_alive() for t in threads):
        seen += backdated.times().claims
    for t in threads:
        t.join()
    last = backdated.times()
    assert seen + last.claims == 2 * per_thread
    assert backdated.times().claims == 0
