"""``drover faults --app``: the user's own handlers under the fault suite's faults (ADR 0039).

The end-to-end tests run the real command (``python -m drover faults``) on
``sample_app.py``: its worker processes import the sample app by the same
``--app`` spec, the nemesis hits them, and the report must name the handler
that repeats its effect (a plain INSERT per run) and not the idempotent one
(ON CONFLICT DO NOTHING keyed by the job id). They bring their own
PostgreSQL (the embedded server), except the ``--database-url`` one, which
uses the test server's empty database. The usage tests fail before any server
starts.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sample_app
from clihelp import invoke, refused, run

import drover
from drover.faults.app.report import Execution, KindReport, analyse
from drover.faults.app.run import _AppFleet
from drover.faults.app.sample import sample_from
from drover.faults.app.worker import outcome_of
from drover.faults.harness.fleet import FAULT_KINDS, FleetSettings, Worker
from drover.faults.harness.history import Fault, JobFinal, Params
from drover.faults.harness.jsonl import HistoryFile

HERE = Path(__file__).parent
APP = ["faults", "--app", "sample_app:workers"]


def _report(path: Path) -> dict[str, Any]:
    document = json.loads(path.read_text())
    assert isinstance(document, dict)
    return document


@pytest.mark.slow
def test_the_handler_that_repeats_its_effect_is_named_and_the_run_fails(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    done = run(
        *APP, "--args", "sample_app:sample_args", "--effects", "sample_app:EFFECTS",
        "--setup", "sample_app:setup", "--sample", "16", "--faults", str(len(FAULT_KINDS)),
        "--json-out", str(out),
        cwd=HERE, timeout=180,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    report = _report(out)
    kinds = report["kinds"]
    assert set(kinds) == {"sample_upsert", "sample_append", "sample_flaky", "sample_async"}
    assert report["not_sampled"] == ["sample_unsampled"]
    # Every kind of fault the suite knows, once each (one round of its schedule).
    assert report["faults"] == dict.fromkeys(FAULT_KINDS, 1)
    append, upsert = kinds["sample_append"], kinds["sample_upsert"]
    # The plain INSERT repeated under the process faults, and the checker
    # attributed every extra execution to a fault.
    assert append["verdict"] == "not idempotent"
    assert append["effects_repeated"] >= 1
    assert append["duplicates"] >= append["effects_repeated"]
    assert sum(append["duplicates_by_fault"].values()) == append["duplicates"]
    assert set(append["duplicates_by_fault"]) <= set(FAULT_KINDS)
    # The upsert ran as often, under the same faults, yet wrote once per job.
    assert upsert["verdict"] == "ok"
    assert upsert["effects_repeated"] == 0 and upsert["effects_missing"] == 0
    for name, kind in kinds.items():
        assert kind["lost"] == 0, name
        assert kind["jobs"] == 16, name
        assert kind["runs"] >= 16, name
        assert kind["duplicates_unattributed"] == 0, name
    # Raises outside drover's signals are counted by type; no effect check: not judged.
    # (A first attempt a fault cut short never raised: its retry was attempt 2.)
    assert 1 <= kinds["sample_flaky"]["raised"].get("ValueError", 0) <= 16
    assert kinds["sample_flaky"]["effect_check"] is False
    assert kinds["sample_flaky"]["verdict"] == "ok"
    assert kinds["sample_async"]["states"] == {"completed": 16}
    # The terminal table names the kind, and only that one, as not idempotent.
    lines = done.stdout.splitlines()
    assert any(line.startswith("sample_append") and "NOT IDEMPOTENT" in line for line in lines)
    assert [
        line for line in lines if "NOT IDEMPOTENT" in line and "sample_append" not in line
    ] == []
    assert "not sampled (no args given or found): sample_unsampled" in done.stdout


@pytest.mark.slow
def test_sampled_rows_on_a_database_of_the_callers_without_server_faults(
    db_url: str, empty_db_url: str, tmp_path: Path
) -> None:
    with contextlib.closing(drover.Client(db_url)) as client:
        client.insert_many([sample_app.Append(n=n) for n in range(12)])
    done = run(
        "--json", *APP, "--sample-from", db_url, "--sample", "10",
        "--effects", "sample_app:effects", "--setup", "sample_app:setup",
        "--database-url", empty_db_url, "--faults", "2", "--kinds", "kill,pg_restart",
        cwd=HERE, timeout=180,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)  # --json: the report on stdout instead of the table
    # Only the kind with rows was sampled, ten of its twelve; the server fault was left out.
    assert set(report["kinds"]) == {"sample_append"}
    assert report["faults"] == {"kill": 2}
    append = report["kinds"]["sample_append"]
    assert append["jobs"] == 10
    assert append["verdict"] == "not idempotent"
    # The handlers wrote to the caller's throwaway database, and read nothing else.
    with psycopg.connect(empty_db_url) as conn:
        row = conn.execute("SELECT count(*), count(DISTINCT job_id) FROM sample_appends").fetchone()
    assert row is not None and row[0] > row[1] == 10
    with psycopg.connect(db_url) as conn:
        row = conn.execute("SELECT count(*) FROM drover_jobs WHERE state = 'available'").fetchone()
    assert row == (12,)


def test_a_fault_waits_until_the_workers_have_been_busy_a_moment(tmp_path: Path) -> None:
    # A fault at the first start record could land before the handler's effect;
    # two such kills once made the idempotency verdict of a run depend on the draw.
    fleet = _AppFleet(FleetSettings(), "sample_app:workers", "", "", ["default"], tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        fleet.workers.append(Worker(proc, time.time()))
        history = HistoryFile(tmp_path / f"worker-{proc.pid}.jsonl")
        history.write(ev="start", job=1, attempt=1, pid=proc.pid, t=time.time(), kind="k")
        began = time.monotonic()
        fleet.await_busy(timeout=60, settle=0.3)
        assert time.monotonic() - began >= 0.3
        # Nothing in flight: the wait ends at its timeout, however short the settle.
        history.write(ev="end", job=1, attempt=1, pid=proc.pid, t=time.time(), kind="k")
        history.close()
        began = time.monotonic()
        fleet.await_busy(timeout=0.5, settle=0.0)
        assert time.monotonic() - began >= 0.5
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(10)


def test_a_database_that_holds_jobs_is_refused_untouched(db_url: str) -> None:
    with contextlib.closing(drover.Client(db_url)) as client:
        client.insert(sample_app.Upsert(n=1))
    stderr = refused(
        invoke([*APP, "--args", "sample_app:sample_args", "--setup", "sample_app:setup",
                "--database-url", db_url]),
        1,
    )  # fmt: skip
    assert "holds 1 job(s)" in stderr and "throwaway" in stderr
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT to_regclass('sample_appends')").fetchone() == (None,)
        assert conn.execute("SELECT state::text FROM drover_jobs").fetchall() == [("available",)]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["faults", "--app", "no_such_module:workers", "--args", "sample_app:sample_args"],
         "cannot import 'no_such_module'"),
        (["faults", "--app", "sample_app.py:workers", "--args", "sample_app:sample_args"],
         "drop the .py"),
        (["faults", "--app", "sample_app:DDL", "--args", "sample_app:sample_args"],
         "must be a drover.Client, a drover.Workers"),
        ([*APP], "exactly one source of args"),
        ([*APP, "--args", "sample_app:sample_args", "--sample-from", "postgresql://x/y"],
         "exactly one source of args"),
        ([*APP, "--args", "sample_app:HOLD"], "--args names a float"),
        ([*APP, "--args", "sample_app:BAD_ARGS"], "--args['sample_upsert'] is a int"),
        ([*APP, "--args", "sample_app:sample_args", "--effects", "sample_app:HOLD"],
         "--effects names a float"),
        ([*APP, "--args", "sample_app:sample_args", "--kinds", "kill,meteor"],
         "unknown fault kind(s): meteor"),
        ([*APP, "--args", "sample_app:sample_args", "--setup", "sample_app:DDL"],
         "--setup sample_app:DDL is not callable"),
        ([*APP, "--args", "sample_app:sample_args", "--lease", "0"], "--lease must be"),
    ],
)  # fmt: skip
def test_usage_errors_name_what_was_wrong_and_start_nothing(argv: list[str], expected: str) -> None:
    stderr = refused(invoke(argv), 2)
    assert expected in stderr, stderr


def test_an_args_factory_that_raises_is_named() -> None:
    stderr = refused(invoke([*APP, "--args", "sample_app:broken_args"]), 1)
    assert "--args raised KeyError: 'sample_append'" in stderr, stderr


def test_sample_from_reads_the_newest_args_of_each_kind(db_url: str) -> None:
    with contextlib.closing(drover.Client(db_url)) as client:
        client.insert_many([sample_app.Upsert(n=n) for n in range(5)])
    sampled = sample_from(db_url, sample_app.workers, 3)
    assert sampled == {"sample_upsert": [sample_app.Upsert(n=n) for n in (4, 3, 2)]}


def test_only_exceptions_outside_drovers_signals_count_as_raised() -> None:
    chained = RuntimeError("wrapped")
    chained.__cause__ = drover.Cancel("stop")
    assert outcome_of(None) == ("ok", None)
    assert outcome_of(drover.Snooze(1)) == ("signal", "Snooze")
    assert outcome_of(chained) == ("signal", "Cancel")
    assert outcome_of(ValueError("x")) == ("raised", "ValueError")


def test_duplicates_are_attributed_and_effects_judged_per_kind() -> None:
    def job(job_id: int, kind: str, attempt: int) -> JobFinal:
        return JobFinal(job_id, f"app:{kind}", "completed", attempt, 5, 100.0, [], kind=kind)

    jobs = [job(1, "a", 2), job(2, "a", 1), job(3, "b", 2)]
    runs = [
        # Job 1: attempt 1 cut short by the SIGKILL of pid 10, attempt 2 counted.
        Execution(1, 1, 10, "a", 10.0),
        Execution(1, 2, 11, "a", 14.0, 14.1, "ok"),
        Execution(2, 1, 11, "a", 15.0, 15.1, "ok"),
        # Job 3: attempt 1 raised (a retry, no duplicate), then returned twice,
        # the second time with no fault anywhere near.
        Execution(3, 1, 11, "b", 16.0, 16.1, "raised", "ValueError"),
        Execution(3, 2, 11, "b", 17.0, 17.1, "ok"),
        Execution(3, 1, 12, "b", 40.0, 40.1, "ok"),
    ]
    faults = [Fault("kill", 10.5, 10.5, 10)]
    params = Params(lease=2.0, rescue_interval=0.5, heartbeat=0.5, poll_interval=0.2)
    reports = analyse(jobs, runs, faults, params, {"a": {1: 2, 2: 0}, "b": "boom"})
    a, b = reports["a"], reports["b"]
    assert (a.jobs, a.runs, a.duplicates, a.duplicates_by_fault) == (2, 3, 1, {"kill": 1})
    assert (a.effects_repeated, a.repeated_jobs, a.effects_missing) == (1, [1], 1)
    assert a.verdict == "not idempotent"
    assert (b.duplicates, b.duplicates_unattributed, b.raised) == (1, 1, {"ValueError": 1})
    assert b.verdict == "effect check failed"


def test_a_kind_is_ok_only_without_repeats_losses_or_a_failed_check() -> None:
    assert KindReport("k").ok
    assert KindReport("k", effects_repeated=1).verdict == "not idempotent"
    assert KindReport("k", lost=1).verdict == "lost jobs"
    assert KindReport("k", effect_check_error="boom").verdict == "effect check failed"
