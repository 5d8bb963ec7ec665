"""The status page in a real headless Chromium, against ``drover web`` and a real database.

Needs Debian's ``chromium`` (``.ci/run`` installs it) and Playwright's Python
driver, which drives that browser (it never downloads one). Without the
browser the test is skipped, unless ``DROVER_REQUIRE_BROWSER=1`` (CI) makes
that a failure.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from jobdb import MakeClient, Poll, idle_workers
from serve import drover_web

import drover

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


SHOTS = Path(
    os.environ.get("DROVER_SCREENSHOTS") or Path(tempfile.gettempdir()) / "drover-screenshots"
)
"""Where the tests leave their screenshots for a person to look at."""


@pytest.fixture
def open_page() -> Iterator[Callable[..., Any]]:
    """``open_page(javascript=True)``: a fresh page in its own context of one headless Chromium."""
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        contexts: list[Any] = []

        def open_page(javascript: bool = True) -> Any:
            context = browser.new_context(
                viewport={"width": 1280, "height": 900}, java_script_enabled=javascript
            )
            contexts.append(context)
            return context.new_page()

        try:
            yield open_page
        finally:
            for context in contexts:
                context.close()
            browser.close()


@pytest.fixture
def page(open_page: Callable[..., Any]) -> Any:
    return open_page()


def _shot(page: Any, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000
    return path


def _plant(conn: Conn, state: str, kind: str, args: str = "{}") -> int:
    row = conn.execute(
        "INSERT INTO drover_jobs (kind, queue, state, attempt, max_attempts, errors, finalized_at, "
        "args) VALUES (%s, 'mail', %s::drover_job_state, 5, 5, "
        "jsonb_build_array(jsonb_build_object('attempt', 5, 'at', now()::text, "
        "'error', 'SMTPError: 550 mailbox unavailable', 'trace', 'Traceback ...')), "
        "CASE WHEN %s IN ('dead', 'completed') THEN now() END, %s::jsonb) RETURNING id",
        (kind, state, state, args),
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


def _row(page: Any, job_id: int) -> Any:
    return page.locator("#jobs tbody tr", has=page.locator(f'a[href$="/jobs/{job_id}"]'))


def _rounds(page: Any) -> int:
    return int(page.locator("body").get_attribute("data-live-rounds") or "0")


def _two_more_rounds(page: Any) -> None:
    # live.js counts every round it looks at, refreshed or skipped, one a second
    # here. (Not wait_for_function: the page's CSP rightly refuses its eval.)
    from playwright.sync_api import expect

    target = str(_rounds(page) + 2)
    expect(page.locator("body")).to_have_attribute("data-live-rounds", target, timeout=15_000)


def test_the_refresh_brings_new_jobs_in_without_touching_typed_filters_or_selections(
    db_url: str, conn: Conn, page: Any
) -> None:
    first = _plant(conn, "dead", "send_email")
    with drover_web(db_url, "--listen", "127.0.0.1:0", "--refresh", "1") as (url, _):
        page.goto(f"{url}jobs")
        assert page.locator("body").get_attribute("data-refresh") == "1"
        typed = '{"to": "ada@exa'
        args_box = page.locator("input[name=args]")
        args_box.click()
        args_box.press_sequentially(typed)
        # A job arrives while the operator is typing: the table picks it up, the
        # half-typed filter stays as it is, with the focus and the caret in it.
        second = _plant(conn, "dead", "send_email")
        _row(page, second).wait_for(timeout=15_000)
        assert args_box.input_value() == typed
        assert page.evaluate("document.activeElement.name") == "args"
        assert page.locator("body").get_attribute("data-live-state") == "live"

        # A ticked checkbox holds the table still: no round swaps it away.
        _row(page, first).locator("input[type=checkbox]").check()
        args_box.focus()  # back to the filter, so the tick alone holds the table
        third = _plant(conn, "dead", "send_email")
        _two_more_rounds(page)
        assert _row(page, third).count() == 0
        assert _row(page, first).locator("input[type=checkbox]").is_checked()
        assert page.locator("body").get_attribute("data-live-state") == "paused"
        assert "paused while jobs are selected" in page.locator("#live-status").inner_text()
        _shot(page, "jobs-paused-while-selected")
        _row(page, first).locator("input[type=checkbox]").uncheck()
        _row(page, third).wait_for(timeout=15_000)
        assert args_box.input_value() == typed


def test_an_operator_retries_selected_dead_jobs_in_bulk_without_javascript(
    db_url: str, conn: Conn, open_page: Callable[..., Any]
) -> None:
    page = open_page(javascript=False)
    ada = _plant(conn, "dead", "send_email", '{"to": "ada@example.com", "template": "welcome"}')
    bob = _plant(conn, "dead", "send_email", '{"to": "bob@example.com"}')
    kept = _plant(conn, "dead", "send_email", '{"to": "cy@example.com"}')
    with drover_web(db_url, "--listen", "127.0.0.1:0", "--refresh", "0") as (url, _):
        page.goto(f"{url}jobs")
        assert _row(page, ada).locator("td.args").inner_text().startswith('{"template": "welcome"')
        assert "died" in _row(page, ada).inner_text()
        _row(page, ada).locator("input[type=checkbox]").check()
        _row(page, bob).locator("input[type=checkbox]").check()
        _shot(page, "jobs-bulk-selection")
        page.get_by_role("button", name="Retry selected").click()
        flash = page.locator("p.flash")
        flash.wait_for()
        assert flash.inner_text() == "Retried 2 of 2 selected job(s)."
        assert [_state(conn, j) for j in (ada, bob, kept)] == ["available", "available", "dead"]

        # Search by args: the JSON the operator types, contained in the job's args.
        page.fill("input[name=args]", '{"to": "cy@example.com"}')
        page.get_by_role("button", name="Filter").click()
        page.wait_for_url("**args=**")
        ids = page.locator("#jobs tbody tr td.num a").all_inner_texts()
        assert ids == [str(kept)]
        page.fill("input[name=args]", '{"to": ')
        page.get_by_role("button", name="Filter").click()
        assert page.locator("h1").inner_text() == "Bad filter: args"
        assert "args is not valid JSON" in page.locator("main").inner_text()


def test_retry_all_dead_of_a_kind_asks_first_and_the_jump_box_finds_a_job(
    db_url: str, conn: Conn, open_page: Callable[..., Any]
) -> None:
    page = open_page(javascript=False)
    dead = [_plant(conn, "dead", "send_sms") for _ in range(3)]
    with drover_web(db_url, "--listen", "127.0.0.1:0", "--refresh", "0") as (url, _):
        page.goto(f"{url}jobs?kind=send_sms&state=dead")
        page.get_by_role("button", name="Retry all dead send_sms jobs").click()
        asked = page.locator("#confirm-what")
        asked.wait_for()
        assert asked.inner_text().startswith("3 dead job(s) of kind send_sms would go back")
        assert [_state(conn, j) for j in dead] == ["dead"] * 3  # nothing yet
        _shot(page, "retry-dead-confirm")
        page.get_by_role("button", name="Retry 3 job(s)").click()
        flash = page.locator("p.flash")
        flash.wait_for()
        assert flash.inner_text() == "Retried 3 dead job(s) of kind send_sms."
        assert [_state(conn, j) for j in dead] == ["available"] * 3

        # Any page: type a job's id in the header's box, press Enter, land on the job.
        page.get_by_role("textbox", name="Job id").fill(f"#{dead[1]}")
        page.get_by_role("textbox", name="Job id").press("Enter")
        page.wait_for_url(f"**/jobs/{dead[1]}")
        assert page.locator("h1").inner_text().startswith(f"Job {dead[1]}")
        due = page.locator("dt:text('Due') + dd time")
        assert due.get_attribute("title", timeout=5_000) is not None  # the UTC time on hover
        assert due.inner_text() == "just now" or due.inner_text().endswith(" ago")


def test_the_workers_view_and_the_overview_show_live_clients(
    db_url: str, conn: Conn, page: Any, make_client: MakeClient
) -> None:
    _plant(conn, "available", "send_email")  # waiting on queue mail, which nobody consumes
    conn.execute(
        "INSERT INTO drover_jobs (kind, state, finalized_at, attempted_at, attempt) "
        "SELECT 'report', 'completed', now(), now() - make_interval(secs => g / 10.0), 1 "
        "FROM generate_series(1, 30) g"
    )
    client = make_client(workers=idle_workers(), queues={"default": 1, "reports": 1})
    client.start()
    with drover_web(db_url, "--listen", "127.0.0.1:0", "--refresh", "1") as (url, _):
        page.goto(url)
        assert page.title() == "Overview · drover"
        flag = page.locator("p.flag")
        assert "Queue mail has waiting jobs and no live worker" in flag.inner_text()
        kinds = page.locator("#kinds tbody tr", has=page.locator("text=report"))
        # completed, failed attempts, dead, cancelled
        assert kinds.locator("td").all_inner_texts()[1:5] == ["30", "0", "0", "0"]
        _shot(page, "overview")

        page.get_by_role("link", name="Workers", exact=True).click()
        page.wait_for_url("**/workers")
        row = page.locator("#workers tbody tr")
        assert row.count() == 1
        cells = row.locator("td").all_inner_texts()
        assert cells[2] == str(os.getpid()) and cells[3] == drover.__version__
        assert cells[4] == "default, reports"
        _shot(page, "workers")

        client.stop(timeout=5)  # a clean stop removes it: the live page follows
        page.locator("#workers-live p.muted", has_text="No live worker").wait_for(timeout=15_000)
        assert page.locator("#workers tbody tr").count() == 0


TRACE = (
    "Traceback (most recent call last):\n"
    '  File "/srv/venv/lib/python3.12/site-packages/drover/_runtime/runner.py", line 88, in run\n'
    "    self._chain(claim)\n"
    '  File "/srv/venv/lib/python3.12/site-packages/drover/middleware.py", line 40, in __call__\n'
    "    return inner(job)\n"
    '  File "/srv/app/jobs.py", line 12, in work\n'
    "    smtp.send(job.args.to)\n"
    "SMTPError: 550 mailbox unavailable"
)


def test_a_traceback_shows_the_users_frames_and_folds_drovers(
    db_url: str, conn: Conn, page: Any
) -> None:
    row = conn.execute(
        "INSERT INTO drover_jobs (kind, state, attempt, finalized_at, errors) VALUES "
        "('send_email', 'dead', 1, now(), jsonb_build_array(jsonb_build_object('attempt', 1, "
        "'at', now()::text, 'error', 'SMTPError: 550 mailbox unavailable', 'trace', %s::text))) "
        "RETURNING id",
        (TRACE,),
    ).fetchone()
    assert row is not None
    with drover_web(db_url, "--listen", "127.0.0.1:0", "--refresh", "1") as (url, _):
        page.goto(f"{url}jobs/{row[0]}")
        folded = page.locator("details.drover-frames")
        assert folded.count() == 1 and folded.get_attribute("open") is None
        assert folded.locator("summary").inner_text() == "2 drover frames"
        assert not folded.locator("pre").is_visible()
        assert page.get_by_text('File "/srv/app/jobs.py", line 12, in work').is_visible()
        folded.locator("summary").click()
        assert folded.locator("pre").is_visible()
        assert "runner.py" in folded.locator("pre").inner_text()
        _two_more_rounds(page)  # an open section holds the refresh: it stays open
        assert folded.get_attribute("open") is not None
        assert page.locator("body").get_attribute("data-live-state") == "paused"
        _shot(page, "job-traceback")


class Throttled(drover.JobArgs, kind="browser_throttled", limits=drover.Limit(concurrency=1)):
    pass


def test_an_operator_raises_a_limit_and_the_held_back_jobs_start(
    db_url: str, page: Any, make_client: MakeClient, poll: Poll
) -> None:
    release = threading.Event()
    started: list[int] = []
    workers = drover.Workers()

    @workers.register(args=Throttled)
    def throttled(job: drover.Job[Throttled]) -> None:
        started.append(job.id)
        release.wait(20)

    client = make_client(workers=workers, poll_interval=0.1, concurrency=4)
    client.start()
    try:
        for _ in range(3):
            client.insert(Throttled())
        poll(lambda: len(started) == 1, message="the first job runs; the limit holds the rest")
        with drover_web(db_url, "--listen", "127.0.0.1:0", "--refresh", "1") as (url, _):
            page.goto(url)
            page.get_by_role("link", name="Limits", exact=True).click()
            page.wait_for_url("**/limits")
            key = "kind:browser_throttled"
            use = page.locator(f'#limits tr[data-key="{key}"] td:nth-child(2)')
            assert use.inner_text() == "1 / 1"
            assert use.get_attribute("class") == "num warn"

            page.locator(f'#limits tr[data-key="{key}"]').get_by_role("link", name="Change").click()
            concurrency = page.locator("input[name=concurrency]")
            assert concurrency.input_value() == "1"
            concurrency.fill("3")
            page.get_by_role("button", name="Set", exact=True).click()
            assert page.locator("p.flash").inner_text().startswith(f"Set limit {key}:")
            poll(lambda: len(started) == 3, message="the held-back jobs start after the raise")
            # The table follows in place (refresh every second).
            use.filter(has_text="3 / 3").wait_for(timeout=15_000)
            row = page.locator(f'#limits tr[data-key="{key}"]')
            assert "operator override (code: concurrency 1)" in row.inner_text()
            _shot(page, "limits")

            row.get_by_role("button", name="Clear override").click()
            flash = page.locator("p.flash").inner_text()
            assert flash == f"Cleared the override of {key}: the values its code declares apply."
            assert use.inner_text() == "3 / 1"  # over the declared limit: nothing more starts
            assert row.locator("td").nth(4).inner_text() == "code"
    finally:
        release.set()


class CrawlFetch(drover.JobArgs, kind="crawl_fetch"):
    url: str


class CrawlCount(drover.JobArgs, kind="crawl_count"):
    pass


class CrawlPublish(drover.JobArgs, kind="crawl_publish", queue="publishing"):
    """On a queue the test's client does not work: it waits, available."""

    title: str


