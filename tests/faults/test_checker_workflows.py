"""The history checker's workflows check, on synthetic histories (pure Python, no database).

A clean history of workflows passes with exact figures, including what
looks wrong and is not: a chord's callback starting a hair after its last
member's completion, a retry after a failed attempt, a paused worker's
superseded attempt (attributed to its SIGSTOP), a failing chord whose
callback was cancelled without running, and, in ``tx`` mode, a dependent
starting after its dependency's ``complete_tx`` committed but before that
handler returned. Then each violation is planted alone, and the checker
must name it: ``DEPENDENT_EARLY``, ``CALLBACK_DUPLICATE``/``STEP_DUPLICATE``,
``DEPENDENT_OF_FAILED_RAN``, a step ``pending`` forever (``LOST``, a stuck
release or cancellation) and a failed dependency's step not cancelled.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from drover.faults.harness.checker import CODES, RESCUE_PREFIX, Report, check
from drover.faults.harness.history import (
    Effect,
    End,
    Fault,
    History,
    JobFinal,
    Params,
    Start,
    dump_history,
    load_history,
)
from drover.faults.harness.workflow_check import WORKFLOW_CODES

PARAMS = Params(lease=2.0, rescue_interval=0.5, heartbeat=0.5, poll_interval=0.2)
T0 = 1_700_000_000.0
A, B, C = 101, 102, 103


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def error(attempt: int, at: float, text: str) -> dict[str, Any]:
    return {"attempt": attempt, "at": iso(at), "error": text}


class Builder:
    """Workflow steps: rows with their edges, and executions with start, effect and end."""

    def __init__(self, mode: str = "plain") -> None:
        self.params = dataclasses.replace(PARAMS, mode=mode)
        self.jobs: dict[int, JobFinal] = {}
        self.effects: list[Effect] = []
        self.starts: list[Start] = []
        self.ends: list[End] = []
        self.faults: list[Fault] = []

    def step(
        self,
        job: int,
        workflow: int,
        deps: tuple[int, ...] = (),
        state: str = "completed",
        attempt: int = 1,
        finalized: float | None = None,
        errors: list[dict[str, Any]] | None = None,
        workload: str = "step",
        max_attempts: int = 8,
    ) -> None:
        self.jobs[job] = JobFinal(
            job, workload, state, attempt, max_attempts, finalized, errors or [],
            kind="fault_step", queue="default", args={"workload": workload},
            workflow_id=workflow, depends_on=deps,
        )  # fmt: skip

    def run(
        self,
        job: int,
        attempt: int,
        pid: int,
        t0: float,
        t1: float | None,
        effect: float | None = None,
        read: tuple[int | None, ...] | None = None,
    ) -> None:
        """An execution from ``t0`` to ``t1``; its effect just before ``t1`` (``effect=0``: none).

        ``read`` is what it read of its dependencies (default: their ids, all completed).
        """
        deps = self.jobs[job].depends_on if job in self.jobs else ()
        self.starts.append(Start(job, attempt, pid, t0, deps if read is None else read))
        if t1 is not None:
            self.ends.append(End(job, attempt, pid, t1))
        at = effect if effect is not None else (None if t1 is None else t1 - 0.001)
        if at:
            tx = self.params.mode == "tx"
            self.effects.append(Effect(job, attempt, pid, t0, at, at, tx))

    def build(self) -> History:
        return History(
            self.jobs, self.effects, self.starts, [], self.faults, self.params, ends=self.ends
        )


def clean_builder() -> Builder:
    b = Builder()
    # Workflow 1, a chain 1 -> 2 -> 3; step 2 fails its first attempt and is retried.
    t = T0
    b.step(1, 1, finalized=t + 0.021)
    b.run(1, 1, A, t, t + 0.02)
    b.step(2, 1, (1,), attempt=2, finalized=t + 0.261, errors=[error(1, t + 0.04, "boom")])
    b.run(2, 1, B, t + 0.03, t + 0.039, effect=0)
    b.run(2, 2, C, t + 0.24, t + 0.26)
    b.step(3, 1, (2,), finalized=t + 0.301)
    b.run(3, 1, A, t + 0.27, t + 0.30)
    # Workflow 10, a chord 10, 11, 12 then 13, then 14; the callback starts 0.3 ms
    # after the last member's completion.
    t = T0 + 1.0
    for job, pid, end in ((10, A, 0.02), (11, B, 0.05), (12, C, 0.03)):
        b.step(job, 10, finalized=t + end + 0.001)
        b.run(job, 1, pid, t, t + end)
    b.step(13, 10, (10, 11, 12), finalized=t + 0.0713)
    b.run(13, 1, A, t + 0.0513, t + 0.07)
    b.step(14, 10, (13,), finalized=t + 0.101)
    b.run(14, 1, B, t + 0.08, t + 0.1)
    # Workflow 20, a failing chord: 21 is poison and ends dead after two attempts,
    # so 22 (the callback) and 23 (the step after it) are cancelled, never run.
    t = T0 + 2.0
    b.step(20, 20, finalized=t + 0.021)
    b.run(20, 1, A, t, t + 0.02)
    dead = [error(1, t + 0.01, "poisoned"), error(2, t + 0.3, "poisoned")]
    b.step(21, 20, state="dead", attempt=2, finalized=t + 0.3, errors=dead, workload="poison")
    b.run(21, 1, B, t, t + 0.01, effect=0)
    b.run(21, 2, C, t + 0.25, t + 0.3, effect=0)
    cascade = "dependency 21 ended dead, so this job will not run"
    b.step(22, 20, (20, 21), state="cancelled", finalized=t + 0.3,
           errors=[error(0, t + 0.3, cascade)])  # fmt: skip
    cascade = "dependency 22 ended cancelled, so this job will not run"
    b.step(23, 20, (22,), state="cancelled", finalized=t + 0.3,
           errors=[error(0, t + 0.3, cascade)])  # fmt: skip
    # Workflow 30, a chain 30 -> 31 whose second step's worker (pid B) is paused
    # past its lease: the rescuer takes the step back and pid C reruns it; pid B,
    # woken, runs on (its lease lost, no effect) and its attempt 1 is attributed.
    t = T0 + 10.0
    b.step(30, 30, finalized=t + 0.021)
    b.run(30, 1, A, t, t + 0.02)
    b.faults.append(Fault("stop", t + 0.1, t + 5.0, B))
    b.step(31, 30, (30,), attempt=2, finalized=t + 2.71,
           errors=[error(1, t + 2.6, f"{RESCUE_PREFIX}, worker presumed dead")])  # fmt: skip
    b.run(31, 1, B, t + 0.05, t + 5.02, effect=0)
    b.run(31, 2, C, t + 2.65, t + 2.7)
    return b


def codes(report: Report) -> list[tuple[str, int | None]]:
    return [(v.code, v.job) for v in report.violations]


def test_a_clean_workflow_history_passes_with_exact_figures() -> None:
    report = check(clean_builder().build())
    assert report.ok, report.summary()
    assert report.workflows == {
        "workflows": 4,
        "steps": 14,
        "dependents": 7,
        "starts": 15,
        "retried": 2,  # step 2's first attempt, the poison step's first
        "duplicates_attributed": 1,
        "duplicates_unattributed": 0,
        "duplicates_by_fault": {"stop": 1},
        "cancelled_by_dependency": 2,
        "release_lag_samples": 5,
        "release_lag_worst": pytest.approx(0.029, abs=1e-6),  # step 31, from its first start
    }
    figures = report.to_json()
    assert json.loads(json.dumps(figures)) == figures
    assert figures["workflows"] == report.workflows
    assert "workflows: 4 (14 steps, 7 waiting)" in report.summary()


def test_a_history_without_workflows_reports_none() -> None:
    b = clean_builder()
    b.jobs = {i: dataclasses.replace(j, workflow_id=None, depends_on=()) for i, j in b.jobs.items()}
    b.jobs = {i: j for i, j in b.jobs.items() if j.state == "completed"}
    b.starts = [s for s in b.starts if s.job in b.jobs]
    report = check(b.build())
    assert report.workflows == {}
    assert "workflows:" not in report.summary()


def test_the_workflow_codes_are_the_checkers() -> None:
    assert set(WORKFLOW_CODES) <= set(CODES)


# --- DEPENDENT_EARLY ------------------------------------------------------------------------


def test_a_callback_started_before_its_last_members_completion_is_early() -> None:
    b = clean_builder()
    t = T0 + 1.0
    # Member 11 completes at +0.051; the callback now starts at +0.0505.
    b.starts = [s for s in b.starts if s.job != 13]
    b.ends = [e for e in b.ends if e.job != 13]
    b.effects = [e for e in b.effects if e.job != 13]
    b.run(13, 1, A, t + 0.0505, t + 0.07)
    report = check(b.build())
    assert codes(report) == [("DEPENDENT_EARLY", 13)], report.summary()
    detail = report.violations[0].detail
    assert f"attempt 1 started at {t + 0.0505:.6f} (pid {A})" in detail
    assert "dependency 11's" in detail


def test_in_plain_mode_a_dependent_starting_before_its_dependencys_handler_returned_is_early() -> (
    None
):
    # Plain mode: the completion is written after the handler returns, so a
    # dependent that starts before that return was released early, even if
    # the row's finalized_at (planted) is earlier.
    b = clean_builder()
    t = T0
    b.jobs[1] = dataclasses.replace(b.jobs[1], finalized_at=t + 0.005)
    b.starts = [s for s in b.starts if s.job != 2]
    b.ends = [e for e in b.ends if e.job != 2]
    b.effects = [e for e in b.effects if e.job != 2]
    b.jobs[2] = dataclasses.replace(b.jobs[2], attempt=1, errors=[], finalized_at=t + 0.031)
    b.run(2, 1, B, t + 0.015, t + 0.03)
    report = check(b.build())
    early = [v for v in report.violations if v.code == "DEPENDENT_EARLY"]
    assert [v.job for v in early] == [2], report.summary()
    assert "dependency 1's attempt 1's handler return" in early[0].detail


def test_in_tx_mode_a_dependent_may_start_between_the_commit_and_the_return() -> None:
    # complete_tx commits inside the handler: the effect (at +0.01) and the
    # completion come before the handler's end (+0.05), and the dependent
    # starts at +0.02, in between. Not early in tx mode. (finalized_at is the
    # transaction's start, before the effect written inside it.)
    b = Builder(mode="tx")
    t = T0
    b.step(1, 1, finalized=t + 0.009)
    b.run(1, 1, A, t, t + 0.05, effect=t + 0.01)
    b.step(2, 1, (1,), finalized=t + 0.041)
    b.run(2, 1, B, t + 0.02, t + 0.045, effect=t + 0.04)
    report = check(b.build())
    assert report.ok, report.summary()
    # Before the effect the dependency's transaction wrote, it is early even in tx mode.
    b.starts[1] = dataclasses.replace(b.starts[1], t=t + 0.0095)
    report = check(b.build())
    assert codes(report) == [("DEPENDENT_EARLY", 2)], report.summary()
    assert "attempt 1's effect" in report.violations[0].detail


def test_a_step_that_read_no_result_of_a_dependency_started_early() -> None:
    b = clean_builder()
    b.starts = [dataclasses.replace(s, deps=(10, None, 12)) if s.job == 13 else s for s in b.starts]
    report = check(b.build())
    assert codes(report) == [("DEPENDENT_EARLY", 13)], report.summary()
    assert "[10, None, 12]" in report.violations[0].detail


# --- CALLBACK_DUPLICATE / STEP_DUPLICATE ------------------------------------------------------


def _callback_twice(b: Builder) -> None:
    """Callback 13 runs at attempt 1 on pid A, then again at attempt 2 on pid C; then 14 runs."""
    t = T0 + 1.0
    b.jobs[13] = dataclasses.replace(
        b.jobs[13],
        attempt=2,
        finalized_at=t + 2.701,
        errors=[error(1, t + 2.6, f"{RESCUE_PREFIX}, worker presumed dead")],
    )
    b.effects = [e for e in b.effects if e.job != 13]
    b.ends = [e for e in b.ends if e.job != 13]
    b.starts = [s for s in b.starts if s.job != 13]
    b.run(13, 1, A, t + 0.0513, t + 0.07, effect=0)
    b.run(13, 2, C, t + 2.65, t + 2.7)
    b.effects = [e for e in b.effects if e.job != 14]
    b.ends = [e for e in b.ends if e.job != 14]
    b.starts = [s for s in b.starts if s.job != 14]
    b.jobs[14] = dataclasses.replace(b.jobs[14], finalized_at=t + 2.731)
    b.run(14, 1, B, t + 2.71, t + 2.73)


def test_a_callback_started_twice_with_no_fault_is_an_unattributed_duplicate() -> None:
    b = clean_builder()
    _callback_twice(b)
    report = check(b.build())
    assert codes(report) == [("CALLBACK_DUPLICATE", 13)], report.summary()
    assert report.workflows["duplicates_unattributed"] == 1
    detail = report.violations[0].detail
    assert f"attempt 2 started at {T0 + 3.65:.6f} (pid {C}) after attempt 1" in detail
    assert "neither failed nor overlaps a fault" in detail


def test_a_callback_rerun_a_kill_of_its_process_explains_is_attributed() -> None:
    b = clean_builder()
    _callback_twice(b)
    b.faults.append(Fault("kill", T0 + 1.069, T0 + 1.069, A))
    report = check(b.build())
    assert report.ok, report.summary()
    assert report.workflows["duplicates_by_fault"] == {"kill": 1, "stop": 1}
    assert report.workflows["duplicates_attributed"] == 2


def test_a_fault_of_another_process_does_not_explain_a_callbacks_rerun() -> None:
    b = clean_builder()
    _callback_twice(b)
    b.faults.append(Fault("kill", T0 + 1.069, T0 + 1.069, B))
    report = check(b.build())
    assert codes(report) == [("CALLBACK_DUPLICATE", 13)], report.summary()


def test_a_first_step_started_twice_with_no_fault_is_a_step_duplicate() -> None:
    b = clean_builder()
    t = T0 + 1.0
    b.jobs[10] = dataclasses.replace(b.jobs[10], attempt=2)
    b.effects = [e for e in b.effects if e.job != 10]
    b.starts = [s for s in b.starts if s.job != 10]
    b.ends = [e for e in b.ends if e.job != 10]
    b.run(10, 1, A, t - 3.0, t - 2.9, effect=0)
    b.run(10, 2, A, t, t + 0.02)
    report = check(b.build())
    assert codes(report) == [("STEP_DUPLICATE", 10)], report.summary()


# --- DEPENDENT_OF_FAILED_RAN ---------------------------------------------------------------


def test_a_callback_that_ran_although_a_member_died_is_named() -> None:
    b = clean_builder()
    t = T0 + 2.0
    b.run(22, 1, A, t + 0.31, t + 0.33, effect=0)
    report = check(b.build())
    assert codes(report) == [("DEPENDENT_OF_FAILED_RAN", 22)], report.summary()
    detail = report.violations[0].detail
    assert (
        f"1 start(s) (the first at {t + 0.31:.6f}, pid {A}) although dependency 21 ended dead"
        in (detail)
    )


def test_a_callback_that_completed_although_a_member_died_is_named_without_a_start() -> None:
    # No start record (a SIGKILL can lose it), but the row says it completed.
    b = clean_builder()
    t = T0 + 2.0
    b.jobs[22] = dataclasses.replace(b.jobs[22], state="completed", errors=[])
    b.effects.append(Effect(22, 1, A, t + 0.31, t + 0.32, t + 0.32, False))
    b.jobs[22] = dataclasses.replace(b.jobs[22], finalized_at=t + 0.33)
    report = check(b.build())
    assert ("DEPENDENT_OF_FAILED_RAN", 22) in codes(report), report.summary()
    assert "ended completed although dependency 21 ended dead" in report.summary()


def test_a_step_of_a_failed_dependency_that_did_not_end_cancelled_is_a_wrong_outcome() -> None:
    b = clean_builder()
    b.jobs[23] = dataclasses.replace(b.jobs[23], state="dead")
    report = check(b.build())
    assert codes(report) == [("WRONG_OUTCOME", 23)], report.summary()
    assert "not cancelled, although dependency 22 ended cancelled" in report.summary()


# --- LOST: a step pending forever ------------------------------------------------------------


def test_a_step_pending_after_all_its_dependencies_completed_is_a_stuck_release() -> None:
    b = clean_builder()
    b.starts = [s for s in b.starts if s.job != 14]
    b.ends = [e for e in b.ends if e.job != 14]
    b.effects = [e for e in b.effects if e.job != 14]
    b.jobs[14] = dataclasses.replace(b.jobs[14], state="pending", finalized_at=None)
    report = check(b.build())
    assert codes(report) == [("LOST", 14)], report.summary()
    detail = report.violations[0].detail
    assert "pending although all 1 dependencies completed" in detail
    assert "a stuck release" in detail


def test_a_step_pending_after_a_dependency_died_is_a_lost_cancellation() -> None:
    b = clean_builder()
    for job in (22, 23):
        b.jobs[job] = dataclasses.replace(
            b.jobs[job], state="pending", finalized_at=None, errors=[]
        )
    report = check(b.build())
    assert codes(report) == [("LOST", 22), ("LOST", 23)], report.summary()
    assert "dependency 21 ended dead: a cancellation of its dependents was lost" in (
        report.violations[0].detail
    )
    assert "waiting for dependencies that never completed (22 pending)" in (
        report.violations[1].detail
    )


# --- the history files --------------------------------------------------------------------


def test_dump_and_load_keep_edges_workflow_ids_and_what_a_step_read(tmp_path: Path) -> None:
    b = clean_builder()
    b.starts.append(Start(14, 2, B, T0 + 9.0, (None,)))
    history = b.build()
    dump_history(history, tmp_path)
    loaded = load_history(tmp_path)
    assert loaded == history.canonical()
    assert loaded.jobs[13].depends_on == (10, 11, 12)
    assert loaded.jobs[13].workflow_id == 10
    assert any(s.deps == (None,) for s in loaded.starts)


def test_records_without_workflow_fields_still_load(tmp_path: Path) -> None:
    (tmp_path / "db.jsonl").write_text(
        json.dumps({"ev": "job", "id": 1, "workload": "fast", "state": "completed",
                    "attempt": 1, "max_attempts": 25, "finalized_at": T0, "errors": []}) + "\n"
        + json.dumps({"ev": "start", "job": 1, "attempt": 1, "pid": A, "t": T0}) + "\n"
    )  # fmt: skip
    loaded = load_history(tmp_path, PARAMS)
    assert loaded.jobs[1].workflow_id is None
    assert loaded.jobs[1].depends_on == ()
    assert loaded.starts[0].deps is None


@pytest.mark.parametrize(
    ("field", "value", "wanted"),
    [
        ("depends_on", [1, "2"], "a list of integers"),
        ("depends_on", 3, "a list of integers"),
        ("deps", [1, True], "a list of integers or nulls"),
    ],
)
def test_a_malformed_workflow_field_is_refused(
    tmp_path: Path, field: str, value: object, wanted: str
) -> None:
    job = {"ev": "job", "id": 1, "workload": "step", "state": "completed", "attempt": 1,
           "max_attempts": 8, "finalized_at": T0, "errors": []}  # fmt: skip
    start = {"ev": "start", "job": 1, "attempt": 1, "pid": A, "t": T0}
    (job if field == "depends_on" else start)[field] = value
    (tmp_path / "db.jsonl").write_text(json.dumps(job) + "\n" + json.dumps(start) + "\n")
    with pytest.raises(ValueError, match=f"field '{field}' must be {wanted}"):
        load_history(tmp_path, PARAMS)
