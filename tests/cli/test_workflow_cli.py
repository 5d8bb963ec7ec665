"""``drover workflow show`` on a real database, in-process and as a real process."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import psycopg
import pytest
from clihelp import cli, ok, one_line, refused, run
from jobdb import MakeClient, Poll, table_snapshot
from test_cli import PASSWORD, UNREACHABLE, put

import drover

Conn = psycopg.Connection[tuple[Any, ...]]
LONG = "a long\nresult " + "x" * 80
CUT = ['"a', "long\\nresult", "x" * 43 + "\u2026"]
"""LONG's preview, split on spaces: the newline escaped, cut at 60 characters."""


class Fetch(drover.JobArgs, kind="wfcli_fetch"):
    url: str


class Count(drover.JobArgs, kind="wfcli_count"):
    pass


class Report(drover.JobArgs, kind="wfcli_report", queue="later"):
    """On a queue the test's client does not work: it stays available."""


class Step(drover.JobArgs, kind="wfcli_step"):
    name: str


def _state(conn: Conn, job_id: int) -> str:
    row = conn.execute("SELECT state::text FROM drover_jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return str(row[0])


@pytest.fixture
def chord(make_client: MakeClient, poll: Poll, conn: Conn) -> drover.InsertedWorkflow:
    """chain(group(3 fetches).then(count), report, report), run up to the first report.

    The count waits on a gate until the test has seen it running, so the run
    goes through every state a chord's callback passes.
    """
    workers = drover.Workers()
    gate = threading.Event()

    @workers.register
    def fetch(job: drover.Job[Fetch]) -> Any:
        if job.args.url.endswith("c"):
            return LONG  # a newline, and more than a preview holds
        return {"size": len(job.args.url)}

    @workers.register
    def count(job: drover.Job[Count]) -> int:
        gate.wait(20)
        return len(job.parent_results())

    client = make_client(workers=workers, poll_interval=0.1)
    client.start()
    fetches = drover.group(*(Fetch(url=f"https://x/{n}") for n in ("a", "bb", "c")))
    inserted = client.insert(drover.chain(fetches.then(Count()), Report(), Report()))
    assert isinstance(inserted, drover.InsertedWorkflow)
    callback = inserted.jobs[3].id
    try:
        poll(lambda: _state(conn, callback) == "running", message="the callback starts last")
    finally:
        gate.set()
    poll(lambda: _state(conn, callback) == "completed", message="the callback completes")
    client.stop(timeout=5)
    return inserted


def test_show_prints_a_chord_in_layers_with_states_waits_and_result_previews(
    db_url: str, chord: drover.InsertedWorkflow
) -> None:
    a, b, c, count, report, last = (r.id for r in chord.jobs)
    stdout = ok(cli(db_url, "workflow", "show", str(count)))
    lines = stdout.splitlines()
    waits_all = ["waits", "for", f"{a}-{c}"]  # the group's members, folded
    assert lines[0] == (f"workflow {a}: running, 6 jobs (1 pending, 1 available, 4 completed)")
    assert [line.split() for line in lines[1:]] == [
        ["layer", "1", "(starts", "first)"],
        [str(a), "wfcli_fetch", "completed", "attempt", "1", "result", '{"size":11}'],
        [str(b), "wfcli_fetch", "completed", "attempt", "1", "result", '{"size":12}'],
        [str(c), "wfcli_fetch", "completed", "attempt", "1", "result", *CUT],
        ["layer", "2"],
        [str(count), "wfcli_count", "completed", "attempt", "1", *waits_all, "result", "3"],
        ["layer", "3"],
        [str(report), "wfcli_report", "available", "attempt", "0", "waits", "for", str(count)],
        ["layer", "4"],
        [str(last), "wfcli_report", "pending", "attempt", "0", "waits", "for", str(report)],
    ]
    # The columns line up: every job line has its kind at the same offset.
    job_lines = [line for line in lines[1:] if not line.startswith("layer")]
    assert len({line.index("wfcli_") for line in job_lines}) == 1
    # Any job of the workflow shows the same workflow.
    assert ok(cli(db_url, "workflow", "show", str(last))) == stdout


def test_show_json_gives_every_job_with_its_dependencies_and_completed_results(
    db_url: str, chord: drover.InsertedWorkflow
) -> None:
    a, b, c, count, report, last = (r.id for r in chord.jobs)
    document = json.loads(ok(cli(db_url, "--json", "workflow", "show", str(b))))
    assert list(document) == ["id", "state", "jobs"]
    assert (document["id"], document["state"]) == (a, "running")
    common = {"kind": "wfcli_fetch", "queue": "default", "state": "completed", "attempt": 1}
    assert document["jobs"] == [
        {"id": a, **common, "depends_on": [], "result": {"size": 11}},
        {"id": b, **common, "depends_on": [], "result": {"size": 12}},
        {"id": c, **common, "depends_on": [], "result": LONG},
        {"id": count, **common, "kind": "wfcli_count", "depends_on": [a, b, c], "result": 3},
        {
            "id": report,
            "kind": "wfcli_report",
            "queue": "later",
            "state": "available",
            "attempt": 0,
            "depends_on": [count],
        },
        {
            "id": last,
            "kind": "wfcli_report",
            "queue": "later",
            "state": "pending",
            "attempt": 0,
            "depends_on": [report],
        },
    ]


def test_layers_follow_the_longest_path_and_fold_a_groups_ids(
    db_url: str, make_client: MakeClient, conn: Conn
) -> None:
    outside = put(conn, "running", kind="wfcli_step")
    client = make_client()
    # a, then b beside the chain c -> d, then e (after both), then a group of
    # three after a group of two: each of the three waits for both.
    inserted = client.insert(
        drover.chain(
            (Step(name="a"), drover.InsertOpts(depends_on=[outside])),
            drover.group(Step(name="b"), drover.chain(Step(name="c"), Step(name="d"))),
            Step(name="e"),
            drover.group(Step(name="f1"), Step(name="f2")),
            drover.group(Step(name="g1"), Step(name="g2"), Step(name="g3")),
        )
    )
    assert isinstance(inserted, drover.InsertedWorkflow)
    ids = {r.args["name"]: r.id for r in inserted.jobs}
    stdout = ok(cli(db_url, "workflow", "show", str(ids["g2"])))
    layered = [line.split()[0] for line in stdout.splitlines()[1:]]
    name_of = {str(v): k for k, v in ids.items()}
    assert [name_of.get(token, token) for token in layered] == [
        "layer", "a",
        "layer", "b", "c",
        "layer", "d",  # b is done one layer early; e waits for the longer branch
        "layer", "e",
        "layer", "f1", "f2",
        "layer", "g1", "g2", "g3",
    ]  # fmt: skip
    by_name = {
        name_of[line.split()[0]]: line for line in stdout.splitlines()[1:] if line[:1] == " "
    }
    assert by_name["a"].endswith(f"waits for {outside} (not in this workflow)")
    assert by_name["e"].endswith(f"waits for {ids['b']}, {ids['d']}")
    assert by_name["g3"].endswith(f"waits for {ids['f1']}-{ids['f2']}")
    # a waits for a job outside that is still running: every step is pending.
    assert f"workflow {ids['a']}: running, 10 jobs (10 pending)" in stdout


def test_a_job_in_no_workflow_or_missing_is_refused_with_exit_1(db_url: str, conn: Conn) -> None:
    alone = put(conn, "available")
    before = table_snapshot(conn)
    err = one_line(refused(cli(db_url, "workflow", "show", str(alone)), 1))
    assert err == f"drover: job {alone} belongs to no workflow (it was inserted on its own)\n"
    err = one_line(refused(cli(db_url, "workflow", "show", "987654"), 1))
    assert err == "drover: job 987654 does not exist\n"
    assert table_snapshot(conn) == before


@pytest.mark.parametrize("bad", ["abc", "0", "1.5", " ", "²", str(2**63)])
def test_a_bad_id_is_a_usage_error(db_url: str, conn: Conn, bad: str) -> None:
    before = table_snapshot(conn)
    err = one_line(refused(cli(db_url, "workflow", "show", bad), 2))
    assert f"invalid job id {bad!r}: expected a whole number from 1 to" in err
    assert table_snapshot(conn) == before


def test_an_unreachable_database_is_one_line_without_the_password() -> None:
    started = time.monotonic()
    result = cli(UNREACHABLE, "workflow", "show", "1")
    assert time.monotonic() - started < 20  # not the pool's 30 s
    err = one_line(refused(result, 1))
    assert "127.0.0.1:1" in err
    assert PASSWORD not in result.output


def test_workflow_show_as_a_subprocess(
    db_url: str, conn: Conn, chord: drover.InsertedWorkflow
) -> None:
    a, count = chord.jobs[0].id, chord.jobs[3].id
    shown = run("workflow", "show", str(count), url=db_url)
    assert (shown.returncode, shown.stderr) == (0, ""), shown.stderr
    assert shown.stdout.startswith(f"workflow {a}: running, 6 jobs")
    assert "waits for" in shown.stdout and "result 3" in shown.stdout

    as_json = run("--json", "workflow", "show", str(a), url=db_url)
    assert as_json.returncode == 0, as_json.stderr
    document = json.loads(as_json.stdout)
    assert [j["state"] for j in document["jobs"]].count("completed") == 4

    alone = put(conn, "available")
    refusal = run("workflow", "show", str(alone), url=db_url)
    assert (refusal.returncode, refusal.stdout) == (1, "")
    assert "belongs to no workflow" in one_line(refusal.stderr)

    bad = run("workflow", "show", "x1", url=db_url)
    assert (bad.returncode, bad.stdout) == (2, "")
    assert "invalid job id 'x1'" in one_line(bad.stderr)

    missing = run("workflow", "show", url=db_url)
    assert (missing.returncode, missing.stdout) == (2, "")

    unreachable = run("workflow", "show", "1", "--database", UNREACHABLE, timeout=30)
    assert (unreachable.returncode, unreachable.stdout) == (1, "")
    assert PASSWORD not in unreachable.stderr
