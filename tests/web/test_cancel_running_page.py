"""The status page's Cancel on a running job (ADR 0030), through its WSGI interface."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from clihelp import cli, ok
from jobdb import table_snapshot
from werkzeug.test import Client, TestResponse

import drover
from drover._db.claims import job_claim
from drover.web import make_app

Conn = psycopg.Connection[tuple[Any, ...]]
HOST = "status.example"
ORIGIN = f"http://{HOST}"


@pytest.fixture
def inspector(db_url: str) -> Iterator[drover.Inspector]:
    with drover.Inspector(db_url) as i:
        yield i


def _get(client: Client, path: str) -> TestResponse:
    return client.get(path, headers={"Host": HOST})


def _post(client: Client, path: str, data: dict[str, str]) -> TestResponse:
    return client.post(path, data=data, headers={"Host": HOST, "Origin": ORIGIN})


def _running(inspector: drover.Inspector, conn: Conn) -> int:
    job = inspector.enqueue("report", "{}")
    (claimed,) = job_claim(conn, "default", 1, 60.0)
    assert claimed.id == job.id
    return job.id


def _request(conn: Conn, job_id: int) -> Any:
    row = conn.execute("SELECT cancel_request FROM drover_jobs WHERE id = %s", (job_id,))
    found = row.fetchone()
    assert found is not None
    return found[0]


def test_a_running_job_page_offers_cancel_with_a_reason_and_the_post_asks_its_worker(
    inspector: drover.Inspector, conn: Conn
) -> None:
    browser = Client(make_app(inspector))
    job_id = _running(inspector, conn)
    page = _get(browser, f"/jobs/{job_id}").text
    form = re.search(
        rf'<form class="inline" method="post" action="/jobs/{job_id}/cancel">(.*?)</form>',
        page,
        re.S,
    )
    assert form is not None, page
    assert 'name="reason"' in form.group(1)
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.group(1))
    assert csrf is not None
    response = _post(
        browser,
        f"/jobs/{job_id}/cancel",
        {"csrf": csrf.group(1), "next": f"/jobs/{job_id}", "reason": "  <b>bad</b> run  "},
    )
    assert response.status_code == 303, response.text
    shown = _get(browser, response.headers["Location"]).text
    assert (
        f"Job {job_id} is running: its worker was asked to cancel it, and it ends cancelled "
        "when its attempt ends."
    ) in shown
    assert "<b>bad</b>" not in shown
    assert inspector.get_job(job_id).state is drover.JobState.RUNNING
    assert _request(conn, job_id)["reason"] == "<b>bad</b> run"


def test_a_reason_too_long_is_refused_and_nothing_is_written(
    inspector: drover.Inspector, conn: Conn
) -> None:
    browser = Client(make_app(inspector))
    job_id = _running(inspector, conn)
    page = _get(browser, f"/jobs/{job_id}").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert csrf is not None
    before = table_snapshot(conn)
    response = _post(
        browser, f"/jobs/{job_id}/cancel", {"csrf": csrf.group(1), "reason": "x" * 1001}
    )
    assert response.status_code == 400
    assert "reason must be at most 1000 characters" in response.text
    assert table_snapshot(conn) == before


def test_a_read_only_page_offers_no_cancel_and_refuses_the_post(
    inspector: drover.Inspector, conn: Conn
) -> None:
    browser = Client(make_app(inspector, read_only=True))
    job_id = _running(inspector, conn)
    assert "/cancel" not in _get(browser, f"/jobs/{job_id}").text
    before = table_snapshot(conn)
    response = _post(browser, f"/jobs/{job_id}/cancel", {"csrf": "x", "reason": "no"})
    assert response.status_code == 403
    assert table_snapshot(conn) == before


def test_a_pending_cancel_request_shows_on_the_job_the_cli_and_the_page(
    inspector: drover.Inspector, db_url: str
) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        job_id = _running(inspector, conn)
        idle = inspector.enqueue("report", "{}")
        assert inspector.get_job(job_id).cancel_request is None
        inspector.cancel_job(job_id, reason="wrong customer", hard=True, grace=5)
        request = inspector.get_job(job_id).cancel_request
        assert request is not None
        assert (request.reason, request.hard, request.grace.total_seconds()) == (
            "wrong customer",
            True,
            5.0,
        )
        assert request.requested_at is not None
        assert inspector.get_job(idle.id).cancel_request is None
        # Listings do not read it: only get_job does.
        assert all(r.cancel_request is None for r in inspector.list_jobs())

        text = ok(cli(db_url, "jobs", "get", str(job_id)))
        assert "cancel requested at " in text and ": wrong customer (hard" in text
        shown = ok(cli(db_url, "--json", "jobs", "get", str(job_id)))
        assert '"reason": "wrong customer"' in shown
        page = _get(Client(make_app(inspector)), f"/jobs/{job_id}").get_data(as_text=True)
        assert 'id="cancel-request"' in page and "wrong customer" in page
        plain = _get(Client(make_app(inspector)), f"/jobs/{idle.id}").get_data(as_text=True)
        assert 'id="cancel-request"' not in plain
