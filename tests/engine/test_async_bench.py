"""``bench/async_drain.py`` runs every row in a scratch database and drops it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "async_drain.py"


@pytest.mark.slow
def test_the_async_bench_reports_every_row(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    out = tmp_path / "async.json"
    result = subprocess.run(
        [sys.executable, str(BENCH), "--database", db_url, "--io-jobs", "60",
         "--async-concurrency", "20", "--sync-concurrency", "5", "--noop-jobs", "30",
         "--noop-concurrency", "5", "--rounds", "2", "--json", str(out)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    for row in (report["async_io"], report["async_ceiling"], report["sync_io"]):
        assert row["jobs"] == 60 and row["jobs_per_s"] > 0 and row["peak_rss_mb"] > 0
    assert report["async_io"]["concurrency"] == 20
    assert len(report["noop_ratios"]) == 2
    assert "no-op ratio" in result.stdout
    left = conn.execute(
        "SELECT count(*) FROM pg_database WHERE datname LIKE 'drover_async_bench_%'"
    ).fetchone()
    assert left == (0,)
