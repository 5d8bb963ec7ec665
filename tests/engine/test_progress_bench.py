"""``bench/progress.py`` runs every variant in a scratch database and drops it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "progress.py"


@pytest.mark.slow
def test_the_progress_bench_reports_a_ratio_per_variant(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    out = tmp_path / "progress.json"
    result = subprocess.run(
        [sys.executable, str(BENCH), "--database", db_url, "--jobs", "30", "--rounds", "2",
         "--no-warmup", "--json", str(out)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert set(report["results"]) == {"none", "progress", "progress-message", "floor"}
    for row in report["results"].values():
        assert len(row["ratios"]) == 2 and row["jobs_per_s"] > 0
    assert "CPU us/job" in result.stdout
    left = conn.execute(
        "SELECT count(*) FROM pg_database WHERE datname LIKE 'drover_progress_bench_%'"
    ).fetchone()
    assert left == (0,)
