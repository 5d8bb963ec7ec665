"""The status page in a real headless Chromium, against ``drover web`` and a real database.

Needs Debian's ``chromium`` (``.ci/run`` installs it) and Playwright's Python
driver, which drives that browser (it never downloads one). Without the
browser the test is skipped, unless ``DROVER_REQUIRE_BROWSER=1`` (CI) makes
that a failure.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from serve import drover_web

Conn = psycopg.Connection[tuple[Any, ...]]
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = pytest.mark.browser


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("DROVER_REQUIRE_BROWSER") == "1":
            pytest.fail("chromium is not installed, and DROVER_REQUIRE_BROWSER=1")
        pytest.skip("chromium is not installed (Debian: apt-get install chromium)")
    return path


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Any]:
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        try:
            yield context.new_page()
        finally:
            context.close()
            browser.close()


def _plant(conn: Conn, state: str, kind: str) -> int:
    row = conn.execute(
        "INSERT INTO drover_jobs (kind, queue, state, attempt, max_attempts, errors, finalized_at) "
        "VALUES (%s, 'mail', %s::drover_job_state, 5, 5, "
        "jsonb_build_array(jsonb_build_object('attempt', 5, 'at', now()::text, "
        "'error', 'SMTPError: 550 mailbox unavailable', 'trace', 'Traceback ...')), "
        "CASE WHEN %s IN ('dead', 'completed') THEN now() END) RETURNING id",
        (kind, state, state),
    ).fetchone()
    assert row is not None
    return int(row[0])


def _state(conn: Conn, job_id: int) -> str:
    row = conn.execute("SELECT state::text FROM drover_jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return str(row[0])


def test_an_operator_retries_and_cancels_a_dead_job_in_a_real_browser(
    db_url: str, conn: Conn, page: Any, tmp_path: Path
) -> None:
    dead = _plant(conn, "dead", "send_email")
    _plant(conn, "completed", "send_email")
    _plant(conn, "available", "send_email")
    with drover_web(db_url, "--listen", "127.0.0.1:0", "--refresh", "0") as (url, _):
        page.goto(url)
        assert page.locator("h1").inner_text() == "Overview"
        chart = page.locator("svg.chart")
        assert chart.is_visible()
        assert chart.locator("polyline").count() == 3
        assert chart.bounding_box()["width"] > 300
        assert "completed (1)" in chart.inner_html()
        page.screenshot(path=str(tmp_path / "overview.png"), full_page=True)

        page.get_by_role("link", name="Dead jobs").click()
        page.wait_for_url("**/jobs")
        assert page.locator("select[name=state]").input_value() == "dead"
        row = page.locator("tr", has=page.locator(f'a[href$="/jobs/{dead}"]'))
        assert row.locator("td.state-dead").inner_text() == "dead"
        row.get_by_role("button", name="Retry").click()
        flash = page.locator("p.flash")
        flash.wait_for()
        assert flash.inner_text() == f"Retried job {dead}: it is available again."
        assert _state(conn, dead) == "available"

        page.select_option("select[name=state]", "all")
        page.get_by_role("button", name="Filter").click()
        page.wait_for_url("**state=all**")
        row = page.locator("tr", has=page.locator(f'a[href$="/jobs/{dead}"]'))
        row.get_by_role("button", name="Cancel").click()
        page.locator("p.flash").wait_for()
        assert page.locator("p.flash").inner_text() == f"Cancelled job {dead}."
        assert _state(conn, dead) == "cancelled"

        page.goto(f"{url}jobs/{dead}")
        assert "SMTPError: 550 mailbox unavailable" in page.locator("main").inner_text()
        page.screenshot(path=str(tmp_path / "job.png"), full_page=True)
    assert (tmp_path / "overview.png").stat().st_size > 10_000