def test_a_chords_workflow_page_draws_the_graph_and_links_each_job(
    db_url: str, conn: Conn, page: Any, make_client: MakeClient, poll: Poll
) -> None:
    workers = drover.Workers()

    @workers.register
    def fetch(job: drover.Job[CrawlFetch]) -> dict[str, Any]:
        return {"url": job.args.url, "bytes": 1000 * len(job.args.url)}

    @workers.register
    def count(job: drover.Job[CrawlCount]) -> int:
        return sum(r["bytes"] for r in job.parent_results())

    client = make_client(workers=workers, poll_interval=0.1)
    client.start()
    urls = [f"https://example.com/{p}" for p in ("a", "bb", "ccc", "dddd")]
    inserted = client.insert(
        drover.chain(
            drover.group(*(CrawlFetch(url=u) for u in urls)).then(CrawlCount()),
            CrawlPublish(title="crawl"),
            CrawlPublish(title="digest"),
        )
    )
    assert isinstance(inserted, drover.InsertedWorkflow)
    ids = [r.id for r in inserted.jobs]
    counted = ids[4]
    poll(lambda: _state(conn, counted) == "completed", message="the chord's callback completes")
    client.stop(timeout=5)

    with drover_web(db_url, "--listen", "127.0.0.1:0", "--refresh", "0") as (url, _):
        page.goto(f"{url}jobs/{counted}")
        assert page.locator("#waits-for a").all_inner_texts() == [str(i) for i in ids[:4]]
        result = page.locator("#result")
        assert result.inner_text() == str(sum(1000 * len(u) for u in urls))
        page.locator("#workflow-link").click()
        page.wait_for_url(f"**/workflows/{ids[0]}")
        svg = page.locator("svg.workflow")
        assert svg.is_visible()
        nodes = svg.locator("a.node")
        assert nodes.count() == 7
        assert svg.locator("path.edge").count() == 6  # four into the callback, then a chain
        states = {n.get_attribute("data-job"): n.get_attribute("class") for n in nodes.all()}
        assert states == {
            **{str(i): "node state-completed" for i in ids[:5]},
            str(ids[5]): "node state-available",
            str(ids[6]): "node state-pending",
        }
        # Columns run left to right: members, callback, then the two chained steps.
        xs = [svg.locator(f'a.node[data-job="{i}"] rect').bounding_box()["x"] for i in ids]
        assert len(set(xs[:4])) == 1 and xs[3] < xs[4] < xs[5] < xs[6]
        assert "fill: rgb(232, 245, 233)" in svg.locator(
            f'a.node[data-job="{ids[0]}"] rect'
        ).evaluate("r => 'fill: ' + getComputedStyle(r).fill")
        _shot(page, "workflow-page")

        svg.locator(f'a.node[data-job="{ids[6]}"]').click()  # a box opens its job
        page.wait_for_url(f"**/jobs/{ids[6]}")
        assert page.locator("h1").inner_text() == f"Job {ids[6]} pending"
        assert page.locator("#waits-for a").all_inner_texts() == [str(ids[5])]


