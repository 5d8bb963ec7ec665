"""The status page's limits: the page, its set and clear forms, on a real database."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from test_app import EVIL, HOST, flash_after, get, plant, post, token
from werkzeug.test import Client

import drover
from drover._db.limits import limit_declare
from drover.limits import Limit, parse_limit_key
from drover.web import make_app
from drover.web.app import CSP

Conn = psycopg.Connection[tuple[Any, ...]]
JUMP = re.compile(r'<form class="jump" [^>]*>.*?</form>')
"""The header's box to jump to a job id: a GET form on every page, read-only too."""


@pytest.fixture
def inspector(db_url: str) -> Iterator[drover.Inspector]:
    with drover.Inspector(db_url) as i:
        yield i


@pytest.fixture
def browser(inspector: drover.Inspector) -> Client:
    return Client(make_app(inspector))


def _declare(conn: Conn, key: str, **values: Any) -> None:
    """What a starting client writes for a limit its code declares."""
    parsed = parse_limit_key(key)
    limit_declare(conn, [(parsed, Limit(partition_by=parsed.partition_by, **values))])


def _rows(conn: Conn) -> list[tuple[Any, ...]]:
    """The limit rows with xmin: any write changes the result."""
    return conn.execute("SELECT xmin::text, * FROM drover_limits ORDER BY id").fetchall()


def _row(page: str, key: str) -> list[str]:
    """The text of each cell of the limit's row, tags removed and spaces collapsed."""
    found = re.search(rf'<tr data-key="{re.escape(html.escape(key))}">(.*?)</tr>', page, re.S)
    assert found is not None, page
    cells = re.findall(r"<td[^>]*>(.*?)</td>", found.group(1), re.S)
    return [" ".join(html.unescape(re.sub(r"<[^>]+>", " ", c)).split()) for c in cells]


def _form_values(page: str) -> dict[str, str]:
    form = re.search(r'<form method="post" action="/limits/set".*?</form>', page, re.S)
    assert form is not None
    return {
        name: html.unescape(value)
        for name, value in re.findall(r'<input name="(\w+)"[^>]*? value="([^"]*)"', form.group(0))
    }


# --- the page ---------------------------------------------------------------------------------


def test_the_limits_page_is_in_the_navigation_and_hardened(browser: Client) -> None:
    overview = get(browser, "/").text
    assert '<a href="/limits">Limits</a>' in overview
    page = get(browser, "/limits")
    assert page.status_code == 200
    assert page.headers["Content-Security-Policy"] == CSP
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    assert "No limits: no code declares one and no operator set one." in page.text
    # The table refreshes in place; the form is outside it, and never reloads.
    assert '<div id="limits-live" data-live>' in page.text
    live = page.text.split('<div id="limits-live" data-live>', 1)[1].split("</div>", 1)[0]
    assert "<form" not in live.replace('<form class="inline"', "")
    assert "http-equiv" not in page.text


def test_each_limit_shows_its_use_against_its_values_and_who_set_them(
    browser: Client, conn: Conn, inspector: drover.Inspector
) -> None:
    _declare(conn, "kind:render", concurrency=2, rate=10, per="minute")
    _declare(conn, "kind:sync[tenant]", concurrency=1)
    _declare(conn, "queue:bulk", rate=30, per="hour")
    for _ in range(2):
        plant(conn, "running", kind="render")
    plant(conn, "running", kind="sync", args={"tenant": "acme"})
    plant(conn, "running", kind="sync", args={"tenant": "initech"})
    plant(conn, "running", kind="sync", args={})
    inspector.set_limit("queue:bulk", rate=60)
    inspector.set_limit("queue:reports", concurrency=3)

    page = get(browser, "/limits").text

    assert _row(page, "kind:render") == [
        "kind:render",
        "2 / 2",
        "0 / 10 per minute",
        "at its limit",
        "code",
        "Change",
    ]
    assert _row(page, "kind:sync[tenant]")[1:4] == [
        "3 / 1 each",  # the limit holds per partition; the running count is the total
        "\u2013",
        'by tenant : 3 in use, 3 at their limit "acme" 1 running, 0 started full '
        '"initech" 1 running, 0 started full null 1 running, 0 started full',
    ]
    assert _row(page, "queue:bulk")[2:5] == [
        "0 / 60 per hour",
        "whole queue",
        "operator override (code: rate 30 per hour)",
    ]
    assert _row(page, "queue:reports")[4:] == [
        "operator (no code declares it)",
        "Change Remove",
    ]
    assert 'class="num warn">2 / 2</td>' in page  # at the cap: flagged
    assert 'class="num">3 / 1 each</td>' in page  # per partition: the Partitions cell flags
    assert 'href="/jobs?kind=render&amp;state=all"' in page
    assert 'href="/jobs?queue=bulk&amp;state=all"' in page


