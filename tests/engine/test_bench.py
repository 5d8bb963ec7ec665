"""`drover bench` runs end to end (correctness only: no timing is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
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
