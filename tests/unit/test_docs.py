"""Shipped documentation artefacts stay in step with the code, and the pages keep their rules."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from docs_blocks import DOCS, README, blocks, dangling_markers, page_id, pages, python_blocks

import drover

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = [
    "drover_jobs_completed_total",
    "drover_jobs_failed_total",
    "drover_job_duration_seconds",
    "drover_jobs_executing",
    "drover_pool_concurrency",
    "drover_queue_depth",
    "drover_oldest_job_age_seconds",
]


def test_grafana_dashboard_covers_every_family() -> None:
    dashboard = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
    assert dashboard["title"] == "drover"
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    for family in FAMILIES:
        assert family in exprs, family
    assert "kind" not in exprs
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_the_metrics_page_documents_every_family_and_the_alert() -> None:
    page = (DOCS / "observability.md").read_text()
    for family in FAMILIES:
        assert f"`{family}`" in page, family
    assert "max by (queue) (max_over_time(drover_oldest_job_age_seconds[5m])) > 300" in page


def test_the_readme_is_a_front_door() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    [quickstart] = python_blocks(README)
    assert len(quickstart.code.splitlines()) < 40
    assert "drover.Config(workers=" in quickstart.code
    for page in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / page).exists(), page


def test_no_page_mentions_an_issue_number() -> None:
    issue = re.compile(r"\bissues?\s*#?\d+|(?<![\w/])#\d+\b", re.IGNORECASE)
    for page in pages():
        for number, line in enumerate(page.read_text().splitlines(), 1):
            assert not issue.search(line), f"{page_id(page)}:{number}: {line}"


def test_no_docstring_mentions_an_issue_number() -> None:
    issue = re.compile(r"\bissues?\s*#?\d+", re.IGNORECASE)
    for path in sorted((ROOT / "src" / "drover").rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            assert not issue.search(line), f"{path.relative_to(ROOT)}:{number}: {line}"


def test_docstrings_use_markdown_not_sphinx_roles() -> None:
    # The API reference renders docstrings as Markdown (mkdocstrings): a Sphinx
    # role such as :meth:`x` or an RST "::" literal marker shows up verbatim.
    role = re.compile(r":(?:py:)?(?:meth|class|func|attr|exc|data|mod|obj|const):`")
    literal = re.compile(r"(^|\S)::$")
    for path in sorted((ROOT / "src" / "drover").rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            where = f"{path.relative_to(ROOT)}:{number}: {line}"
            assert not role.search(line), where
            assert not literal.search(line.rstrip()), where


def test_pages_name_no_private_module() -> None:
    private = re.compile(r"\bdrover\._|src/drover/_")
    for page in pages():
        if page.name == "architecture.md":  # the internals, by design
            continue
        for number, line in enumerate(page.read_text().splitlines(), 1):
            assert not private.search(line), f"{page_id(page)}:{number}: {line}"


def test_every_page_is_in_the_site_navigation() -> None:
    def files(entries: object) -> list[str]:
        if isinstance(entries, str):
            return [entries]
        if isinstance(entries, list):
            return [f for entry in entries for f in files(entry)]
        if isinstance(entries, dict):
            return [f for value in entries.values() for f in files(value)]
        return []

    nav = files(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    # An ADR draft (docs/adr/DRAFT-*.md) gets its number and its place in the
    # navigation when it is merged.
    on_disk = sorted(
        p.relative_to(DOCS).as_posix()
        for p in DOCS.rglob("*.md")
        if not (p.parent.name == "adr" and p.name.startswith("DRAFT-"))
    )
    assert sorted(nav) == on_disk


def test_python_blocks_are_marked_python_and_markers_are_attached() -> None:
    for page in pages():
        for block in blocks(page):
            assert block.language not in ("py", "python3", "pycon"), (
                f"{block.id}: write python, so the docs test runs it (or marks it not run)"
            )
        assert dangling_markers(page) == [], f"{page_id(page)}: a not-run marker on no block"


def test_the_errors_page_draws_every_exception() -> None:
    page = (DOCS / "errors.md").read_text()
    for name in drover.__all__:
        value = getattr(drover, name)
        if isinstance(value, type) and issubclass(value, drover.DroverError):
            assert re.search(rf"^[│├└─ ]*{name} ", page, re.MULTILINE), name


def test_the_reference_covers_every_public_module() -> None:
    page = (DOCS / "reference.md").read_text()
    for module in (
        "drover",
        "drover.testing",
        "drover.web",
        "drover.contrib.sqlalchemy",
        "drover.contrib.django",
    ):
        assert re.search(rf"^::: {re.escape(module)}$", page, re.MULTILINE), module


def test_every_adr_has_the_required_sections() -> None:
    adrs = sorted((ROOT / "docs" / "adr").glob("[0-9][0-9][0-9][0-9]-*.md"))
    assert len(adrs) >= 4
    numbers = [int(p.name[:4]) for p in adrs]
    # Numbered without gaps and without repeats: a branch that takes a number ahead of
    # another lands only once the numbers before it have.
    assert numbers == list(range(1, len(adrs) + 1)), numbers
    for path in adrs:
        text = path.read_text()
        for heading in (
            "## Status",
            "## Context",
            "## Decision",
            "## Alternatives",
            "## Consequences",
        ):
            assert heading in text, f"{path.name} lacks {heading}"