def test_names_are_escaped(browser: Client, inspector: drover.Inspector) -> None:
    inspector.set_limit(f"kind:{EVIL}", concurrency=1)
    page = get(browser, "/limits").text
    assert EVIL not in page
    assert "kind:&lt;script&gt;alert(" in page


def test_change_fills_the_form_with_the_limits_values(
    browser: Client, conn: Conn, inspector: drover.Inspector
) -> None:
    _declare(conn, "kind:call[account]", concurrency=2, rate=90, per=90)
    values = _form_values(get(browser, "/limits?key=kind:call%5Baccount%5D").text)
    assert values == {"key": "kind:call[account]", "concurrency": "2", "rate": "90", "per": "90s"}
    empty = {"key": "", "concurrency": "", "rate": "", "per": ""}
    assert _form_values(get(browser, "/limits?key=kind:nope").text) == empty | {"key": "kind:nope"}
    assert _form_values(get(browser, "/limits?key=%3Cb%3E").text) == empty


# --- set and clear ----------------------------------------------------------------------------


def test_the_set_form_overrides_only_the_values_filled_in(
    browser: Client, conn: Conn, inspector: drover.Inspector
) -> None:
    _declare(conn, "kind:render", concurrency=2, rate=10, per="minute")
    csrf = token(browser)
    response = post(
        browser,
        "/limits/set",
        {"csrf": csrf, "key": "kind:render", "concurrency": "5", "rate": "", "per": ""},
    )
    assert flash_after(browser, response) == (
        "Set limit kind:render: every client follows from its next claim."
    )
    (state,) = inspector.limits()
    assert (state.concurrency, state.rate, state.override) == (5, 10, Limit(concurrency=5))

    response = post(
        browser,
        "/limits/set",
        {"csrf": csrf, "key": " queue:new ", "rate": "3", "per": "hour", "next": "/limits"},
    )
    assert response.headers["Location"].startswith("/limits?")
    assert [(str(s.key), s.rate) for s in inspector.limits()] == [
        ("kind:render", 10),
        ("queue:new", 3),
    ]


