"""The soak's arithmetic: samples, least-squares slopes, bounds and verdicts. Pure, no I/O.

A soak samples a handful of gauges every ``N/50`` finished jobs. A gauge that
leaks grows with the jobs run, so the test is the slope of the gauge against
the jobs finished, fitted by least squares over the samples after warm-up and
expressed per 100,000 jobs. A slope alone is not a leak on a short run:
extrapolating 20,000 jobs' noise to 100,000 multiplies it by five. So a
``SlopeBound`` fails only when both the slope is above its rate *and* the
growth it fits over the measured span is above a noise floor (ADR 0041).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "PER",
    "Latency",
    "Sample",
    "SlopeBound",
    "Verdict",
    "ceiling_verdict",
    "latency_verdict",
    "percentile",
    "slope",
    "slope_verdict",
    "table",
]

PER = 100_000
"""Slopes are given per this many finished jobs."""


@dataclass(frozen=True)
class Sample:
    """The gauges at one moment of the soak.

    ``rss_bytes`` and ``threads`` are the observed worker's (the one process
    the nemesis never kills, so its whole life is the soak); ``fleet_rss_bytes``
    sums every live worker; ``connections`` counts ``pg_stat_activity`` rows
    whose ``application_name`` starts with ``drover`` (every worker's pools);
    ``dead_tuples`` and ``table_bytes`` are the jobs table's
    ``n_dead_tup`` and ``pg_total_relation_size`` (heap, indexes, TOAST).
    A gauge the sampler could not read (the database was down) is None.
    """

    jobs_done: int
    t: float
    rss_bytes: int | None
    threads: int | None
    fleet_rss_bytes: int | None
    connections: int | None
    dead_tuples: int | None
    live_tuples: int | None
    table_bytes: int | None
    backlog: int | None

    def to_json(self) -> dict[str, Any]:
        """The sample as a JSON object (every field)."""
        return asdict(self)


def slope(points: Sequence[tuple[float, float]]) -> float | None:
    """The least-squares slope of ``y`` on ``x``; None for fewer than 3 points or no spread in x."""
    if len(points) < 3:
        return None
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in points)
    return sxy / sxx


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by nearest rank; ``nan`` for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class SlopeBound:
    """A gauge must not grow faster than ``per_100k`` per 100,000 jobs, beyond ``floor`` in all.

    ``unit`` scales the raw gauge for display (bytes to MiB, say) and both
    bounds are in that unit.
    """

    gauge: str
    label: str
    per_100k: float
    floor: float
    unit: float = 1.0
    unit_name: str = ""


@dataclass
class Verdict:
    """One checked bound: what was measured, the limit, and whether it held."""

    name: str
    measured: str
    bound: str
    ok: bool
    figures: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """``{"name", "measured", "bound", "ok", **figures}``."""
        return {
            "name": self.name,
            "measured": self.measured,
            "bound": self.bound,
            "ok": self.ok,
            **self.figures,
        }


def _series(samples: Sequence[Sample], gauge: str, unit: float) -> list[tuple[float, float]]:
    points = []
    for s in samples:
        value = getattr(s, gauge)
        if value is not None:
            points.append((float(s.jobs_done), float(value) / unit))
    return points


def slope_verdict(samples: Sequence[Sample], bound: SlopeBound) -> Verdict:
    """Fit ``bound.gauge`` against jobs done; fail if slope and fitted growth both exceed bounds.

    ``samples`` are the ones after warm-up. Too few readable samples is a
    failure too: a soak that could not measure a gauge proved nothing about it.
    """
    points = _series(samples, bound.gauge, bound.unit)
    fitted = slope(points)
    limit = f"<= {bound.per_100k:g} {bound.unit_name}/100k jobs (or <= {bound.floor:g} in all)"
    if fitted is None:
        return Verdict(bound.label, f"{len(points)} sample(s): no slope", limit, ok=False)
    per = fitted * PER
    span = points[-1][0] - points[0][0]
    growth = fitted * span
    ok = per <= bound.per_100k or growth <= bound.floor
    first, last = points[0][1], points[-1][1]
    return Verdict(
        bound.label,
        f"{per:+.3g} {bound.unit_name}/100k jobs ({first:.4g} -> {last:.4g}, fitted {growth:+.3g})",
        limit,
        ok,
        {
            "slope_per_100k": round(per, 4),
            "fitted_growth": round(growth, 4),
            "first": first,
            "last": last,
            "samples": len(points),
        },
    )


def ceiling_verdict(
    samples: Sequence[Sample],
    gauge: str,
    label: str,
    *,
    factor: float,
    floor: float,
    unit: float = 1.0,
    unit_name: str = "",
) -> Verdict:
    """A bounded gauge: its maximum over the second half of ``samples`` stays under a ceiling.

    The ceiling is ``factor`` x the first half's maximum + ``floor``: a gauge
    that plateaus (a table retention prunes, dead tuples autovacuum reclaims)
    passes; one that grows with the jobs run exceeds it. The slope is
    reported beside the verdict, for the record.
    """
    points = _series(samples, gauge, unit)
    limit = f"2nd-half max <= {factor:g} x 1st-half max + {floor:g} {unit_name}".rstrip()
    if len(points) < 4:
        return Verdict(label, f"{len(points)} sample(s): not enough", limit, ok=False)
    half = len(points) // 2
    early = max(y for _, y in points[:half])
    late = max(y for _, y in points[half:])
    ceiling = factor * early + floor
    fitted = slope(points)
    per = None if fitted is None else round(fitted * PER, 4)
    return Verdict(
        label,
        f"max {early:.4g} -> {late:.4g} {unit_name} (slope {per:+.3g}/100k jobs)"
        if per is not None
        else f"max {early:.4g} -> {late:.4g} {unit_name}",
        limit,
        late <= ceiling,
        {"first_half_max": early, "second_half_max": late, "ceiling": ceiling,
         "slope_per_100k": per, "samples": len(points)},
    )  # fmt: skip


@dataclass(frozen=True)
class Latency:
    """A probe's enqueue-to-start latencies (seconds, the database's clock): p50, p90, count."""

    p50: float
    p90: float
    count: int

    @classmethod
    def of(cls, latencies: Sequence[float]) -> Latency:
        """Summarise raw latencies."""
        return cls(percentile(latencies, 0.5), percentile(latencies, 0.9), len(latencies))


def latency_verdict(start: Latency, end: Latency, *, tolerance: float, floor: float) -> Verdict:
    """End p50 <= start p50 x (1 + ``tolerance``) + ``floor`` seconds."""
    ceiling = start.p50 * (1 + tolerance) + floor
    ok = end.count > 0 and start.count > 0 and end.p50 <= ceiling
    return Verdict(
        "claim latency (enqueue->start p50)",
        f"{start.p50 * 1000:.2f} ms -> {end.p50 * 1000:.2f} ms "
        f"(p90 {start.p90 * 1000:.2f} -> {end.p90 * 1000:.2f} ms)",
        f"end <= start x {1 + tolerance:g} + {floor * 1000:g} ms",
        ok,
        {"start": asdict(start), "end": asdict(end), "ceiling_s": ceiling},
    )


def table(verdicts: Sequence[Verdict]) -> str:
    """The verdicts as a plain-text table, one row each."""
    rows = [("check", "measured", "bound", "ok")]
    rows += [(v.name, v.measured, v.bound, "ok" if v.ok else "FAIL") for v in verdicts]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines)
