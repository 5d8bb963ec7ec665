"""The status page's Health panel: the queue doctor's findings, read-only, on a real database."""

from __future__ import annotations

import html
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from test_app import get
from werkzeug.test import Client

import drover
from drover.web import make_app

Conn = psycopg.Connection[tuple[Any, ...]]


@pytest.fixture
def browser(db_url: str) -> Iterator[Client]:
    with drover.Inspector(db_url) as inspector:
        yield Client(make_app(inspector))


def test_the_health_page_lists_findings_with_remedy(browser: Client, conn: Conn) -> None:
    page = get(browser, "/health").get_data(as_text=True)
    assert 'id="healthy"' in page
    assert 'href="/health"' in get(browser, "/").get_data(as_text=True)

    conn.execute(
        "INSERT INTO drover_jobs (kind, queue, args, scheduled_at) "
        "VALUES ('doctor_job', 'orphans', '{}', now() - interval '5 minutes')"
    )
    page = html.unescape(get(browser, "/health").get_data(as_text=True))
    assert '<tr data-code="QUEUE_UNSERVED">' in page
    assert "queue orphans has 1 waiting job(s)" in page
    assert "start a worker with --queue orphans" in page
    assert 'id="healthy"' not in page


def test_the_health_page_is_read_only(browser: Client) -> None:
    response = browser.post("/health")
    assert response.status_code == 405


def _plant_samples(conn: Conn, minutes: int = 90) -> None:
    # Dead tuples growing under a pin, and the claims' p99 with them (ADR 0060).
    conn.execute(
        "INSERT INTO drover_health_samples (sampled_at, live_tuples, dead_tuples, total_bytes, "
        "claims, claim_p50_seconds, claim_p99_seconds, claim_max_seconds, walk_max_seconds, "
        "horizon_xids) "
        "SELECT date_trunc('minute', now()) - make_interval(mins => g), 5000, "
        "  (%(m)s - g) * 4000, 1 << 24, 6000, 0.002 + (%(m)s - g) * 0.0001, "
        "  0.01 + (%(m)s - g) * 0.004, 0.5, CASE WHEN g %% 10 = 0 THEN NULL ELSE 0.2 END, "
        "  (%(m)s - g) * 100 "
        "FROM generate_series(0, %(m)s - 1) g",
        {"m": minutes},
    )


def test_the_health_page_charts_dead_tuples_and_claim_times(browser: Client, conn: Conn) -> None:
    page = get(browser, "/health").get_data(as_text=True)
    assert 'id="no-samples"' in page and "<svg" not in page
    _plant_samples(conn)
    page = html.unescape(get(browser, "/health").get_data(as_text=True))
    assert 'id="no-samples"' not in page
    for chart, series in (
        ("tuples-chart", ("dead_tuples", "live_tuples")),
        ("claims-chart", ("claim_p50_seconds", "claim_p99_seconds", "walk_max_seconds")),
    ):
        svg = page[page.index(f'id="{chart}"') : page.index("</svg>", page.index(f'id="{chart}"'))]
        for name in series:
            path = svg[svg.index(f'class="series-{name}"') :]
            d = path[path.index(' d="') + 4 : path.index('"', path.index(' d="') + 4)]
            assert d.count("L") >= 60, (name, d[:80])  # a line through the minutes
    # The legend shows the latest values: 360,000 dead tuples, a p99 of 370 ms.
    assert "dead tuples (360k)" in page
    assert "claim p99 (370)" in page


def test_the_workers_page_shows_each_client_s_claim_times(browser: Client, conn: Conn) -> None:
    conn.execute(
        "INSERT INTO drover_clients (id, client_id, host, pid, version, queues, concurrency, "
        "expires_at, claims, claim_p50_seconds, claim_p99_seconds, claim_max_seconds, "
        "walk_max_seconds) VALUES ('w', 'a1b2c3', 'w1', 4242, '9.9', ARRAY['default'], 4, "
        "now() + interval '1 minute', 812, 0.0021, 0.0456, 0.09, NULL)"
    )
    page = get(browser, "/workers").get_data(as_text=True)
    assert '<th class="num">Claim p99</th>' in page
    assert '<td class="num">812</td>' in page
    assert '<td class="num">2.1 ms</td>' in page and '<td class="num">45.6 ms</td>' in page


def test_the_health_page_of_a_schema_behind_names_it_and_draws_nothing(
    browser: Client, conn: Conn
) -> None:
    # As before migration 0020: no samples table, and the version says so.
    conn.execute("DROP TABLE drover_health_samples")
    conn.execute("ALTER TABLE drover_clients DROP COLUMN kinds")  # and before 0021
    conn.execute("DELETE FROM drover_schema_version WHERE version >= 20")
    page = html.unescape(get(browser, "/health").get_data(as_text=True))
    assert '<tr data-code="SCHEMA_BEHIND">' in page
    assert 'id="no-samples"' in page
