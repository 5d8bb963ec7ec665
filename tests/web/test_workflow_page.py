"""The status page's workflow view and the job page's result and links, on a real database."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from jobdb import MakeClient
from test_app import EVIL, get, plant
from werkzeug.test import Client

import drover
from drover.web import make_app
from drover.web.app import CSP
from drover.web.workflow import MAX_DRAWN

Conn = psycopg.Connection[tuple[Any, ...]]


class Step(drover.JobArgs, kind="wfweb_step"):
    name: str


@pytest.fixture
def inspector(db_url: str) -> Iterator[drover.Inspector]:
    with drover.Inspector(db_url) as i:
        yield i


@pytest.fixture
def browser(inspector: drover.Inspector) -> Client:
    return Client(make_app(inspector))


def _insert(make_client: MakeClient, workflow: drover.Chain | drover.Group) -> list[int]:
    inserted = make_client().insert(workflow)
    assert isinstance(inserted, drover.InsertedWorkflow)
    return [r.id for r in inserted.jobs]


def _complete(conn: Conn, job_id: int, result: str) -> None:
    """What the fenced completion leaves: completed, finalized, the result stored."""
    conn.execute(
        "UPDATE drover_jobs SET state = 'completed', attempt = 1, finalized_at = now(), "
        "result = %s::jsonb WHERE id = %s",
        (result, job_id),
    )


def _nodes(page: str) -> dict[int, str]:
    """Each drawn job's id and the state class of its box."""
    return {
        int(job): state
        for state, job in re.findall(r'<a class="node state-(\w+)" data-job="(\d+)"', page)
    }


def _edges(page: str) -> set[tuple[int, int]]:
    return {(int(a), int(b)) for a, b in re.findall(r'data-from="(\d+)" data-to="(\d+)"', page)}


def _box_x(page: str, job: int) -> int:
    found = re.search(rf'data-job="{job}" href="[^"]*"><title>[^<]*</title><rect x="(\d+)"', page)
    assert found is not None
    return int(found.group(1))


def test_a_chords_workflow_page_draws_each_job_linked_and_coloured_with_its_edges(
    browser: Client, make_client: MakeClient, conn: Conn
) -> None:
    a, b, c, callback = _insert(
        make_client, drover.group(*(Step(name=n) for n in "abc")).then(Step(name="cb"))
    )
    _complete(conn, a, '{"n": 1}')
    conn.execute("UPDATE drover_jobs SET state = 'dead', finalized_at = now() WHERE id = %s", (b,))

    page = get(browser, f"/workflows/{callback}")  # any job of it names the workflow
    assert page.status_code == 200
    assert page.headers["Content-Security-Policy"] == CSP
    text = page.text
    assert f"<h1>Workflow {a} " in text and '<span class="state-failed">failed</span>' in text
    assert _nodes(text) == {a: "completed", b: "dead", c: "available", callback: "pending"}
    assert _edges(text) == {(a, callback), (b, callback), (c, callback)}
    for job in (a, b, c, callback):
        assert f'data-job="{job}" href="/jobs/{job}"' in text
    # The members share the first column; the callback is one column right.
    assert _box_x(text, a) == _box_x(text, b) == _box_x(text, c) < _box_x(text, callback)
    assert "<script" not in text.split("<svg", 1)[1].split("</svg>", 1)[0]
    # The table lists every job with its layer and what it waits for.
    assert re.search(rf">{callback}</a></td><td>wfweb_step</td>.*?<td class=\"num\">2</td>"
                     rf"<td>{a}-{c}</td>", text)  # fmt: skip
    assert "workflow-capped" not in text


def test_layers_follow_the_longest_path_from_the_roots(
    browser: Client, make_client: MakeClient
) -> None:
    a, b, c, d, e = _insert(
        make_client,
        drover.chain(
            Step(name="a"),
            drover.group(Step(name="b"), drover.chain(Step(name="c"), Step(name="d"))),
            Step(name="e"),
        ),
    )
    text = get(browser, f"/workflows/{a}").text
    xs = {job: _box_x(text, job) for job in (a, b, c, d, e)}
    assert xs[a] < xs[b] == xs[c] < xs[d] < xs[e]
    for source, target in _edges(text):
        assert xs[source] < xs[target]  # every line runs forwards


def test_user_data_is_escaped_in_the_drawing_and_the_job_page(
    browser: Client, make_client: MakeClient, conn: Conn
) -> None:
    first, _ = _insert(make_client, drover.chain(Step(name="x"), Step(name="y")))
    conn.execute("UPDATE drover_jobs SET kind = %s WHERE id = %s", (f"k{EVIL}", first))
    _complete(conn, first, json.dumps({"html": EVIL}))

    drawing = get(browser, f"/workflows/{first}").text
    assert EVIL not in drawing
    assert "k&lt;script&gt;alert(&#39;x&#39;)&lt;/sc\u2026" in drawing  # cut at 24 characters
    job = get(browser, f"/jobs/{first}").text
    assert EVIL not in job
    assert '<pre id="result">{\n  &#34;html&#34;: &#34;&lt;script&gt;' in job


