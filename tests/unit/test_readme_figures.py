"""The front pages quote no benchmark figure that the benchmarks page does not publish.

`docs/benchmarks.md` holds the current results, with their method and the
commands that reproduce them. A throughput (jobs/s) or latency (ms) figure on
the README or the documentation's home page must be one of its figures, so
a new benchmark run that updates the page cannot leave an old number behind on
the front door.
"""

from __future__ import annotations

import re

from docs_blocks import DOCS, README

BENCHMARKS = DOCS / "benchmarks.md"
FRONT_PAGES = [README, DOCS / "index.md"]

_FIGURE = re.compile(
    r"(?<![\w.,])(\d[\d,]*(?:\.\d+)?)\s*(?:no-op\s+)?"
    r"(?:jobs/s\b|jobs (?:a|per) second\b|ms\b|milliseconds\b)"
)


def quoted_figures(text: str) -> list[str]:
    """Every number a text gives in jobs/s or ms, as written (`9,895`, `4.9`)."""
    return _FIGURE.findall(text)


def published(figure: str, page: str) -> bool:
    """`figure` appears in `page` as a whole number, not inside a longer one."""
    return re.search(rf"(?<![\d,.]){re.escape(figure)}(?![\d,]|\.\d)", page) is not None


def unpublished(text: str, benchmarks: str) -> list[str]:
    return [f for f in quoted_figures(text) if not published(f, benchmarks)]


def test_front_pages_quote_only_published_benchmark_figures() -> None:
    benchmarks = BENCHMARKS.read_text()
    for page in FRONT_PAGES:
        assert unpublished(page.read_text(), benchmarks) == [], page.name


def test_front_pages_link_the_benchmarks_page() -> None:
    assert "](docs/benchmarks.md)" in README.read_text()
    assert "](benchmarks.md)" in (DOCS / "index.md").read_text()


def test_a_figure_the_benchmarks_page_does_not_have_is_caught() -> None:
    benchmarks = BENCHMARKS.read_text()
    # The figures are taken from the text as written, with or without "no-op".
    assert quoted_figures("drains 9,895 no-op jobs/s; p99 4.9 ms; 12 jobs per second") == [
        "9,895",
        "4.9",
        "12",
    ]
    assert unpublished("one process drains 9,895 jobs/s at concurrency 10", benchmarks) == []
    stale = "one process drains 12,345 jobs/s, idle latency 0.123 ms"
    assert unpublished(stale, benchmarks) == ["12,345", "0.123"]
    # Part of a published figure is not that figure.
    assert not published("9,89", "9,895 jobs/s")
    assert not published("4.9", "14.9 ms")
