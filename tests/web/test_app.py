"""The status page through its WSGI interface (werkzeug's test client) on a real database."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import psycopg
import pytest
from jobdb import table_snapshot
from werkzeug.test import Client, TestResponse

import drover
from drover.web import make_app
from drover.web.app import CSP, relative

Conn = psycopg.Connection[tuple[Any, ...]]
HOST = "status.example"
ORIGIN = f"http://{HOST}"
EVIL = "<script>alert('x')</script>"


@pytest.fixture
def inspector(db_url: str) -> Iterator[drover.Inspector]:
    with drover.Inspector(db_url) as i:
        yield i


@pytest.fixture
def browser(inspector: drover.Inspector) -> Client:
    return Client(make_app(inspector))


def get(client: Client, path: str) -> TestResponse:
    return client.get(path, headers={"Host": HOST})


def post(
    client: Client, path: str, data: dict[str, str], origin: str | None = ORIGIN, **headers: str
) -> TestResponse:
    sent = {"Host": HOST, **headers}
    if origin is not None:
        sent["Origin"] = origin
    return client.post(path, data=data, headers=sent)


def token(client: Client) -> str:
    page = get(client, "/jobs?state=all")
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    if found is None:  # no form on the page: the cookie alone carries it
        cookie = client.get_cookie("drover_csrf", domain=HOST)
        assert cookie is not None
        return cookie.value
    return found.group(1)


def plant(
    conn: Conn,
    state: str,
    *,
    kind: str = "report",
    queue: str = "default",
    args: Any = None,
    errors: list[dict[str, Any]] | None = None,
) -> int:
    row = conn.execute(
        "INSERT INTO drover_jobs (kind, queue, args, state, errors, attempt, finalized_at, "
        "leased_until, scheduled_at) "
        "VALUES (%s, %s, %s::jsonb, %s::drover_job_state, %s::jsonb, 1, "
        "CASE WHEN %s IN ('completed', 'cancelled', 'dead') THEN now() END, "
        "CASE WHEN %s = 'running' THEN now() + interval '1 hour' END, "
        "CASE WHEN %s = 'scheduled' THEN now() + interval '1 hour' ELSE now() END) RETURNING id",
        (kind, queue, json.dumps(args or {}), state, json.dumps(errors or []), state, state, state),
    ).fetchone()
    assert row is not None
    return int(row[0])


def state_of(conn: Conn, job_id: int) -> str:
    row = conn.execute("SELECT state::text FROM drover_jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return str(row[0])


def flash_after(client: Client, response: TestResponse) -> str:
    assert response.status_code == 303, response.text
    page = get(client, response.headers["Location"])
    found = re.search(r'<p class="flash[^"]*" role="status">([^<]*)</p>', page.text)
    assert found is not None, page.text
    return found.group(1)


# --- pages, headers, escaping -------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/", "/jobs", "/jobs?state=all", "/workers", "/nope", "/jobs?state=x"]
)
def test_every_response_carries_the_security_headers(browser: Client, path: str) -> None:
    response = get(browser, path)
    assert response.headers["Content-Security-Policy"] == CSP
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Content-Type"] == "text/html; charset=utf-8"
    assert response.headers["Cache-Control"] == "no-store"
    # The one script is the app's own file; nothing inline.
    assert set(re.findall(r"<script[^>]*>", response.text)) <= {
        '<script src="/static/live.js" defer>'
    }


def test_overview_shows_queues_counts_pause_state_and_the_chart(
    browser: Client, conn: Conn, inspector: drover.Inspector
) -> None:
    plant(conn, "available", queue="mail")
    plant(conn, "dead", queue="mail")
    plant(conn, "completed", queue="mail")
    inspector.pause_queue("bulk")
    page = get(browser, "/")
    assert page.status_code == 200
    assert page.headers["Set-Cookie"].startswith("drover_csrf=")
    assert "SameSite=Strict" in page.headers["Set-Cookie"]
    # pending 0, then available 1
    assert re.search(
        r">mail</a></td>\s*<td class=\"num\">0</td>\s*<td class=\"num\">1</td>", page.text
    )
    assert '<span class="paused">paused</span>' in page.text
    assert 'action="/queues/resume"' in page.text and 'action="/queues/pause"' in page.text
    svg = re.search(r"<svg .*?</svg>", page.text, re.S)
    assert svg is not None and 'class="series-completed"' in svg.group(0)
    assert "completed (1)" in svg.group(0) and "dead (1)" in svg.group(0)
    assert '<noscript><meta http-equiv="refresh" content="5;url=/"></noscript>' in page.text


def test_job_data_is_escaped_everywhere(browser: Client, conn: Conn) -> None:
    job = plant(
        conn,
        "dead",
        kind=f"kind{EVIL}",
        queue=f"q{EVIL}"[:120],
        args={"note": EVIL},
        errors=[{"attempt": 1, "at": "2030-01-01T00:00:00Z", "error": f"<b>{EVIL}</b>",
                 "trace": EVIL}],
    )  # fmt: skip
    for path in ["/", "/jobs?state=all", f"/jobs/{job}"]:
        page = get(browser, path)
        assert page.status_code == 200
        assert EVIL not in page.text and "<b>" not in page.text, path
        assert "&lt;script&gt;" in page.text, path


def test_job_detail_shows_args_errors_traces_and_the_lease_holder(
    browser: Client, conn: Conn
) -> None:
    job = plant(
        conn,
        "running",
        args={"to": "ada@example.com", "n": [1, 2]},
        errors=[{"attempt": 1, "at": "2030-01-01T00:00:00Z", "error": "ValueError: boom",
                 "trace": "Traceback (most recent call last):\n  File \"w.py\""}],
    )  # fmt: skip
    conn.execute(
        "UPDATE drover_jobs SET leased_by = 'abc123 (pid 7 on host)' WHERE id = %s", (job,)
    )
    page = get(browser, f"/jobs/{job}")
    assert page.status_code == 200
    assert "&#34;to&#34;: &#34;ada@example.com&#34;" in page.text  # pretty-printed JSON, escaped
    assert "ValueError: boom" in page.text and "Traceback (most recent call last)" in page.text
    assert "held by abc123 (pid 7 on host)" in page.text
    assert "<dt>Priority</dt><dd>0</dd>" in page.text
    conn.execute("UPDATE drover_jobs SET priority = -42 WHERE id = %s", (job,))
    assert "<dt>Priority</dt><dd>-42</dd>" in get(browser, f"/jobs/{job}").text
    assert get(browser, "/jobs/99999").status_code == 404


def test_buttons_follow_the_state(browser: Client, conn: Conn) -> None:
    every = ("available", "scheduled", "retryable", "running", "completed", "cancelled", "dead")
    ids = {state: plant(conn, state) for state in every}
    page = get(browser, "/jobs?state=all").text
    for state, job in ids.items():
        retry = f'action="/jobs/{job}/retry"' in page
        cancel = f'action="/jobs/{job}/cancel"' in page
        assert retry == (state in ("dead", "cancelled")), state
        assert cancel == (state in ("available", "scheduled", "retryable", "running", "dead"))
    assert 'method="post"' in page


# --- filters --------------------------------------------------------------------------------------


def test_the_default_list_is_dead_jobs_newest_first(browser: Client, conn: Conn) -> None:
    dead = [plant(conn, "dead") for _ in range(3)]
    plant(conn, "available")
    ids = [int(i) for i in re.findall(r'<a href="/jobs/(\d+)">', get(browser, "/jobs").text)]
    assert ids == sorted(dead, reverse=True)


def test_filters_by_queue_kind_and_state_and_pages_by_id(browser: Client, conn: Conn) -> None:
    mine = [plant(conn, "available", queue="q1", kind="a") for _ in range(5)]
    plant(conn, "available", queue="q2", kind="a")
    plant(conn, "available", queue="q1", kind="b")
    first = get(browser, "/jobs?queue=q1&kind=a&state=available&limit=2").text
    assert [int(i) for i in re.findall(r'<a href="/jobs/(\d+)">', first)] == mine[:-3:-1]
    older = re.search(r'<a href="(/jobs\?[^"]*before=\d+[^"]*)">older', first)
    assert older is not None
    second = get(browser, older.group(1).replace("&amp;", "&")).text
    assert [int(i) for i in re.findall(r'<a href="/jobs/(\d+)">', second)] == mine[2:0:-1]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("state=nope", "state"),
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=-1", "limit"),
        ("limit=ten", "limit"),
        ("before=0", "before"),
        ("before=x", "before"),
        ("queue=" + "q" * 200, "queue"),
        ("kind=%00", "kind"),
        ("args=%7B%22to%22", "args"),  # {"to"
        ("args=%5B1%5D", "args"),  # [1]
        ("args=NaN", "args"),
        ("args=%7B%22a%22%3A%22%5Cu0000%22%7D", "args"),  # {"a":"\u0000"}
        ("args=" + "%7B%7D" * 3000, "args"),
    ],
)
def test_bad_filters_are_400_naming_the_field_without_the_database(
    db_url: str, query: str, field: str
) -> None:
    inspector = drover.Inspector(db_url)
    inspector.close()  # any database call would now fail with a 500
    response = get(Client(make_app(inspector)), f"/jobs?{query}")
    assert response.status_code == 400
    assert f"Bad filter: {field}" in response.text


@pytest.mark.parametrize("limit", ["1", "1000"])
def test_limit_bounds_are_accepted(browser: Client, limit: str) -> None:
    assert get(browser, f"/jobs?limit={limit}").status_code == 200


# --- mutations ------------------------------------------------------------------------------------


def test_retry_and_cancel_redirect_with_a_flash_and_change_the_job(
    browser: Client, conn: Conn
) -> None:
    dead, waiting = plant(conn, "dead"), plant(conn, "available")
    csrf = token(browser)
    message = flash_after(
        browser, post(browser, f"/jobs/{dead}/retry", {"csrf": csrf, "next": "/jobs"})
    )
    assert message == f"Retried job {dead}: it is available again."
    assert state_of(conn, dead) == "available"
    message = flash_after(browser, post(browser, f"/jobs/{waiting}/cancel", {"csrf": csrf}))
    assert message == f"Cancelled job {waiting}."
    assert state_of(conn, waiting) == "cancelled"
    refused = flash_after(browser, post(browser, f"/jobs/{waiting}/cancel", {"csrf": csrf}))
    assert refused == f"Job {waiting} is cancelled; that action does not apply."
    missing = flash_after(browser, post(browser, "/jobs/424242/retry", {"csrf": csrf}))
    assert missing == "Job 424242 does not exist."


def test_retry_all_dead_of_a_kind_and_pause_resume_a_queue(
    browser: Client, conn: Conn, inspector: drover.Inspector
) -> None:
    dead = [plant(conn, "dead", kind="report") for _ in range(3)]
    other = plant(conn, "dead", kind="mail")
    csrf = token(browser)
    # The first post asks: how many it would touch, and a button that confirms.
    asked = post(browser, "/jobs/retry-dead", {"csrf": csrf, "kind": "report", "queue": ""})
    assert asked.status_code == 200
    assert "3 dead job(s) of kind report would go back to the queue" in asked.text
    assert 'name="confirm" value="yes"' in asked.text and "Retry 3 job(s)" in asked.text
    assert {state_of(conn, j) for j in dead} == {"dead"}  # nothing changed yet
    nothing = post(browser, "/jobs/retry-dead", {"csrf": csrf, "kind": "nope", "queue": ""})
    assert "No job of kind nope is dead now" in nothing.text
    assert 'name="confirm"' not in nothing.text
    message = flash_after(
        browser,
        post(
            browser,
            "/jobs/retry-dead",
            {"csrf": csrf, "kind": "report", "queue": "", "confirm": "yes"},
        ),
    )
    assert message == "Retried 3 dead job(s) of kind report."
    assert {state_of(conn, j) for j in dead} == {"available"} and state_of(conn, other) == "dead"
    assert flash_after(
        browser, post(browser, "/queues/pause", {"csrf": csrf, "queue": "mail"})
    ) == ("Paused queue mail.")
    assert [q.name for q in inspector.queues() if q.paused] == ["mail"]
    assert flash_after(
        browser, post(browser, "/queues/resume", {"csrf": csrf, "queue": "mail"})
    ) == ("Resumed queue mail.")
    assert not any(q.paused for q in inspector.queues())


@pytest.mark.parametrize(
    ("origin", "referer", "use_token"),
    [
        ("http://evil.example", None, True),  # another origin
        (None, "http://evil.example/page", True),  # no Origin, foreign Referer
        (None, None, True),  # neither header
        ("null", None, True),  # sandboxed or privacy-stripped origin
        (ORIGIN, None, False),  # same origin, no token
    ],
)
def test_a_mutation_without_same_origin_and_the_token_is_refused_and_changes_nothing(
    browser: Client, conn: Conn, origin: str | None, referer: str | None, use_token: bool
) -> None:
    dead = plant(conn, "dead")
    csrf = token(browser)
    before = table_snapshot(conn)
    headers = {"Referer": referer} if referer else {}
    data = {"csrf": csrf} if use_token else {}
    response = post(browser, f"/jobs/{dead}/retry", data, origin=origin, **headers)
    assert response.status_code == 403
    assert table_snapshot(conn) == before


def test_a_wrong_token_is_refused(browser: Client, conn: Conn) -> None:
    dead = plant(conn, "dead")
    token(browser)
    response = post(browser, f"/jobs/{dead}/retry", {"csrf": "forged"})
    assert response.status_code == 403 and "form token" in response.text
    assert state_of(conn, dead) == "dead"


@pytest.mark.parametrize(
    "path",
    [
        "/jobs/1/retry",
        "/jobs/1/cancel",
        "/queues/pause",
        "/queues/resume",
        "/jobs/retry-dead",
        "/jobs/bulk",
    ],
)
def test_get_on_a_mutation_route_is_405(browser: Client, path: str) -> None:
    response = get(browser, path)
    assert response.status_code == 405
    assert response.headers["Allow"] == "POST"


def test_read_only_shows_no_buttons_and_refuses_mutations(
    inspector: drover.Inspector, conn: Conn
) -> None:
    dead = plant(conn, "dead")
    client = Client(make_app(inspector, read_only=True))
    page = get(client, "/jobs").text
    assert '<form class="inline"' not in page and "<button" in page  # only the filter button
    assert "read-only" in page
    cookie = client.get_cookie("drover_csrf", domain=HOST)
    assert cookie is not None
    response = post(client, f"/jobs/{dead}/retry", {"csrf": cookie.value})
    assert response.status_code == 403
    assert state_of(conn, dead) == "dead"


def test_next_never_redirects_off_the_app(browser: Client, conn: Conn) -> None:
    dead = plant(conn, "dead")
    csrf = token(browser)
    for target in ["http://evil.example/", "//evil.example/x", "/\\evil.example"]:
        response = post(browser, f"/jobs/{dead}/cancel", {"csrf": csrf, "next": target})
        assert response.status_code == 303
        assert response.headers["Location"].startswith("/?"), target


def test_a_redirect_keeps_the_filters_it_came_from_exactly(browser: Client, conn: Conn) -> None:
    dead = plant(conn, "dead", queue="mail & co", kind="a b")
    csrf = token(browser)
    back = "/jobs?kind=a+b&queue=mail+%26+co&state=dead&flash=retried&job=9"
    response = post(browser, f"/jobs/{dead}/retry", {"csrf": csrf, "next": back})
    assert response.headers["Location"] == (
        f"/jobs?kind=a+b&queue=mail+%26+co&state=dead&flash=retried&job={dead}"
    )


def test_an_unknown_flash_code_or_a_bad_id_echoes_nothing(browser: Client) -> None:
    for query in [
        "flash=pwned&job=1",
        f"flash=retried&job={EVIL}",
        "flash=refused&job=1&state_was=x",
    ]:
        page = get(browser, f"/jobs?{query}").text
        assert 'class="flash' not in page, query


def test_the_app_follows_its_mount_point(inspector: drover.Inspector, conn: Conn) -> None:
    dead = plant(conn, "dead")
    client = Client(make_app(inspector))
    page = client.get("/jobs", headers={"Host": HOST}, environ_overrides={"SCRIPT_NAME": "/drover"})
    assert f'href="/drover/jobs/{dead}"' in page.text
    assert f'action="/drover/jobs/{dead}/retry"' in page.text
    prefixed = Client(make_app(inspector, url_prefix="/ops"))
    assert get(prefixed, "/ops/jobs").status_code == 200
    assert get(prefixed, "/jobs").status_code == 404


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"refresh": 0.5}, "refresh must be 0"),
        ({"read_only": "yes"}, "read_only must be True or False"),
        ({"url_prefix": "ops"}, "url_prefix must be empty or start with '/'"),
    ],
)
def test_bad_app_arguments_are_refused(
    inspector: drover.Inspector, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(drover.InvalidArgument, match=message):
        make_app(inspector, **kwargs)


# --- refresh without losing input ----------------------------------------------------------------


def test_only_the_apps_own_script_may_run(browser: Client) -> None:
    directives = dict([*d.split(" ", 1), ""][:2] for d in (p.strip() for p in CSP.split(";")) if d)
    assert directives["script-src"] == "'self'"
    assert directives["connect-src"] == "'self'"
    assert directives["default-src"] == "'none'"
    script = get(browser, "/static/live.js")
    assert script.status_code == 200
    assert script.headers["Content-Type"] == "text/javascript; charset=utf-8"
    assert script.headers["X-Content-Type-Options"] == "nosniff"
    assert "data-live" in script.text and "DOMParser" in script.text
    for path in ["/static/", "/static/app.py", "/static/../app.py", "/static/live.js.map"]:
        assert get(browser, path).status_code == 404, path


def test_pages_refresh_their_live_regions_and_reload_without_javascript_only_without_inputs(
    browser: Client, conn: Conn
) -> None:
    job = plant(conn, "dead")
    for path in ["/", "/workers", f"/jobs/{job}", "/jobs"]:
        page = get(browser, path).text
        assert 'data-refresh="5"' in page, path
        assert '<script src="/static/live.js" defer></script>' in page, path
        assert re.search(r'<div id="[a-z-]+" data-live>', page), path
        # A <noscript> meta refresh where there is nothing to type into; none on the job list.
        assert ('http-equiv="refresh"' in page) == (path != "/jobs"), path
    jobs = get(browser, "/jobs").text
    # The filters sit outside the live region, so a refresh never touches them.
    assert jobs.index('<form class="filters"') < jobs.index('<div id="jobs-live" data-live>')
    assert jobs.index("</form>") < jobs.index('<div id="jobs-live" data-live>')


def test_refresh_zero_turns_every_refresh_off(inspector: drover.Inspector) -> None:
    client = Client(make_app(inspector, refresh=0))
    for path in ["/", "/jobs", "/workers"]:
        page = get(client, path).text
        assert "<script" not in page and "data-refresh" not in page
        assert 'http-equiv="refresh"' not in page


# --- overview, workers, kinds ---------------------------------------------------------------------


def register(
    conn: Conn, client_id: str, queues: list[str], *, expires_in: float = 60, **kw: Any
) -> None:
    conn.execute(
        "INSERT INTO drover_clients (id, client_id, host, pid, version, queues, concurrency, "
        "running, expires_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, "
        "now() + make_interval(secs => %s))",
        (
            f"reg-{client_id}",
            client_id,
            kw.get("host", "box1"),
            kw.get("pid", 4242),
            kw.get("version", "1.2.3"),
            queues,
            kw.get("concurrency", 8),
            kw.get("running", 3),
            expires_in,
        ),
    )


def test_the_overview_flags_a_queue_with_waiting_jobs_and_no_live_worker(
    browser: Client, conn: Conn
) -> None:
    plant(conn, "available", queue="mail")
    plant(conn, "running", queue="bulk")
    register(conn, "gone01", ["mail"], expires_in=-1)  # crashed: does not count
    page = get(browser, "/").text
    assert re.search(r"Queue <a [^>]*>mail</a> has waiting jobs and no live worker", page)
    assert ">0 live workers</a>." in page
    assert "Queue <a" in page and ">bulk</a> has waiting" not in page  # nothing waits there
    register(conn, "live01", ["default", "mail"], running=2, concurrency=5)
    page = get(browser, "/").text
    assert "has waiting jobs and no live worker" not in page
    assert "1 live worker</a>, running 2 job(s) in 5 slot(s)." in page
    assert re.search(r">mail</a></td>(\s*<td[^>]*>[^<]*</td>){7}\s*<td class=\"num\">1</td>", page)
    assert "<th>Paused?</th>" in page and "<title>Overview · drover</title>" in page


def test_the_workers_page_lists_live_clients_escaped(browser: Client, conn: Conn) -> None:
    register(conn, "abc123", ["default", "mail"], host=f"h{EVIL}", pid=777, version="9.9")
    register(conn, "dead99", ["default"], expires_in=-5, host="ghost")
    page = get(browser, "/workers")
    assert page.status_code == 200
    row = re.search(r"<td>abc123</td>.*?</tr>", page.text, re.S)
    assert row is not None
    assert '<td class="num">777</td>' in row.group(0) and "<td>9.9</td>" in row.group(0)
    assert ">mail</a>" in row.group(0) and "s ago</td>" in row.group(0)
    assert EVIL not in page.text and "&lt;script&gt;" in page.text
    assert "ghost" not in page.text and "dead99" not in page.text


def test_the_overview_shows_outcomes_and_run_times_per_kind(browser: Client, conn: Conn) -> None:
    for run in (0.2, 0.4, 3.0):
        conn.execute(
            "INSERT INTO drover_jobs (kind, state, finalized_at, attempted_at, attempt) VALUES "
            "('report', 'completed', now(), now() - make_interval(secs => %s), 1)",
            (run,),
        )
    plant(conn, "dead", kind="report")
    page = get(browser, "/").text
    row = re.search(r">report</a></td>.*?</tr>", page, re.S)
    assert row is not None
    cells = re.findall(r'<td class="num[^"]*">([^<]*)</td>', row.group(0))
    assert cells == ["3", "0", "1", "0", "400 ms", "2.74 s"]  # ..., dead, cancelled, p50, p95


# --- job list: args, bulk -----------------------------------------------------------------------


def test_the_job_list_shows_truncated_args_searches_them_and_shows_when_jobs_died(
    browser: Client, conn: Conn
) -> None:
    ada = plant(conn, "dead", args={"to": "ada@example.com", "body": "x" * 200})
    bob = plant(conn, "dead", args={"to": "bob@example.com"})
    page = get(browser, "/jobs").text
    assert "{&#34;body&#34;: &#34;xxxx" in page and "x" * 100 not in page.split("title=")[0]
    found = get(browser, '/jobs?args={"to": "ada@example.com"}')
    ids = [int(i) for i in re.findall(r'<a href="/jobs/(\d+)">', found.text)]
    assert ids == [ada] and bob not in ids
    assert 'value="{&#34;to&#34;: &#34;ada@example.com&#34;}"' in found.text  # kept as typed
    died = re.search(
        rf'href="/jobs/{ada}".*?<span class="state-dead">died</span> '
        r'<time [^>]*title="([^"]+) UTC">',
        page,
        re.S,
    )
    assert died is not None and re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", died.group(1))
    bad = get(browser, "/jobs?args=[1]")
    assert bad.status_code == 400 and "args must be a JSON object, not list" in bad.text
    # "Retry all dead <kind> jobs" acts on the whole kind: not offered under an args filter.
    every = get(browser, "/jobs?kind=report&state=dead").text
    assert "/jobs/retry-dead" in every
    narrowed = get(browser, '/jobs?kind=report&state=dead&args={"to": "ada@example.com"}').text
    assert "/jobs/retry-dead" not in narrowed and f'href="/jobs/{ada}"' in narrowed


def test_bulk_retry_and_cancel_change_the_selected_jobs_in_one_request(
    browser: Client, conn: Conn
) -> None:
    dead = [plant(conn, "dead") for _ in range(3)]
    running = plant(conn, "running")
    csrf = token(browser)
    page = get(browser, "/jobs?state=all").text
    assert f'<input type="checkbox" name="id" value="{dead[0]}" form="bulk"' in page
    assert '<form class="bulk" id="bulk" method="post" action="/jobs/bulk">' in page
    data = {"csrf": csrf, "action": "retry", "next": "/jobs?state=all"}
    response = browser.post(
        "/jobs/bulk",
        data={**data, "id": [str(dead[0]), str(dead[1]), str(running)]},
        headers={"Host": HOST, "Origin": ORIGIN},
    )
    assert flash_after(browser, response) == "Retried 2 of 3 selected job(s)."
    assert [state_of(conn, j) for j in dead] == ["available", "available", "dead"]
    response = browser.post(
        "/jobs/bulk",
        data={**data, "action": "cancel", "id": [str(j) for j in dead] + [str(running)]},
        headers={"Host": HOST, "Origin": ORIGIN},
    )
    assert flash_after(browser, response) == "Cancelled 3 of 4 selected job(s)."
    assert {state_of(conn, j) for j in dead} == {"cancelled"}
    assert state_of(conn, running) == "running"
    none = post(browser, "/jobs/bulk", {"csrf": csrf, "action": "retry"})
    assert flash_after(browser, none) == "No job was selected."


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"action": "delete", "id": "1"}, "action must be retry or cancel"),
        ({"action": "retry", "id": "x"}, "id must be a job id"),
        ({"action": "retry", "id": "0"}, "id must be a job id"),
    ],
)
def test_a_bad_bulk_request_is_400_and_changes_nothing(
    browser: Client, conn: Conn, data: dict[str, str], message: str
) -> None:
    plant(conn, "dead")
    csrf = token(browser)
    before = table_snapshot(conn)
    response = post(browser, "/jobs/bulk", {"csrf": csrf, **data})
    assert response.status_code == 400 and message in response.text
    assert table_snapshot(conn) == before


def test_bulk_actions_obey_read_only_origin_and_token(
    inspector: drover.Inspector, browser: Client, conn: Conn
) -> None:
    dead = plant(conn, "dead")
    csrf = token(browser)
    before = table_snapshot(conn)
    data = {"csrf": csrf, "action": "retry", "id": str(dead)}
    assert post(browser, "/jobs/bulk", data, origin="http://evil.example").status_code == 403
    assert post(browser, "/jobs/bulk", {**data, "csrf": "forged"}).status_code == 403
    read_only = Client(make_app(inspector, read_only=True))
    page = get(read_only, "/jobs").text
    assert 'type="checkbox"' not in page and 'id="bulk"' not in page
    cookie = read_only.get_cookie("drover_csrf", domain=HOST)
    assert cookie is not None
    assert post(read_only, "/jobs/bulk", {**data, "csrf": cookie.value}).status_code == 403
    assert table_snapshot(conn) == before


# --- tracebacks -----------------------------------------------------------------------------------

TRACE = """Traceback (most recent call last):
  File "/srv/venv/lib/python3.12/site-packages/drover/_runtime/runner.py", line 88, in run
    self._chain(job)
  File "/srv/venv/lib/python3.12/site-packages/drover/middleware.py", line 40, in __call__
    return inner(job)
           ^^^^^^^^^^
  File "/srv/app/jobs.py", line 12, in work
    send(job.args.to)
  File "/srv/app/mail.py", line 3, in send
    raise SMTPError("550 <b>unavailable</b>")
