"""The history checker's limits check, on synthetic histories (pure Python, no database).

A clean history of a limited kind (three slots for the kind, one per value
of ``part``) passes with exact figures, including the moments that look
like overlaps and are not: a slot handed over at one instant, a zombie
running on after its rescue, a killed handler with no end, a ``complete_tx``
that committed before its handler returned. Then each excess is planted
alone, and the checker must name it: the limit, the partition, the instant,
and every execution holding a slot then.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from drover.faults.harness.checker import RESCUE_PREFIX, Report, check
from drover.faults.harness.history import (
    Effect,
    End,
    Fault,
    History,
    JobFinal,
    LimitRule,
    Params,
    Start,
    dump_history,
    load_history,
)

PARAMS = Params(lease=2.0, rescue_interval=0.5, heartbeat=0.5, poll_interval=0.2)
KIND = "fault_limited"
WHOLE = LimitRule("kind", KIND, 3)
PER_PART = LimitRule("kind", KIND, 1, partition_by="part")
T0 = 1_700_000_000.0
PIDS = (101, 102, 103)
WAVES = 10
"""Each wave runs three jobs side by side, one per part, 0.1 s apart."""


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def rescue(attempt: int, at: float) -> dict[str, Any]:
    return {"attempt": attempt, "at": iso(at), "error": f"{RESCUE_PREFIX}, worker presumed dead"}


class Builder:
    """A history of ``limited`` jobs: executions with start and end records."""

    def __init__(self) -> None:
        self.jobs: dict[int, JobFinal] = {}
        self.effects: list[Effect] = []
        self.starts: list[Start] = []
        self.ends: list[End] = []
        self.faults: list[Fault] = []

    def job(
        self,
        job: int,
        part: object,
        attempt: int = 1,
        finalized: float | None = None,
        errors: list[dict[str, Any]] | None = None,
        **changes: Any,
    ) -> None:
        args = {"workload": "limited"} | ({} if part is None else {"part": part})
        row = JobFinal(job, "limited", "completed", attempt, 25, finalized, errors or [])
        self.jobs[job] = dataclasses.replace(row, kind=KIND, queue="default", args=args, **changes)

    def run(
        self,
        job: int,
        attempt: int,
        pid: int,
        t0: float,
        t1: float | None,
        effect: float | None = None,
    ) -> None:
        """An execution from ``t0`` to ``t1`` (None: no end recorded).

        It leaves an effect just before its end, or at ``effect`` if given;
        none without an end or with ``effect=0``.
        """
        self.starts.append(Start(job, attempt, pid, t0))
        if t1 is not None:
            self.ends.append(End(job, attempt, pid, t1))
        at = effect if effect is not None else (None if t1 is None else t1 - 0.001)
        if at:
            self.effects.append(Effect(job, attempt, pid, t0, at, at, False))

    def build(self, limits: list[LimitRule] | None = None) -> History:
        return History(
            self.jobs,
            self.effects,
            self.starts,
            [],
            self.faults,
            PARAMS,
            ends=self.ends,
            limits=[WHOLE, PER_PART] if limits is None else limits,
        )


def clean_builder() -> Builder:
    b = Builder()
    for wave in range(WAVES):
        for part in range(3):
            job = wave * 3 + part + 1
            t = T0 + wave * 0.1 + part * 0.01
            b.run(job, 1, PIDS[part], t, t + 0.05)
            b.job(job, part, finalized=t + 0.051)
    t = T0 + 5.0
    # Handed over at one instant: job 40 (part 0) ends as job 41 (part 0) starts.
    b.run(40, 1, 101, t, t + 0.1)
    b.job(40, 0, finalized=t + 0.1)
    b.run(41, 1, 102, t + 0.1, t + 0.2)
    b.job(41, 0, finalized=t + 0.21)
    # A zombie: pid 103 is stopped holding job 42 (part 1); the rescuer takes it
    # back at +2.4 s and pid 101 reruns it, while the zombie, woken, runs on.
    ts = T0 + 10.0
    b.faults.append(Fault("stop", ts, ts + 5.0, 103))
    b.run(42, 1, 103, ts - 0.01, ts + 5.02, effect=0)  # interrupted: its lease was lost
    b.run(42, 2, 101, ts + 2.5, ts + 2.6)
    b.job(42, 1, attempt=2, finalized=ts + 2.61, errors=[rescue(1, ts + 2.4)])
    # Killed: pid 102 dies holding job 43 (part 2), which never records its end;
    # job 44 (part 2) starts after the kill, once the rescuer freed the slot,
    # then job 43 runs again.
    tk = T0 + 20.0
    b.faults.append(Fault("kill", tk, tk, 102))
    b.run(43, 1, 102, tk - 0.2, None)
    b.run(44, 1, 101, tk + 2.35, tk + 2.38)
    b.job(44, 2, finalized=tk + 2.39)
    b.run(43, 2, 104, tk + 2.4, tk + 2.45)
    b.job(43, 2, attempt=2, finalized=tk + 2.46, errors=[rescue(1, tk + 2.3)])
    # complete_tx: job 45 (part 0) committed at +0.1 s, its handler returned at
    # +0.3 s; job 46 (part 0) started in between, on the slot the commit freed.
    tc = T0 + 30.0
    b.run(45, 1, 101, tc, tc + 0.3, effect=tc + 0.09)
    b.job(45, 0, finalized=tc + 0.1)
    b.run(46, 1, 104, tc + 0.2, tc + 0.4)
    b.job(46, 0, finalized=tc + 0.41)
    return b


def clean() -> History:
    return clean_builder().build()


def codes(report: Report) -> list[tuple[str, int | None]]:
    return [(v.code, v.job) for v in report.violations]


def test_a_clean_limited_history_passes_with_exact_figures() -> None:
    report = check(clean())
    assert report.ok, report.summary()
    assert report.limits == {
        "kind:fault_limited": {"concurrency": 3, "executions": 39, "peak": 3},
        "kind:fault_limited[part]": {"concurrency": 1, "executions": 39, "peak": 1},
    }
    assert report.limit_exceeded == 0
    figures = report.to_json()
    assert json.loads(json.dumps(figures)) == figures
    assert figures["limits"] == report.limits
    assert figures["limit_exceeded"] == 0
    assert (
        "limits (peak of limit, executions): kind:fault_limited 3 of 3 (39), "
        "kind:fault_limited[part] 1 of 1 (39)" in report.summary()
    )


def test_a_history_without_limits_reports_none() -> None:
    report = check(clean_builder().build(limits=[]))
    assert report.ok
    assert report.limits == {}
    assert "limits" not in report.summary()


def test_a_fourth_execution_at_once_is_named_with_every_slot_holder() -> None:
    b = clean_builder()
    # Wave 4 runs jobs 13, 14, 15 (parts 0, 1, 2) from T0 + 0.4; job 50 of
    # part 3 starts among them.
    t = T0 + 0.425
    b.run(50, 1, 104, t, t + 0.05)
    b.job(50, 3, finalized=t + 0.06)
    report = check(b.build())
    assert codes(report) == [("LIMIT_EXCEEDED", 50)], report.summary()
    assert report.limit_exceeded == 1
    assert report.limits["kind:fault_limited"]["peak"] == 4
    detail = report.violations[0].detail
    assert detail.startswith(
        f"4 executions held slots of kind:fault_limited at once at {t:.6f} (limit 3): "
    )
    for job, pid in ((13, 101), (14, 102), (15, 103), (50, 104)):
        assert f"job {job} attempt 1 pid {pid} from " in detail
    assert "(its end)" in detail
    summary = report.summary()
    assert "LIMIT_EXCEEDED" in summary
    assert "end       attempt 1 pid 104" in summary  # the tipping job's timeline


def test_two_executions_of_one_partition_at_once_name_the_partition() -> None:
    b = clean_builder()
    t = T0 + 0.43  # while job 14 (part 1) runs, in a wave with room for a fourth
    b.run(51, 1, 104, t, t + 0.01)
    b.job(51, 1, finalized=t + 0.02)
    b2 = clean_builder()
    b2.run(52, 1, 104, T0 + 60.0, T0 + 60.1)
    b2.run(53, 1, 101, T0 + 60.05, T0 + 60.2)
    b2.job(52, "eu", finalized=T0 + 60.11)
    b2.job(53, "eu", finalized=T0 + 60.21)
    for history, job, part in ((b.build(), 51, "1"), (b2.build(), 53, '"eu"')):
        report = check(history)
        # Job 51 also makes four at once under the whole limit.
        assert ("LIMIT_EXCEEDED", job) in codes(report), report.summary()
        partition = [v for v in report.violations if "[part]=" in v.detail]
        assert len(partition) == 1
        assert partition[0].detail.startswith(
            f"2 executions held slots of kind:fault_limited[part]={part} at once"
        )
        assert report.limits["kind:fault_limited[part]"]["peak"] == 2


def test_jobs_without_the_field_share_the_null_partition() -> None:
    b = clean_builder()
    b.run(54, 1, 104, T0 + 70.0, T0 + 70.1)
    b.run(55, 1, 101, T0 + 70.05, T0 + 70.2)
    b.job(54, None, finalized=T0 + 70.11)
    b.job(55, None, finalized=T0 + 70.21)
    report = check(b.build())
    assert codes(report) == [("LIMIT_EXCEEDED", 55)]
    assert "kind:fault_limited[part]=null at once" in report.violations[0].detail


def test_an_execution_that_never_ended_holds_its_slot_to_the_end_of_the_history() -> None:
    b = Builder()
    # Job 1's first attempt records no end, and no kill, rescue or completion
    # ends it: job 2 of its partition, a minute later, still overlaps it, and
    # so does its own second attempt. Each excess is reported once.
    b.run(1, 1, 101, T0, None)
    b.run(1, 2, 102, T0 + 30.0, T0 + 30.1)
    b.job(1, "a", attempt=2, finalized=T0 + 30.2)
    b.run(2, 1, 103, T0 + 60.0, T0 + 60.1)
    b.job(2, "a", finalized=T0 + 60.2)
    report = check(b.build(limits=[PER_PART]))
    assert codes(report) == [("LIMIT_EXCEEDED", 1), ("LIMIT_EXCEEDED", 2)], report.summary()
    assert "job 1 attempt 1 pid 101 from " in report.violations[1].detail
    assert "until the end of the history" in report.violations[1].detail
    assert report.limit_exceeded == 2
    assert report.limits["kind:fault_limited[part]"]["peak"] == 2


def test_a_zombie_counts_until_its_rescue_not_until_it_wakes() -> None:
    h = clean()
    report = check(h)
    assert report.ok
    # Without the rescue entry nothing says the database let go of attempt 1, so
    # the zombie's run overlaps the rerun: an excess.
    jobs = dict(h.jobs)
    jobs[42] = dataclasses.replace(jobs[42], errors=[])
    report = check(dataclasses.replace(h, jobs=jobs))
    assert ("LIMIT_EXCEEDED", 42) in codes(report), report.summary()


def test_only_the_kill_or_the_rescue_ends_an_execution_that_recorded_no_end() -> None:
    for keep_kill in (True, False):
        b = clean_builder()
        b.jobs[43] = dataclasses.replace(b.jobs[43], errors=[])
        if not keep_kill:
            b.faults = [f for f in b.faults if f.kind != "kill"]
        report = check(b.build())
        limit_violations = [v.job for v in report.violations if v.code == "LIMIT_EXCEEDED"]
        # With the kill, job 43's first attempt ends there; without it or a
        # rescue, job 44 and job 43's own rerun overlap it.
        assert limit_violations == ([] if keep_kill else [43, 44]), report.summary()


def test_a_queue_limit_counts_every_kind_of_its_queue() -> None:
    b = clean_builder()
    other = JobFinal(60, "fast", "completed", 1, 25, T0 + 0.5, [], "fault_job", "default", {})
    b.jobs[60] = other
    b.run(60, 1, 104, T0 + 0.425, T0 + 0.45)
    report = check(b.build(limits=[LimitRule("queue", "default", 3)]))
    assert codes(report) == [("LIMIT_EXCEEDED", 60)]
    assert "slots of queue:default at once" in report.violations[0].detail
    assert report.limits == {"queue:default": {"concurrency": 3, "executions": 40, "peak": 4}}


def test_dump_and_load_keep_ends_limits_and_job_scopes(tmp_path: Path) -> None:
    h = clean()
    dump_history(h, tmp_path)
    loaded = load_history(tmp_path)
    assert loaded == h.canonical()
    assert loaded.jobs[1].args == {"workload": "limited", "part": 0}
    assert (loaded.jobs[1].kind, loaded.jobs[1].queue) == (KIND, "default")
    assert check(loaded).limits == check(h).limits


def test_a_job_record_without_scope_fields_still_loads(tmp_path: Path) -> None:
    (tmp_path / "db.jsonl").write_text(
        json.dumps(
            {"ev": "job", "id": 1, "workload": "fast", "state": "completed", "attempt": 1}
            | {"max_attempts": 25, "finalized_at": T0, "errors": []}
        )
        + "\n"
    )
    job = load_history(tmp_path, PARAMS).jobs[1]
    assert (job.kind, job.queue, job.args) == ("", "", {})


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"scope": "tenant", "target": "x", "concurrency": 1}, "scope must be 'kind' or 'queue'"),
        ({"scope": "kind", "target": "", "concurrency": 1}, "target must name"),
        ({"scope": "kind", "target": "x", "concurrency": 0}, "concurrency must be 1 or more"),
        ({"scope": "kind", "target": "x", "concurrency": 1, "partition_by": ""}, "partition_by"),
        ({"scope": "kind", "target": "x", "concurrency": "3"}, "'concurrency' must be an integer"),
        ({"scope": "kind", "target": "x"}, "no field 'concurrency'"),
        (
            {"scope": "kind", "target": "x", "concurrency": 1, "partition_by": 7},
            "'partition_by' must be a string",
        ),
    ],
)
def test_a_malformed_limit_record_is_refused(
    tmp_path: Path, record: dict[str, Any], message: str
) -> None:
    (tmp_path / "orchestrator.jsonl").write_text(json.dumps({"ev": "limit", **record}) + "\n")
    with pytest.raises(ValueError, match=message):
        load_history(tmp_path, PARAMS)


def test_a_malformed_args_field_is_refused(tmp_path: Path) -> None:
    (tmp_path / "db.jsonl").write_text(
        json.dumps(
            {"ev": "job", "id": 1, "workload": "limited", "state": "completed", "attempt": 1}
            | {"max_attempts": 25, "finalized_at": T0, "errors": [], "args": [1, 2]}
        )
        + "\n"
    )
    with pytest.raises(ValueError, match=r"db.jsonl:1: field 'args' must be an object"):
        load_history(tmp_path, PARAMS)
