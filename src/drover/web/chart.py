"""The charts, drawn on the server as inline SVG (no JavaScript, no image requests): the
overview's throughput, and the health page's dead tuples and claim times over time."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from markupsafe import Markup

from drover.health import HealthSample
from drover.inspector import Throughput

__all__ = ["CLAIM_SERIES", "SERIES", "TUPLE_SERIES", "samples_svg", "throughput_svg"]

SERIES = (("completed", "#2e7d32"), ("failed", "#ef6c00"), ("dead", "#c62828"))
_WIDTH, _HEIGHT = 720, 220
_LEFT, _RIGHT, _TOP, _BOTTOM = 44, 28, 14, 40


def _nice_max(value: int) -> int:
    # The smallest 4 * {1, 2, 5} * 10^k at or above the value: four round grid steps.
    for scale in (1, 10, 100, 1000, 10_000, 100_000, 1_000_000):
        for step in (1, 2, 5):
            if value <= step * scale * 4:
                return step * scale * 4
    return value


def throughput_svg(points: Sequence[Throughput]) -> Markup:
    """Three lines (completed, failed, dead per minute) over the given minutes, UTC labels.

    Everything drawn is numbers and fixed words: no job data reaches the SVG.
    """
    plot_w = _WIDTH - _LEFT - _RIGHT
    plot_h = _HEIGHT - _TOP - _BOTTOM
    top = _nice_max(max((max(p.completed, p.failed, p.dead) for p in points), default=0))
    count = max(len(points) - 1, 1)

    def x(i: int) -> float:
        return _LEFT + plot_w * i / count

    def y(v: int) -> float:
        return _TOP + plot_h * (1 - v / top)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" '
        f'viewBox="0 0 {_WIDTH} {_HEIGHT}" width="{_WIDTH}" height="{_HEIGHT}" '
        'aria-labelledby="chart-title">',
        '<title id="chart-title">Jobs completed, failed attempts and dead jobs per minute</title>',
    ]
    for k in range(5):  # horizontal grid and the y scale
        value = top * k // 4
        gy = y(value)
        parts.append(
            f'<line x1="{_LEFT}" y1="{gy:.1f}" x2="{_WIDTH - _RIGHT}" y2="{gy:.1f}" '
            'stroke="#ddd" stroke-width="1"/>'
            f'<text x="{_LEFT - 6}" y="{gy + 4:.1f}" text-anchor="end" font-size="11">'
            f"{value}</text>"
        )
    for i, point in enumerate(points):  # a time label every ten minutes
        minute = point.minute.astimezone(UTC)
        if minute.minute % 10 == 0:
            parts.append(
                f'<text x="{x(i):.1f}" y="{_HEIGHT - _BOTTOM + 16}" text-anchor="middle" '
                f'font-size="11">{minute:%H:%M}</text>'
            )
    for name, colour in SERIES:
        coords = " ".join(f"{x(i):.1f},{y(getattr(p, name)):.1f}" for i, p in enumerate(points))
        total = sum(getattr(p, name) for p in points)
        parts.append(
            f'<polyline class="series-{name}" fill="none" stroke="{colour}" stroke-width="2" '
            f'points="{coords}"><title>{name}: {total} in the last {len(points)} min</title>'
            "</polyline>"
        )
    for n, (name, colour) in enumerate(SERIES):
        lx = _LEFT + n * 130
        total = sum(getattr(p, name) for p in points)
        parts.append(
            f'<rect x="{lx}" y="{_HEIGHT - 16}" width="10" height="10" fill="{colour}"/>'
            f'<text x="{lx + 14}" y="{_HEIGHT - 7}" font-size="12">{name} ({total})</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 - numbers and fixed words only


TUPLE_SERIES = (
    ("dead_tuples", "dead tuples", "#c62828"),
    ("live_tuples", "live tuples", "#1565c0"),
)
"""The health page's table chart: ``HealthSample`` field, label, colour."""
CLAIM_SERIES = (
    ("claim_p50_seconds", "claim p50", "#2e7d32"),
    ("claim_p99_seconds", "claim p99", "#ef6c00"),
    ("walk_max_seconds", "slowest walk", "#6a1b9a"),
)
"""The health page's claim chart (milliseconds): ``HealthSample`` field, label, colour."""
_MIN_SPAN = timedelta(minutes=10)