SMTPError: 550 <b>unavailable</b>"""


def test_tracebacks_fold_drovers_frames_and_show_the_users(browser: Client, conn: Conn) -> None:
    job = plant(
        conn,
        "dead",
        errors=[{"attempt": 1, "at": "2030-01-01T00:00:00Z", "error": "E", "trace": TRACE}],
    )
    page = get(browser, f"/jobs/{job}").text
    folded = re.search(
        r'<details class="drover-frames"><summary>2 drover frames</summary>'
        r'<pre class="muted">(.*?)</pre></details>',
        page,
        re.S,
    )
    assert folded is not None
    assert "runner.py" in folded.group(1) and "middleware.py" in folded.group(1)
    assert "jobs.py" not in folded.group(1)
    shown = page.replace(folded.group(0), "")
    assert '  File "/srv/app/jobs.py", line 12, in work' in shown.replace("&#34;", '"')
    assert "SMTPError: 550 &lt;b&gt;unavailable&lt;/b&gt;" in shown and "<b>" not in page


# --- finding a job, reading times -----------------------------------------------------------------


def test_the_jump_box_goes_to_a_jobs_page_and_refuses_what_is_no_id(
    browser: Client, conn: Conn
) -> None:
    job_id = plant(conn, "scheduled")
    for typed in (str(job_id), f"#{job_id}", f"  {job_id} "):
        response = get(browser, "/jump?" + urlencode({"id": typed}))
        assert response.status_code == 303 and response.headers["Location"] == f"/jobs/{job_id}"
    page = get(browser, f"/jobs/{job_id}")
    assert page.status_code == 200
    assert 'action="/jump"' in page.text  # the box is on every page
    for typed in ("abc", "0", "-3", str(2**63), "\uff11\uff12", "9" * 5000, ""):
        refused = get(browser, "/jump?" + urlencode({"id": typed}))
        assert refused.status_code == 400 and "is not a job id" in refused.text


def test_times_read_relative_with_the_utc_time_on_hover(browser: Client, conn: Conn) -> None:
    job_id = plant(conn, "scheduled")  # due in an hour
    page = get(browser, f"/jobs/{job_id}").text
    due = re.search(
        r"<dt>Due</dt><dd><time datetime=\"([^\"]+)\" title=\"([^\"]+) UTC\">([^<]+)</time>", page
    )
    assert due is not None, page
    assert due.group(3) in ("in 59 min", "in 1 h")
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", due.group(2))


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.2, "just now"), (42, "42 s ago"), (185, "3 min ago"), (7300, "2 h ago"),
     (200_000, "2 d ago"), (-180, "in 3 min"), (-3, "in 3 s")],
)  # fmt: skip
def test_relative_times(seconds: float, text: str) -> None:
    assert relative(seconds) == text


def test_a_kinds_page_and_a_queues_page_show_their_own_throughput_and_state(
    browser: Client, conn: Conn
) -> None:
    for _ in range(3):
        plant(conn, "completed", kind="report", queue="mail & co")
    plant(conn, "dead", kind="report", queue="mail & co")
    plant(conn, "completed", kind="other")
    plant(conn, "available", kind="report", queue="mail & co")
    overview = get(browser, "/").text
    assert 'href="/kind/report"' in overview and 'href="/queue/mail%20%26%20co"' in overview

    kind = get(browser, "/kind/report")
    assert kind.status_code == 200 and "<h1>Kind report</h1>" in kind.text
    assert '<p id="totals">3 completed, 0 failed attempt(s), 1 dead.</p>' in kind.text
    cells = re.findall(r"<td class=\"num[^\"]*\">([^<]*)</td>", kind.text.split('id="kind"')[1])
    assert cells[:4] == ["3", "0", "1", "0"]
    assert 'href="/jobs?kind=report&amp;state=dead"' in kind.text
    day = get(browser, "/kind/report?window=day").text
    assert "Throughput, last day (UTC)" in day and "3 completed" in day

    queue = get(browser, "/queue/mail%20%26%20co")
    assert queue.status_code == 200 and "<h1>Queue mail &amp; co</h1>" in queue.text
    assert '<p id="totals">3 completed, 0 failed attempt(s), 1 dead.</p>' in queue.text
    assert 'name="queue" value="mail &amp; co"' in queue.text  # its pause button
    assert "other" not in queue.text.split("<main>")[1]

    quiet = get(browser, "/queue/nothing-here").text
    assert "No job of queue nothing-here waits" in quiet
    assert get(browser, "/kind/" + "x" * 300).status_code == 400
