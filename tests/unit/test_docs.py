"""Shipped documentation artefacts stay in step with the code."""

from __future__ import annotations

import json
from pathlib import Path

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


def test_readme_documents_every_family_and_the_alert() -> None:
    readme = (ROOT / "README.md").read_text()
    for family in FAMILIES:
        assert f"`{family}`" in readme, family
    assert "max by (queue) (max_over_time(drover_oldest_job_age_seconds[5m])) > 300" in readme


def test_every_adr_has_the_required_sections() -> None:
    adrs = sorted((ROOT / "docs" / "adr").glob("[0-9][0-9][0-9][0-9]-*.md"))
    assert len(adrs) >= 4
    numbers = [int(p.name[:4]) for p in adrs]
    assert numbers == list(range(1, len(adrs) + 1))
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
