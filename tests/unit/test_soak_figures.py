"""The soak's arithmetic: least-squares slopes, the slope and ceiling bounds, the latency bound."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from faults.soak.figures import (
    Latency,
    Sample,
    SlopeBound,
    ceiling_verdict,
    latency_verdict,
    percentile,
    slope,
    slope_verdict,
    table,
)

MiB = 1024 * 1024
RSS = SlopeBound("rss_bytes", "rss", per_100k=8.0, floor=8.0, unit=MiB, unit_name="MiB")


def _samples(
    values: Sequence[float | None], gauge: str = "rss_bytes", every: int = 20_000
) -> list[Sample]:
    out = []
    for n, value in enumerate(values):
        fields: dict[str, int | None] = dict.fromkeys(
            ("rss_bytes", "threads", "fleet_rss_bytes", "connections", "dead_tuples",
             "live_tuples", "table_bytes", "backlog"),
        )  # fmt: skip
        fields[gauge] = None if value is None else int(value)
        out.append(Sample(jobs_done=(n + 1) * every, t=float(n), **fields))
    return out


def test_slope_is_the_least_squares_fit() -> None:
    assert slope([(0, 1), (1, 3), (2, 5), (3, 7)]) == pytest.approx(2.0)
    # Noise around a flat line fits a slope near zero.
    assert slope([(0, 10), (1, 11), (2, 9), (3, 10), (4, 10)]) == pytest.approx(-0.1)


def test_slope_needs_three_points_with_spread() -> None:
    assert slope([(0, 1), (1, 2)]) is None
    assert slope([(5, 1), (5, 2), (5, 3)]) is None


def test_a_flat_gauge_passes() -> None:
    verdict = slope_verdict(_samples([50 * MiB] * 45), RSS)
    assert verdict.ok
    assert verdict.figures["slope_per_100k"] == 0


def test_a_steady_leak_over_a_long_run_fails() -> None:
    # 100 bytes a job: 9.5 MiB per 100,000 jobs, 86 MiB over 900,000 jobs.
    values = [50 * MiB + 100 * (n + 1) * 20_000 for n in range(45)]
    verdict = slope_verdict(_samples(values), RSS)
    assert not verdict.ok
    assert verdict.figures["slope_per_100k"] == pytest.approx(100 * 100_000 / MiB, abs=1e-3)


def test_a_short_runs_noise_is_forgiven_below_the_floor() -> None:
    # 20,000 jobs with a 2 MiB wobble: a steep slope per 100k, but 2 MiB in all.
    values = [50 * MiB + (2 * MiB if n > 20 else 0) for n in range(45)]
    verdict = slope_verdict(_samples(values, every=400), RSS)
    assert verdict.figures["slope_per_100k"] > RSS.per_100k
    assert verdict.ok


def test_an_unreadable_gauge_fails() -> None:
    verdict = slope_verdict(_samples([None, None, 5.0]), RSS)
    assert not verdict.ok
    assert "no slope" in verdict.measured


def test_a_plateau_is_bounded_and_a_ramp_is_not() -> None:
    plateau = [100.0 if n % 5 else 150.0 for n in range(40)]  # a vacuum sawtooth
    assert ceiling_verdict(_samples(plateau, "dead_tuples"), "dead_tuples", "dead",
                           factor=1.5, floor=0).ok  # fmt: skip
    ramp = [1000.0 * n for n in range(40)]
    found = ceiling_verdict(_samples(ramp, "dead_tuples"), "dead_tuples", "dead",
                            factor=1.5, floor=0)  # fmt: skip
    assert not found.ok
    assert found.figures["second_half_max"] == 39_000


def test_latency_within_tolerance_passes_and_beyond_fails() -> None:
    start = Latency.of([0.010] * 40)
    assert latency_verdict(start, Latency.of([0.0115] * 40), tolerance=0.2, floor=0).ok
    assert not latency_verdict(start, Latency.of([0.0125] * 40), tolerance=0.2, floor=0).ok
    assert not latency_verdict(start, Latency.of([]), tolerance=0.2, floor=0).ok


def test_percentile_by_nearest_rank() -> None:
    assert percentile([3.0, 1.0, 2.0, 4.0], 0.5) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0], 0.9) == 9.0
    assert math.isnan(percentile([], 0.5))


def test_the_table_marks_failures() -> None:
    good = slope_verdict(_samples([50 * MiB] * 10), RSS)
    bad = slope_verdict(_samples([None] * 10), RSS)
    text = table([good, bad])
    lines = text.splitlines()
    assert lines[0].split()[0] == "check"
    assert lines[2].endswith("ok")
    assert lines[3].endswith("FAIL")