def _nice_top(value: float) -> float:
    # The smallest 4 * {1, 2, 5} * 10^k at or above the value, for any scale.
    scale = 0.001
    while True:
        for step in (1, 2, 5):
            if value <= step * scale * 4:
                return step * scale * 4
        scale *= 10


def _number(value: float) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:g}M"
    if value >= 1_000:
        return f"{value / 1_000:g}k"
    return f"{value:g}"


def samples_svg(
    samples: Sequence[HealthSample],
    series: Sequence[tuple[str, str, str]],
    *,
    chart_id: str,
    title: str,
    scale: float = 1.0,
) -> Markup:
    """Lines of ``series`` (``HealthSample`` field, label, colour) over the samples' minutes,
    each value times ``scale``; a missing value or minute breaks the line. UTC labels.

    The x axis runs from the first sample to the last (ten minutes at
    least). Everything drawn is numbers and fixed words.
    """
    plot_w = _WIDTH - _LEFT - _RIGHT
    plot_h = _HEIGHT - _TOP - _BOTTOM
    end = samples[-1].sampled_at if samples else datetime.now(UTC)
    start = min(samples[0].sampled_at if samples else end, end - _MIN_SPAN)
    span = (end - start).total_seconds()

    def value(sample: HealthSample, field: str) -> float | None:
        v = getattr(sample, field)
        return None if v is None else float(v) * scale

    values = [v for s in samples for f, _, _ in series if (v := value(s, f)) is not None]
    top = _nice_top(max(values, default=0.0))

    def x(at: datetime) -> float:
        return _LEFT + plot_w * (at - start).total_seconds() / span

    def y(v: float) -> float:
        return _TOP + plot_h * (1 - v / top)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" id="{chart_id}" role="img" '
        f'viewBox="0 0 {_WIDTH} {_HEIGHT}" width="{_WIDTH}" height="{_HEIGHT}" '
        f'aria-labelledby="{chart_id}-title">',
        f'<title id="{chart_id}-title">{title}</title>',
    ]
    for k in range(5):
        gv = top * k / 4
        gy = y(gv)
        parts.append(
            f'<line x1="{_LEFT}" y1="{gy:.1f}" x2="{_WIDTH - _RIGHT}" y2="{gy:.1f}" '
            'stroke="#ddd" stroke-width="1"/>'
            f'<text x="{_LEFT - 6}" y="{gy + 4:.1f}" text-anchor="end" font-size="11">'
            f"{_number(gv)}</text>"
        )
    step = 10 if span <= 5400 else 60 if span <= 12 * 3600 else 180  # minutes
    first = start.astimezone(UTC).replace(second=0, microsecond=0)
    into = first.hour * 60 + first.minute
    tick = first + timedelta(minutes=-into % step)
    tick += timedelta(minutes=step) if tick < start else timedelta(0)
    while tick <= end:
        parts.append(
            f'<text x="{x(tick):.1f}" y="{_HEIGHT - _BOTTOM + 16}" text-anchor="middle" '
            f'font-size="11">{tick:%H:%M}</text>'
        )
        tick += timedelta(minutes=step)
    for field, label, colour in series:
        path: list[str] = []
        last: datetime | None = None
        for s in samples:
            v = value(s, field)
            if v is None:
                last = None
                continue
            gap = last is None or s.sampled_at - last > timedelta(minutes=1)
            path.append(f"{'M' if gap else 'L'}{x(s.sampled_at):.1f},{y(v):.1f}")
            if gap:  # a point of its own until the next one joins it
                path.append("l0.1,0")
            last = s.sampled_at
        parts.append(
            f'<path class="series-{field}" fill="none" stroke="{colour}" stroke-width="2" '
            f'stroke-linecap="round" d="{" ".join(path)}"><title>{label}</title></path>'
        )
    for n, (field, label, colour) in enumerate(series):
        lx = _LEFT + n * 150
        latest = next((v for s in reversed(samples) if (v := value(s, field)) is not None), None)
        shown = "none" if latest is None else _number(round(latest, 1))
        parts.append(
            f'<rect x="{lx}" y="{_HEIGHT - 16}" width="10" height="10" fill="{colour}"/>'
            f'<text x="{lx + 14}" y="{_HEIGHT - 7}" font-size="12">{label} ({shown})</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 - numbers and fixed words only
