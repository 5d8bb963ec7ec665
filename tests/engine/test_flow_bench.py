"""bench/flow.py and bench/partition_claim.py run end to end (shape only: no timing is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _run(script: str, *args: str, timeout: float = 300) -> str:
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout
    return proc.stdout


@pytest.mark.slow
def test_flow_bench_runs_its_rows_as_interleaved_pairs(db_url: str, tmp_path: Path) -> None:
    out = tmp_path / "flow.json"
    rows = "kind-c10,partitions-c50x2,priority-c50,latency"
    output = _run(
        "flow.py", "--database", db_url, "--reps", "2", "--no-warmup",
        "--drain-jobs", "60", "--latency-jobs", "3", "--rows", rows, "--json", str(out),
    )  # fmt: skip
    report: dict[str, Any] = json.loads(out.read_text())
    assert list(report["results"]) == rows.split(",")
    for row in ("kind-c10", "partitions-c50x2", "priority-c50"):
        result = report["results"][row]
        assert len(result["ratios"]) == 2
        for side in ("A", "B"):
            assert len(result[side]["runs"]) == 2
            assert result[side]["jobs_per_s"] > 0
            assert result[side]["max_seconds"] > 0
        assert all(pair["A"]["n"] == pair["B"]["n"] == 60 for pair in report["raw"][row])
    latency = report["results"]["latency"]
    assert set(latency["A"]) == set(latency["B"]) == {"p50", "p95", "max", "runs_p50"}
    assert len(latency["p50_diffs_ms"]) == 2
    assert "| kind-c10 |" in output
    assert "B/A" in output
    assert "p50 B - A" in output


def test_flow_bench_refuses_an_unknown_row(db_url: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH / "flow.py"), "--database", db_url, "--rows", "sprint"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode != 0
    assert "unknown row(s) ['sprint']" in proc.stderr


def test_partition_claim_bench_compares_with_the_old_claim_and_cleans_up(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    out = tmp_path / "claim.json"
    output = _run(
        "partition_claim.py", "--database", db_url, "--reps", "1", "--jobs", "200",
        "--claims", "6", "--batch", "10", "--explain-every", "3", "--baseline", "0008",
        "--json", str(out),
    )  # fmt: skip
    summary: dict[str, Any] = json.loads(out.read_text())["summary"]
    limited = ["other-kind", "kind-conc", "kind-rate", "queue-conc", "partitions"]
    assert set(summary) == {"plain", *limited, *(f"{s}@0008" for s in limited)}
    for row in summary.values():
        assert row["wall_ms"] > 0
        assert row["server_ms"] > 0
    assert summary["plain"]["wall_ratio"] == 1.0
    assert "| partitions@0008 |" in output
    left = conn.execute(
        "SELECT datname FROM pg_database WHERE datname LIKE 'drover\\_claimbench\\_%'"
    ).fetchall()
    assert left == []
