"""The throughput chart, drawn on the server as inline SVG (no JavaScript, no image requests)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC

from markupsafe import Markup

from drover.inspector import Throughput

__all__ = ["SERIES", "throughput_svg"]

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
