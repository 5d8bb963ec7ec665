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