def test_the_job_page_shows_the_result_and_links_the_workflow_and_its_neighbours(
    browser: Client, make_client: MakeClient, conn: Conn
) -> None:
    a, b, c, callback = _insert(
        make_client, drover.group(*(Step(name=n) for n in "abc")).then(Step(name="cb"))
    )
    _complete(conn, a, '{"rows": [1, 2], "ok": true}')

    member = get(browser, f"/jobs/{a}").text
    assert f'<a id="workflow-link" href="/workflows/{a}">Workflow {a}</a>' in member
    assert '<dd id="waits-for">nothing</dd>' in member
    assert f'<dd id="needed-by"><a href="/jobs/{callback}">{callback}</a></dd>' in member
    assert '<pre id="result">{\n  &#34;ok&#34;: true,\n  &#34;rows&#34;: [\n    1,' in member

    waiting = get(browser, f"/jobs/{callback}").text
    links = re.search(r'<dd id="waits-for">(.*?)</dd>', waiting)
    assert links is not None
    assert re.findall(r'href="/jobs/(\d+)"', links.group(1)) == [str(a), str(b), str(c)]
    assert 'id="result"' not in waiting  # not completed: no result section

    alone = plant(conn, "completed")
    page = get(browser, f"/jobs/{alone}").text
    assert "workflow-link" not in page and "waits-for" not in page
    assert '<pre id="result">null</pre>' in page  # completed, its handler returned nothing


@pytest.mark.parametrize("path", ["/workflows/{alone}", "/workflows/0", "/workflows/987654",
                                  f"/workflows/{2**63}", "/workflows/1x"])  # fmt: skip
def test_no_workflow_is_a_404(browser: Client, conn: Conn, path: str) -> None:
    alone = plant(conn, "available")
    page = get(browser, path.format(alone=alone))
    assert page.status_code == 404
    assert "Not found" in page.text


def test_a_large_workflow_draws_its_first_jobs_and_says_how_many_more(
    browser: Client, make_client: MakeClient
) -> None:
    ids = _insert(
        make_client,
        drover.chain(Step(name="start"), drover.group(*(Step(name=f"m{n}") for n in range(999)))),
    )
    assert len(ids) == 1000
    text = get(browser, f"/workflows/{ids[-1]}").text
    drawn = _nodes(text)
    assert len(drawn) == MAX_DRAWN
    assert set(drawn) == set(ids[:MAX_DRAWN])  # layer by layer, in id order
    assert len(_edges(text)) == MAX_DRAWN - 1  # one line from the start to each drawn member
    capped = re.search(r'<p class="flag" id="workflow-capped">(.*?)</p>', text)
    assert capped is not None
    assert capped.group(1) == (
        f"Drawn: the first {MAX_DRAWN} jobs, column by column; 700 more are not drawn "
        "(the table lists them)."
    )
    assert len(re.findall(r'<tr><td class="num"><a href="/jobs/', text)) == 1000


# --- the workflows index ----------------------------------------------------------------------


def test_the_workflows_index_lists_the_newest_with_their_jobs_by_state_and_pages(
    browser: Client, inspector: drover.Inspector, make_client: MakeClient, conn: Conn
) -> None:
    assert "No workflow" in get(browser, "/workflows").text
    done = _insert(make_client, drover.chain(Step(name="a"), Step(name="b")))
    for job_id in done:
        _complete(conn, job_id, "1")
    broken = _insert(make_client, drover.chain(Step(name="c"), Step(name="d"), Step(name="e")))
    conn.execute(
        "UPDATE drover_jobs SET state = 'dead', finalized_at = now() WHERE id = %s", (broken[0],)
    )
    running = _insert(make_client, drover.group(Step(name="f"), Step(name="g")))
    plant(conn, "available")  # a job of no workflow: not listed

    listed = inspector.workflows()
    assert [w.id for w in listed] == [running[0], broken[0], done[0]]
    fresh, dead, finished = listed
    assert (finished.jobs, finished.completed, finished.state) == (2, 2, "completed")
    assert (dead.jobs, dead.dead, dead.waiting, dead.state) == (3, 1, 2, "failed")
    assert (fresh.jobs, fresh.waiting, fresh.state, fresh.first_kind) == (
        2,
        2,
        "running",
        "wfweb_step",
    )
    assert [w.id for w in inspector.workflows(limit=1, before=broken[0])] == [done[0]]
    with pytest.raises(drover.InvalidArgument, match="limit must be an int"):
        inspector.workflows(limit=0)

    page = get(browser, "/workflows")
    assert page.status_code == 200
    rows = re.findall(r'<a href="/workflows/(\d+)">', page.text)
    assert [int(r) for r in rows] == [running[0], broken[0], done[0]]
    assert '<td class="state-failed">failed</td>' in page.text
    assert 'href="/workflows"' in get(browser, "/").text  # in the header of every page
    older = get(browser, f"/workflows?before={broken[0]}")
    assert [int(r) for r in re.findall(r'<a href="/workflows/(\d+)">', older.text)] == [done[0]]
    assert get(browser, "/workflows?before=abc").status_code == 400
    assert get(browser, "/workflows?before=" + "9" * 5000).status_code == 400
