"""The status page: progress, metadata and tags on a job, the job list by tags (ADR 0032)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from werkzeug.test import Client, TestResponse

import drover
from drover.web import make_app

Conn = psycopg.Connection[tuple[Any, ...]]
HOST = "status.example"
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


def plant(conn: Conn, *, tags: list[str], meta: Any = None, progress: float | None = None,
          message: str | None = None) -> int:  # fmt: skip
    row = conn.execute(
        "INSERT INTO drover_jobs (kind, queue, args, state, tags, meta, progress, "
        "progress_message, attempt, leased_until) VALUES ('report', 'default', '{}', 'running', "
        "%s, %s::jsonb, %s, %s, 1, now() + interval '1 hour') RETURNING id",
        (tags, json.dumps(meta or {}), progress, message),
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_the_job_page_shows_progress_metadata_and_tags(browser: Client, conn: Conn) -> None:
    job = plant(conn, tags=["billing", "eu"], meta={"owner": EVIL}, progress=0.42, message=EVIL)
    page = get(browser, f"/jobs/{job}")
    assert page.status_code == 200
    assert '<progress max="1" value="0.42">' in page.text
    assert "42%" in page.text
    assert EVIL not in page.text  # escaped, like everything the handler wrote
    assert "&lt;script&gt;" in page.text
    assert 'id="meta"' in page.text and "owner" in page.text
    assert "billing" in page.text and "/jobs?tags=billing&amp;state=all" in page.text


def test_a_job_without_progress_shows_none(browser: Client, conn: Conn) -> None:
    job = plant(conn, tags=[])
    page = get(browser, f"/jobs/{job}")
    assert "<progress" not in page.text and 'id="meta"' not in page.text


def test_the_job_list_filters_by_every_tag_given(browser: Client, conn: Conn) -> None:
    both = plant(conn, tags=["billing", "eu"])
    one = plant(conn, tags=["billing"])
    other = plant(conn, tags=["eu"])

    def listed(query: str) -> set[int]:
        page = get(browser, f"/jobs?state=all&{query}")
        assert page.status_code == 200, page.text
        return {j for j in (both, one, other) if f'href="/jobs/{j}"' in page.text}

    assert listed("tags=billing") == {both, one}
    assert listed("tags=billing,eu") == {both}
    assert listed("tags=") == {both, one, other}
    assert 'value="billing,eu"' in get(browser, "/jobs?state=all&tags=billing,eu").text


def test_a_bad_tag_filter_is_a_400_naming_it(browser: Client) -> None:
    page = get(browser, "/jobs?tags=" + "x" * 65)
    assert page.status_code == 400
    assert "tags" in page.text and "the maximum is 64" in page.text