def test_clear_returns_to_the_declaration_removes_an_undeclared_limit_or_says_nothing_changed(
    browser: Client, conn: Conn, inspector: drover.Inspector
) -> None:
    _declare(conn, "kind:render", concurrency=2)
    inspector.set_limit("kind:render", concurrency=7)
    inspector.set_limit("queue:new", rate=3)
    csrf = token(browser)

    cleared = post(browser, "/limits/clear", {"csrf": csrf, "key": "kind:render"})
    assert flash_after(browser, cleared) == (
        "Cleared the override of kind:render: the values its code declares apply."
    )
    removed = post(browser, "/limits/clear", {"csrf": csrf, "key": "queue:new"})
    assert flash_after(browser, removed) == "Removed limit queue:new: no code declares it."
    unchanged = post(browser, "/limits/clear", {"csrf": csrf, "key": "kind:render"})
    assert flash_after(browser, unchanged) == "Limit kind:render has no override to clear."
    page = get(browser, unchanged.headers["Location"]).text
    assert '<p class="flash error" role="status">' in page
    assert [(str(s.key), s.concurrency, s.override) for s in inspector.limits()] == [
        ("kind:render", 2, None)
    ]


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"key": "tenant:x", "concurrency": "1"}, "queue:NAME or kind:NAME"),
        ({"key": "", "concurrency": "1"}, "queue:NAME or kind:NAME"),
        ({"key": "kind:a[b.c]", "concurrency": "1"}, "top-level args field"),
        ({"key": "kind:a"}, "override needs concurrency="),
        ({"key": "kind:a", "concurrency": "lots"}, "concurrency must be a whole number"),
        ({"key": "kind:a", "concurrency": "-1"}, "concurrency must be a whole number"),
        ({"key": "kind:a", "concurrency": "0"}, "concurrency must be between 1 and"),
        ({"key": "kind:a", "rate": "99999999999"}, "rate must be a whole number from 1"),
        ({"key": "kind:a", "rate": "5", "per": "fortnight"}, "per must be second, minute, hour"),
        ({"key": "kind:a", "rate": "5", "per": "0"}, "per must be more than 0"),
        ({"key": "kind:a", "concurrency": "1", "per": "minute"}, "per= is the period of rate="),
        ({"key": "kind:" + "k" * 700, "concurrency": "1"}, "longer than 600 characters"),
    ],
)
def test_bad_form_input_is_a_400_naming_it_and_writes_nothing(
    browser: Client, conn: Conn, form: dict[str, str], message: str
) -> None:
    _declare(conn, "kind:a", concurrency=2)
    before = _rows(conn)
    response = post(browser, "/limits/set", {"csrf": token(browser), **form})
    assert response.status_code == 400
    assert html.escape(message, quote=False) in response.text
    assert _rows(conn) == before


def test_a_bad_key_to_clear_is_a_400(browser: Client, conn: Conn) -> None:
    response = post(browser, "/limits/clear", {"csrf": token(browser), "key": "kind:a\x00"})
    assert response.status_code == 400 and "NUL" in response.text
    assert _rows(conn) == []


@pytest.mark.parametrize("path", ["/limits/set", "/limits/clear"])
def test_limit_forms_are_post_only_same_origin_and_need_the_token(
    browser: Client, conn: Conn, path: str
) -> None:
    _declare(conn, "kind:a", concurrency=2)
    conn.execute("UPDATE drover_limits SET override_concurrency = 4, overridden_at = now()")
    before = _rows(conn)
    form = {"key": "kind:a", "concurrency": "9"}
    assert get(browser, path).status_code == 405
    csrf = token(browser)
    assert post(browser, path, form).status_code == 403  # no token
    assert post(browser, path, {**form, "csrf": "forged"}).status_code == 403
    cross = post(browser, path, {**form, "csrf": csrf}, origin="http://evil.example")
    assert cross.status_code == 403
    assert _rows(conn) == before


def test_read_only_shows_the_limits_without_forms_and_refuses_changes(
    inspector: drover.Inspector, conn: Conn
) -> None:
    _declare(conn, "kind:a", concurrency=2)
    inspector.set_limit("kind:a", concurrency=4)
    before = _rows(conn)
    client = Client(make_app(inspector, read_only=True))
    page = get(client, "/limits").text
    assert _row(page, "kind:a")[:2] == ["kind:a", "0 / 4"]
    # No form but the header's jump box (a GET that changes nothing).
    assert "<form" not in JUMP.sub("", page) and "Change" not in page
    cookie = client.get_cookie("drover_csrf", domain=HOST)
    assert cookie is not None
    for path in ("/limits/set", "/limits/clear"):
        response = post(client, path, {"csrf": cookie.value, "key": "kind:a", "concurrency": "9"})
        assert response.status_code == 403
    assert _rows(conn) == before


@pytest.mark.parametrize("limit", ["", "nope", "kind:", "<b>x</b>"])
def test_a_flash_naming_no_limit_shows_nothing(browser: Client, limit: str) -> None:
    page = browser.get("/limits", query_string={"flash": "limit_set", "limit": limit})
    assert 'class="flash' not in page.text
