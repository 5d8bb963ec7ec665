"""`drover bench` runs end to end (correctness only: no timing is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest


def _bench(db_url: str, *args: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-m", "drover", "bench", "--database", db_url, "--json", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def test_drain_smoke(db_url: str, conn: psycopg.Connection[Any]) -> None:
    report = _bench(db_url, "--jobs", "500", "--concurrency", "4")
    assert (report["mode"], report["jobs"], report["concurrency"]) == ("drain", 500, 4)
    assert report["jobs_per_second"] > 0
    assert set(report["latency_ms"]) == {"p50", "p95", "p99", "max"}
    assert report["peak_rss_mb"] > 0
    assert report["postgres"]["fsync"] in ("on", "off")
    assert "server_version" in report["postgres"]
    done = conn.execute(
        "SELECT state::text, count(*) FROM drover_jobs WHERE kind = 'drover_bench_noop' "
        "GROUP BY state"
    ).fetchall()
    assert done == [("completed", 500)]


def test_burst_drains_in_a_database_of_its_own_and_drops_it(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    def databases() -> set[str]:
        # Only the bench's own burst databases: other tests (xdist workers on a shared
        # server) create and drop databases of their own meanwhile.
        rows = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE 'drover\\_bench\\_burst\\_%'"
        ).fetchall()
        return {str(r[0]) for r in rows}

    before = databases()
    report = _bench(db_url, "--mode", "burst", "--jobs", "300", "--concurrency", "4")
    assert (report["mode"], report["jobs"]) == ("burst", 300)
    assert report["jobs_per_second"] > 0
    # Nothing was run in the test's own database, and the burst's database is gone.
    assert conn.execute("SELECT count(*) FROM drover_jobs").fetchone() == (0,)
    assert databases() == before


@pytest.mark.parametrize(("batch", "concurrency"), [("100", "1"), ("1", "4")])
def test_enqueue_smoke(
    db_url: str, conn: psycopg.Connection[Any], batch: str, concurrency: str
) -> None:
    report = _bench(
        db_url, "--mode", "enqueue", "--jobs", "300", "--batch", batch,
        "--concurrency", concurrency, "--queues", "3",
    )  # fmt: skip
    assert report["jobs"] == 300
    rows = conn.execute(
        "SELECT count(DISTINCT queue), count(*) FROM drover_jobs WHERE kind = 'drover_bench_noop'"
    ).fetchone()
    assert rows == (3, 300)


def test_latency_smoke(db_url: str) -> None:
    report = _bench(db_url, "--mode", "latency", "--jobs", "10")
    assert report["latency_ms"]["p50"] > 0
    assert report["jobs"] == 10


def test_bad_mode_is_a_usage_error(db_url: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "drover", "bench", "--mode", "sprint", "--database", db_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "--mode must be one of" in result.stderr


BENCH_WORKFLOWS = Path(__file__).resolve().parents[2] / "bench" / "workflows.py"


def test_workflows_bench_runs_every_row_in_scratch_databases_and_drops_them(
    db_url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    out = tmp_path / "workflows.json"
    proc = subprocess.Popen(
        [
            sys.executable, str(BENCH_WORKFLOWS), "--database", db_url,
            "--base-python", sys.executable, "--rounds", "1", "--no-warmup",
            "--fanout-jobs", "30", "--chain-steps", "5", "--drain-jobs", "40", "--probes", "3",
            "--json", str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, output
    report = json.loads(out.read_text())
    results = report["results"]
    assert set(results) == {"fanout", "chain", "base", "result-cost", "result-wait"}
    for row in results.values():
        assert len(row["ratios"]) == 1
        assert row["a_median"] > 0
        assert row["b_median"] > 0
    ((fanout_a, fanout_b),) = report["raw"]["fanout"]
    assert (fanout_a["jobs"], fanout_b["jobs"]) == (30, 31)  # the members and the callback
    ((_, chain_b),) = report["raw"]["chain"]
    assert chain_b["jobs"] == 5
    ((_, probes_b),) = report["raw"]["result-wait"]
    assert len(probes_b["latencies_ms"]) == 3
    assert "fanout" in output
    assert "B/A" in output
    # Nothing ran in the test's own database, and the scratch databases are gone.
    assert conn.execute("SELECT count(*) FROM drover_jobs").fetchone() == (0,)
    left = conn.execute(
        "SELECT datname FROM pg_database WHERE datname LIKE %s", (f"drover_wfbench_{proc.pid}_%",)
    ).fetchall()
    assert left == []