def test_the_health_page_draws_dead_tuples_and_claim_times_over_time(
    db_url: str, conn: Conn, page: Any
) -> None:
    # Two hours of samples: dead tuples growing under a pin, claims slowing with them,
    # until a vacuum forty minutes ago (ADR 0060).
    conn.execute(
        "INSERT INTO drover_health_samples (sampled_at, live_tuples, dead_tuples, total_bytes, "
        "claims, claim_p50_seconds, claim_p99_seconds, claim_max_seconds, walk_max_seconds) "
        "SELECT date_trunc('minute', now()) - make_interval(mins => g), 20000, "
        "  CASE WHEN g > 40 THEN (120 - g) * 5000 ELSE 3000 END, 1 << 26, 6000, "
        "  CASE WHEN g > 40 THEN 0.002 + (120 - g) * 0.0002 ELSE 0.002 END, "
        "  CASE WHEN g > 40 THEN 0.01 + (120 - g) * 0.003 ELSE 0.012 END, 0.4, "
        "  CASE WHEN g > 40 THEN 0.05 + (120 - g) * 0.004 ELSE 0.03 END "
        "FROM generate_series(0, 119) g"
    )
    with drover_web(db_url, "--listen", "127.0.0.1:0") as (url, _):
        page.goto(url + "/health")
        assert page.title() == "Health · drover"
        for chart in ("#tuples-chart", "#claims-chart"):
            svg = page.locator(chart)
            assert svg.is_visible()
            box = svg.bounding_box()
            assert box is not None and box["width"] > 600 and box["height"] > 150
        legend = " ".join(page.locator("#claims-chart text").all_text_contents())
        assert "claim p99 (12)" in legend and "slowest walk (30)" in legend
        _shot(page, "health")


def test_the_overview_links_each_kind_and_queue_to_its_own_page(
    db_url: str, conn: Conn, open_page: Callable[..., Any]
) -> None:
    page = open_page(javascript=False)
    for _ in range(4):
        _plant(conn, "completed", "send_receipt")
    _plant(conn, "dead", "send_receipt")
    with drover_web(db_url, "--listen", "127.0.0.1:0", "--refresh", "0") as (url, _):
        page.goto(url)
        page.locator("#kinds").get_by_role("link", name="send_receipt").click()
        page.wait_for_url("**/kind/send_receipt")
        # _plant gives every job one failed attempt (its SMTPError), the completed ones too.
        assert page.locator("#totals").inner_text() == "4 completed, 5 failed attempt(s), 1 dead."
        _shot(page, "kind-page")
        page.get_by_role("link", name="last day").click()
        page.wait_for_url("**/kind/send_receipt?window=day")
        page.goto(url)
        page.locator("#queues").get_by_role("link", name="mail").click()
        page.wait_for_url("**/queue/mail")
        assert page.locator("#queue tbody td").first.inner_text() is not None
        assert "Pause" in page.locator("#queue").inner_text()
        _shot(page, "queue-page")
