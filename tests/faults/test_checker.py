"""The fault suite's history checker, on synthetic histories (pure Python, no database).

A clean history of a few hundred jobs of every workload (with a SIGKILL
that leaves an attributed duplicate, a SIGSTOP zombie whose late completion
is refused, a drain within budget and a PostgreSQL restart) must pass with
exact counters. Then each bug class is planted into it, alone, and the
checker must report exactly that violation. Finally the history files: a
truncated last line is tolerated, anything else malformed is not, and
dump/load round-trips.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from drover.faults.harness.checker import CODES, RESCUE_PREFIX, Report, Violation, check
from drover.faults.harness.history import (
    Effect,
    Fault,
    History,
    JobFinal,
    Params,
    Refused,
    Start,
    dump_history,
    dump_records,
    load_history,
    record_of,
)

PARAMS = Params(lease=2.0, rescue_interval=0.5, heartbeat=0.5, poll_interval=0.2)
BOUND = PARAMS.lease + PARAMS.rescue_interval + PARAMS.epsilon  # 3.5 s

T0 = 1_700_000_000.0
NORMAL_JOBS = 300
PATTERN = ("fast", "fast", "fast", "fast", "slow", "fast", "flaky", "snooze", "cancel", "poison")
PIDS = (101, 102, 103)

TK = T0 + 100.0  # SIGKILL of pid 101 (replaced by 104)
TS = T0 + 150.0  # SIGSTOP of pid 103 for 5 s
TD = T0 + 200.0  # drain of pid 102 (budget 1 s)
TR = T0 + 250.0  # PostgreSQL fast restart

KILLED_DUPLICATE = 301  # effect done, killed before its completion: rescued, re-run
KILLED_SLOW = 302  # a slow job in flight in the killed process
KILLED_NO_START = 303  # claimed by the killed process, which died before recording the start
COMPLETED_NO_START = 304  # completed just before the kill; the start record was lost
ZOMBIE = 310  # in flight in the stopped process: rescued, re-run; the zombie's write refused
DRAINED = 320  # finished within the drain


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def entry(attempt: int, at: float, error: str) -> dict[str, Any]:
    return {"attempt": attempt, "at": iso(at), "error": error, "trace": None}


def rescue(attempt: int, at: float) -> dict[str, Any]:
    return entry(attempt, at, RESCUE_PREFIX + ", worker presumed dead")


class Builder:
    """Collects a synthetic history."""

    def __init__(self) -> None:
        self.jobs: dict[int, JobFinal] = {}
        self.effects: list[Effect] = []
        self.starts: list[Start] = []
        self.refused: list[Refused] = []
        self.faults: list[Fault] = []

    def start(self, job: int, attempt: int, pid: int, t: float) -> None:
        self.starts.append(Start(job, attempt, pid, t))

    def effect(
        self, job: int, attempt: int, pid: int, t0: float, t1: float, db: float | None = None
    ) -> None:
        self.effects.append(
            Effect(job, attempt, pid, t0, t1, t1 + 0.001 if db is None else db, False)
        )

    def run_ok(self, job: int, attempt: int, pid: int, t: float, seconds: float = 0.01) -> float:
        """A start and an effect; returns the handler's end."""
        self.start(job, attempt, pid, t)
        self.effect(job, attempt, pid, t, t + seconds)
        return t + seconds

    def final(
        self,
        job: int,
        workload: str,
        state: str,
        attempt: int,
        finalized_at: float | None,
        errors: list[dict[str, Any]] | None = None,
        max_attempts: int = 25,
    ) -> None:
        self.jobs[job] = JobFinal(
            job, workload, state, attempt, max_attempts, finalized_at, errors or []
        )

    def build(self) -> History:
        return History(self.jobs, self.effects, self.starts, self.refused, self.faults, PARAMS)


def normal_job(b: Builder, i: int) -> None:
    """Job ``i`` of the quiet part of the run, as its workload behaves."""
    workload = PATTERN[(i - 1) % len(PATTERN)]
    t = T0 + i * 0.1
    pid, other = PIDS[i % 3], PIDS[(i + 1) % 3]
    if workload in ("fast", "slow"):
        end = b.run_ok(i, 1, pid, t, 0.01 if workload == "fast" else PARAMS.lease * 1.3)
        b.final(i, workload, "completed", 1, end + 0.01)
    elif workload == "flaky":
        fails = 1 + (i // 10) % 2
        errors = []
        for attempt in range(1, fails + 1):
            at = t + (attempt - 1) * 0.3
            b.start(i, attempt, PIDS[(i + attempt) % 3], at)
            errors.append(entry(attempt, at + 0.005, f"RuntimeError: fails attempt {attempt}"))
        end = b.run_ok(i, fails + 1, pid, t + fails * 0.3)
        b.final(i, workload, "completed", fails + 1, end + 0.01, errors, max_attempts=8)
    elif workload == "snooze":
        b.start(i, 1, pid, t)  # snoozed: the attempt is given back, so attempt 1 runs again
        end = b.run_ok(i, 1, other, t + 0.25)
        b.final(i, workload, "completed", 1, end + 0.01)
    elif workload == "cancel":
        b.start(i, 1, pid, t)
        b.final(i, workload, "cancelled", 1, t + 0.003, [entry(1, t + 0.002, "Cancel: cancels")])
    else:  # poison
        b.start(i, 1, pid, t)
        b.start(i, 2, other, t + 0.3)
        errors = [entry(1, t + 0.002, "RuntimeError: fails"), entry(2, t + 0.302, "RuntimeError")]
        b.final(i, workload, "dead", 2, t + 0.303, errors, max_attempts=2)


def clean_builder() -> Builder:
    b = Builder()
    for i in range(1, NORMAL_JOBS + 1):
        normal_job(b, i)

    # SIGKILL of pid 101 at TK; its replacement is pid 104.
    b.faults.append(Fault("kill", TK, TK, 101))
    b.run_ok(KILLED_DUPLICATE, 1, 101, TK - 0.05)  # effect written, completion never sent
    end = b.run_ok(KILLED_DUPLICATE, 2, 104, TK + 2.5)
    b.final(KILLED_DUPLICATE, "fast", "completed", 2, end + 0.01, [rescue(1, TK + 2.3)])
    b.start(KILLED_SLOW, 1, 101, TK - 1.0)
    end = b.run_ok(KILLED_SLOW, 2, 104, TK + 2.4, PARAMS.lease * 1.3)
    b.final(KILLED_SLOW, "slow", "completed", 2, end + 0.02, [rescue(1, TK + 2.1)])
    end = b.run_ok(KILLED_NO_START, 2, 104, TK + 2.45)
    b.final(KILLED_NO_START, "fast", "completed", 2, end + 0.01, [rescue(1, TK + 2.2)])
    b.effect(COMPLETED_NO_START, 1, 101, TK - 0.3, TK - 0.29)
    b.final(COMPLETED_NO_START, "fast", "completed", 1, TK - 0.28)

    # SIGSTOP of pid 103 at TS for 2 leases + rescue + 0.5 s.
    b.faults.append(Fault("stop", TS, TS + 5.0, 103))
    b.start(ZOMBIE, 1, 103, TS - 0.01)
    end = b.run_ok(ZOMBIE, 2, 102, TS + 2.6)
    b.final(ZOMBIE, "fast", "completed", 2, end + 0.01, [rescue(1, TS + 2.4)])
    b.effect(ZOMBIE, 1, 103, TS - 0.01, TS + 5.01)  # finishes after SIGCONT...
    b.refused.append(Refused(ZOMBIE, 1, 103, TS + 5.03, "attempt 2 is running"))  # ...refused

    # SIGTERM of pid 102 at TD: its one job finishes, it exits within budget.
    b.faults.append(Fault("drain", TD, TD + 0.4, 102, budget=1.0, exit_code=0))
    end = b.run_ok(DRAINED, 1, 102, TD - 0.1, 0.4)
    b.final(DRAINED, "fast", "completed", 1, end + 0.01)

    b.faults.append(Fault("pg_restart", TR, TR + 0.6, None))
    return b


def clean() -> History:
    return clean_builder().build()


def violations(report: Report) -> list[tuple[str, int | None]]:
    return [(v.code, v.job) for v in report.violations]


# --- the clean history ----------------------------------------------------------------


def test_clean_history_passes_with_exact_counters() -> None:
    report = check(clean())
    assert report.ok, report.summary()
    assert report.violations == []
    assert report.jobs == 306
    assert report.states == {"cancelled": 30, "completed": 246, "dead": 30}
    assert report.effects == 248
    # fast 150, slow 30, flaky 15x2 + 15x3, snooze 2x30, cancel 30, poison 2x30; 8 special.
    assert report.starts == 405 + 8
    assert report.refused == 1
    assert report.faults == {"drain": 1, "kill": 1, "pg_restart": 1, "stop": 1}
    assert (report.lost, report.phantom, report.stale_accepted, report.attempt_violations) == (
        0,
        0,
        0,
        0,
    )
    assert report.duplicates_total == 2
    assert report.duplicates_attributed == 2
    assert report.duplicates_unattributed == 0
    assert report.duplicates_by_fault == {"kill": 1, "stop": 1}
    assert report.duplicates_in_tx == 0
    # Killed: the duplicate (2.3 s) and the slow job (2.1 s); stopped: the zombie (2.4 s).
    # The job whose start the SIGKILL swallowed is no sample: nothing says it was in flight.
    assert report.recovery_samples == 3
    assert report.recovery_worst == pytest.approx(2.4, abs=1e-5)
    assert report.recovery_p99 == pytest.approx(2.4, abs=1e-5)
    assert report.recovery_confounded == 0
    assert report.drains == 1
    assert report.drain_worst == pytest.approx(0.4)


def test_report_json_and_summary_of_a_clean_run() -> None:
    report = check(clean())
    figures = report.to_json()
    assert json.loads(json.dumps(figures)) == figures
    assert figures["ok"] is True
    assert figures["violations_total"] == 0
    assert figures["violations"] == []
    for key in (
        "jobs", "states", "effects", "starts", "refused", "faults", "lost", "phantom",
        "stale_accepted", "duplicates_total", "duplicates_attributed",
        "duplicates_unattributed", "duplicates_by_fault", "recovery_worst", "recovery_p99",
        "recovery_samples", "drain_worst",
    ):  # fmt: skip
        assert key in figures
    assert figures["recovery_worst"] == 2.4  # rounded to the microsecond
    assert figures["drain_worst"] == 0.4
    text = report.summary()
    assert "OK: no violations" in text
    assert "recovery: 3 samples, worst 2.400 s, p99 2.400 s (bound 3.500 s)" in text
    assert "306 jobs" in text


def tx_mode(h: History) -> History:
    """The clean run as tx mode records it: effects commit with the completion.

    The zombie's late effect cannot exist (its complete_tx was refused, so its
    transaction rolled back); the killed process's early effect still can.
    """
    effects = [
        dataclasses.replace(e, tx=True)
        for e in h.effects
        if not (e.job == ZOMBIE and e.attempt == 1)
    ]
    return dataclasses.replace(h, effects=effects, params=dataclasses.replace(h.params, mode="tx"))


def test_clean_history_in_tx_mode_passes() -> None:
    h = tx_mode(clean())
    h = dataclasses.replace(
        h, effects=[e for e in h.effects if not (e.job == KILLED_DUPLICATE and e.attempt == 1)]
    )
    report = check(h)
    assert report.ok, report.summary()
    assert report.duplicates_total == 0
    assert report.refused == 1


# --- each bug class, planted alone ----------------------------------------------------


def job_row(h: History, job: int, **changes: Any) -> History:
    jobs = dict(h.jobs)
    jobs[job] = dataclasses.replace(jobs[job], **changes)
    return dataclasses.replace(h, jobs=jobs)


def lost_running(h: History) -> History:
    return job_row(h, 1, state="running", finalized_at=None)


def lost_available(h: History) -> History:
    # Enqueued, never claimed, still there after the final drain.
    jobs = {**h.jobs, 999: JobFinal(999, "fast", "available", 0, 25, None, [])}
    return dataclasses.replace(h, jobs=jobs)


def phantom_completion(h: History) -> History:
    return dataclasses.replace(h, effects=[e for e in h.effects if e.job != 1])


def effect_on_cancel(h: History) -> History:
    assert h.jobs[9].workload == "cancel"
    t = T0 + 0.9
    return dataclasses.replace(h, effects=[*h.effects, Effect(9, 1, 101, t, t + 0.001, t, False)])


def effect_on_poison(h: History) -> History:
    assert h.jobs[10].workload == "poison"
    t = T0 + 1.3
    return dataclasses.replace(h, effects=[*h.effects, Effect(10, 2, 102, t, t + 0.001, t, False)])


def late_effect(h: History) -> History:
    # The completion committed 2 s before the accepted attempt's handler wrote its effect.
    job = h.jobs[1]
    assert job.finalized_at is not None
    return job_row(h, 1, finalized_at=job.finalized_at - 2.0)


def stale_write_accepted(h: History) -> History:
    # The zombie's completion of attempt 1 wins although attempt 2 had been claimed.
    h = job_row(h, ZOMBIE, attempt=1, finalized_at=TS + 5.04)
    return dataclasses.replace(h, refused=[r for r in h.refused if r.job != ZOMBIE])


def attempt_beyond_max(h: History) -> History:
    assert h.jobs[7].workload == "flaky" and h.jobs[7].attempt == 2
    return job_row(h, 7, max_attempts=1)


def unattributed_duplicate(h: History) -> History:
    # Job 1's attempt 1 wrote its effect; its completion vanished with no fault
    # anywhere near; the rescuer took it and attempt 2 ran again.
    t = T0 + 0.1
    h = job_row(h, 1, attempt=2, finalized_at=t + 2.52, errors=[rescue(1, t + 2.3)])
    return dataclasses.replace(
        h,
        starts=[*h.starts, Start(1, 2, 103, t + 2.5)],
        effects=[*h.effects, Effect(1, 2, 103, t + 2.5, t + 2.51, t + 2.511, False)],
    )


def duplicate_in_tx(h: History) -> History:
    # Attributed to the kill, and still a violation: a tx effect commits with its completion.
    return tx_mode(h)


def slow_recovery(h: History) -> History:
    # The slow job's rescue comes 4 s after the kill (bound 3.5 s); the rest follows it.
    delay = 1.9
    job = h.jobs[KILLED_SLOW]
    assert job.finalized_at is not None
    h = job_row(
        h, KILLED_SLOW, errors=[rescue(1, TK + 2.1 + delay)], finalized_at=job.finalized_at + delay
    )

    def later(e: Effect) -> Effect:
        if e.job != KILLED_SLOW or e.attempt != 2:
            return e
        return dataclasses.replace(
            e, t_start=e.t_start + delay, t_end=e.t_end + delay, db_at=e.db_at + delay
        )

    return dataclasses.replace(
        h,
        effects=[later(e) for e in h.effects],
        starts=[
            dataclasses.replace(s, t=s.t + delay) if (s.job, s.attempt) == (KILLED_SLOW, 2) else s
            for s in h.starts
        ],
    )


def missing_rescue(h: History) -> History:
    # The killed process's slow job was re-claimed without ever being rescued.
    return job_row(h, KILLED_SLOW, errors=[])


def drain_overrun(h: History) -> History:
    faults = [
        dataclasses.replace(f, t_end=TD + 2.5, exit_code=3) if f.kind == "drain" else f
        for f in h.faults
    ]
    return dataclasses.replace(h, faults=faults)


def duplicate_start(h: History) -> History:
    # Attempt 1 of job 1 (pid 102) also started in pid 103: one claim, two handlers.
    return dataclasses.replace(h, starts=[*h.starts, Start(1, 1, 103, T0 + 0.101)])


def snooze_started_three_times(h: History) -> History:
    assert h.jobs[8].workload == "snooze"
    return dataclasses.replace(h, starts=[*h.starts, Start(8, 1, 103, T0 + 0.9)])


def history_of_vanished_job(h: History) -> History:
    jobs = dict(h.jobs)
    del jobs[1]
    return dataclasses.replace(h, jobs=jobs)


def _first_completed_fast(h: History) -> int:
    return min(j.id for j in h.jobs.values() if j.workload == "fast" and j.state == "completed")


def succeeding_job_died_with_attempts_left(h: History) -> History:
    return job_row(h, _first_completed_fast(h), state="dead")


def cancelling_job_ended_dead(h: History) -> History:
    assert h.jobs[9].workload == "cancel"
    return job_row(h, 9, state="dead")


BUGS: list[tuple[Callable[[History], History], list[tuple[str, int | None]]]] = [
    (lost_running, [("LOST", 1)]),
    (lost_available, [("LOST", 999)]),
    (history_of_vanished_job, [("LOST", 1)]),
    (phantom_completion, [("PHANTOM", 1)]),
    (effect_on_cancel, [("PHANTOM", 9)]),
    (effect_on_poison, [("PHANTOM", 10)]),
    (late_effect, [("PHANTOM", 1)]),
    (stale_write_accepted, [("STALE_ACCEPTED", ZOMBIE)]),
    (attempt_beyond_max, [("ATTEMPTS", 7)]),
    (duplicate_start, [("ATTEMPTS", 1)]),
    (snooze_started_three_times, [("ATTEMPTS", 8)]),
    (unattributed_duplicate, [("DUPLICATE_UNATTRIBUTED", 1)]),
    (duplicate_in_tx, [("DUPLICATE_IN_TX", KILLED_DUPLICATE)]),
    (slow_recovery, [("RECOVERY_SLOW", KILLED_SLOW)]),
    (missing_rescue, [("RECOVERY_MISSING", KILLED_SLOW)]),
    (drain_overrun, [("DRAIN_OVERRUN", None)]),
    (succeeding_job_died_with_attempts_left, [("WRONG_OUTCOME", 1)]),
    (cancelling_job_ended_dead, [("WRONG_OUTCOME", 9)]),
]


@pytest.mark.parametrize(("plant", "expected"), BUGS, ids=[plant.__name__ for plant, _ in BUGS])
def test_each_bug_is_reported_alone(
    plant: Callable[[History], History], expected: list[tuple[str, int | None]]
) -> None:
    report = check(plant(clean()))
    assert violations(report) == expected, report.summary()
    assert not report.ok
    assert all(v.code in CODES for v in report.violations)
    figures = report.to_json()
    assert figures["violations_total"] == len(expected)
    assert figures["violations_by_code"] == {expected[0][0]: len(expected)}


def test_counters_follow_the_violations() -> None:
    assert check(lost_running(clean())).lost == 1
    assert check(phantom_completion(clean())).phantom == 1
    assert check(stale_write_accepted(clean())).stale_accepted == 1
    assert check(attempt_beyond_max(clean())).attempt_violations == 1
    report = check(unattributed_duplicate(clean()))
    assert (report.duplicates_total, report.duplicates_attributed) == (3, 2)
    assert report.duplicates_unattributed == 1
    report = check(duplicate_in_tx(clean()))
    assert report.duplicates_in_tx == 1
    assert report.duplicates_by_fault == {"kill": 1}
    report = check(slow_recovery(clean()))
    assert report.recovery_worst == pytest.approx(4.0, abs=1e-5)
    assert report.recovery_samples == 3
    assert check(drain_overrun(clean())).drain_worst == pytest.approx(2.5)


def test_a_stale_acceptance_still_attributes_the_stale_execution() -> None:
    # The zombie's effect is the extra one (the stop explains it), not the newer claim's.
    report = check(stale_write_accepted(clean()))
    assert report.duplicates_by_fault == {"kill": 1, "stop": 1}
    assert report.duplicates_unattributed == 0


def test_a_recovery_overlapping_a_database_outage_is_not_judged() -> None:
    # PostgreSQL crashes just after the kill: the rescue waits for it, so the
    # lease bound does not apply; the sample is counted as confounded.
    h = slow_recovery(clean())
    h = dataclasses.replace(h, faults=[*h.faults, Fault("pg_crash", TK + 0.5, TK + 2.0, None)])
    report = check(h)
    assert report.ok, report.summary()
    assert report.recovery_confounded == 2  # the slow job and the duplicate (its rescue too)
    assert report.recovery_samples == 1


def test_a_stopped_process_may_finish_its_job_without_a_rescue() -> None:
    # The paused handler's job was never rescued (say its complete_tx held the row
    # lock, so the rescuer skipped it); after SIGCONT it finishes and completes.
    # No rescue, so no recovery sample, and no violation.
    b = clean_builder()
    b.start(311, 1, 103, TS - 0.5)
    b.effect(311, 1, 103, TS - 0.5, TS + 5.05)
    b.final(311, "fast", "completed", 1, TS + 5.08)
    report = check(b.build())
    assert report.ok, report.summary()
    assert report.recovery_samples == 3


def test_a_snoozed_attempt_cut_by_a_kill_needs_no_rescue() -> None:
    # Killed right after the snooze committed (give-back leaves no trace but the
    # same attempt starting again): indeterminate, not RECOVERY_MISSING.
    b = clean_builder()
    b.start(312, 1, 101, TK - 0.01)
    end = b.run_ok(312, 1, 104, TK + 0.3)
    b.final(312, "snooze", "completed", 1, end + 0.01)
    report = check(b.build())
    assert report.ok, report.summary()


def test_an_unterminated_job_is_lost_not_missing_its_rescue() -> None:
    h = job_row(clean(), KILLED_SLOW, state="running", finalized_at=None, errors=[])
    assert violations(check(h)) == [("LOST", KILLED_SLOW)]


def test_summary_lists_at_most_twenty_violating_jobs_with_their_timelines() -> None:
    h = clean()
    jobs = {
        job_id: dataclasses.replace(job, state="running", finalized_at=None)
        if job_id <= 30
        else job
        for job_id, job in h.jobs.items()
    }
    report = check(dataclasses.replace(drain_overrun(h), jobs=jobs))
    assert report.lost == 30
    text = report.summary()
    assert "VIOLATIONS: 31 (LOST 30, DRAIN_OVERRUN 1)" in text
    assert "DRAIN_OVERRUN: pid 102" in text
    assert text.count("\njob ") == 20
    assert "job 1 (fast, running, attempt 1/25, finalized ?):" in text
    assert "... and 10 more violating jobs: 21, 22," in text
    # A timeline shows the job's records in time order, with the faults near it.
    timeline = check(stale_write_accepted(clean())).summary()
    block = timeline[timeline.index(f"job {ZOMBIE} (") :]
    order = [
        "start     attempt 1 pid 103",
        "FAULT     stop of pid 103",
        "error     attempt 1: drover: lease expired",
        "start     attempt 2 pid 102",
        "effect    attempt 2 pid 102",
        "effect    attempt 1 pid 103",
        "finalized completed at attempt 1",
    ]
    positions = [block.index(line) for line in order]
    assert positions == sorted(positions)
    assert "! STALE_ACCEPTED: attempt 2 was claimed" in block


def test_violation_json() -> None:
    v = Violation("LOST", 3, "left running")
    assert v.to_json() == {"code": "LOST", "job": 3, "detail": "left running"}


# --- history files --------------------------------------------------------------------


def test_dump_and_load_round_trip(tmp_path: Path) -> None:
    h = clean()
    dump_history(h, tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names[:3] == ["db.jsonl", "orchestrator.jsonl", "params.jsonl"]
    assert "worker-101.jsonl" in names and "worker-104.jsonl" in names
    loaded = load_history(tmp_path)
    assert loaded == h.canonical()
    assert check(loaded).to_json() == check(h).to_json()


def test_a_truncated_last_line_is_dropped(tmp_path: Path) -> None:
    h = clean()
    dump_history(h, tmp_path)
    with (tmp_path / "worker-103.jsonl").open("a") as out:
        out.write('{"ev":"start","job":12,"attempt":2,"pi')  # SIGKILLed mid-write
    assert load_history(tmp_path) == h.canonical()


def test_a_malformed_line_elsewhere_is_an_error(tmp_path: Path) -> None:
    dump_history(clean(), tmp_path)
    path = tmp_path / "worker-103.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + '{"ev":"start","job":12\n' + "".join(lines[1:]))
    with pytest.raises(ValueError, match=r"worker-103\.jsonl:2: not a JSON line"):
        load_history(tmp_path)


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"ev": "start", "job": 1, "attempt": 1, "pid": 7}, "has no field 't'"),
        ({"ev": "start", "job": "1", "attempt": 1, "pid": 7, "t": 1.0}, "must be an integer"),
        ({"ev": "start", "job": 1, "attempt": True, "pid": 7, "t": 1.0}, "must be an integer"),
        ({"ev": "fault", "kind": "kill", "t_start": 1, "t_end": None, "pid": 1}, "a number"),
        ({"job": 1}, "has no field 'ev'"),
        (["ev", "start"], "must be a JSON object"),
    ],
)
def test_a_malformed_record_names_its_file_and_line(
    tmp_path: Path, record: Any, message: str
) -> None:
    dump_records(tmp_path / "params.jsonl", [record_of(PARAMS)])
    (tmp_path / "w.jsonl").write_text(json.dumps(record) + "\n")
    with pytest.raises(ValueError, match=message) as caught:
        load_history(tmp_path)
    assert "w.jsonl:1" in str(caught.value)


def test_records_as_the_harness_writes_them(tmp_path: Path) -> None:
    # Unknown record types and fields are ignored; null errors mean none; params may be passed.
    lines = [
        {"ev": "process", "pid": 7, "t": T0, "what": "started"},
        {"ev": "start", "job": 1, "attempt": 1, "pid": 7, "t": T0 + 1},
        {"ev": "effect", "job": 1, "attempt": 1, "pid": 7, "t_start": T0 + 1, "t_end": T0 + 2,
         "db_at": T0 + 2, "tx": False},
        {"ev": "job", "id": 1, "workload": "fast", "state": "completed", "attempt": 1,
         "max_attempts": 25, "finalized_at": T0 + 2.1, "errors": None},
        {"ev": "fault", "kind": "terminate", "t_start": T0 + 3, "t_end": T0 + 3.1, "pid": None,
         "backends": 3},
        {"ev": "fault", "kind": "drain", "t_start": T0 + 4, "t_end": T0 + 4.5, "pid": 7,
         "budget": 1.0, "exit_code": 0},
        {"ev": "refused", "job": 1, "attempt": 1, "pid": 7, "t": T0 + 2.2, "reason": "outcome"},
        {"ev": "process", "pid": 7, "t": T0 + 5, "what": "stopped", "code": 0},
    ]  # fmt: skip
    dump_records(tmp_path / "all.jsonl", lines)
    with pytest.raises(ValueError, match="no params record"):
        load_history(tmp_path)
    h = load_history(tmp_path, PARAMS)
    assert h.jobs == {1: JobFinal(1, "fast", "completed", 1, 25, T0 + 2.1, [])}
    assert h.faults == [
        Fault("terminate", T0 + 3, T0 + 3.1, None),
        Fault("drain", T0 + 4, T0 + 4.5, 7, budget=1.0, exit_code=0),
    ]
    assert h.params == PARAMS
    report = check(h)
    assert report.ok, report.summary()
    assert report.refused == 1
    assert report.drains == 1


def test_params_come_from_the_directory_unless_given(tmp_path: Path) -> None:
    dump_history(clean(), tmp_path)
    assert load_history(tmp_path).params == PARAMS
    tx = dataclasses.replace(PARAMS, mode="tx", epsilon=0.5)
    assert load_history(tmp_path, tx).params == tx
    dump_records(tmp_path / "zz.jsonl", [record_of(tx)])
    with pytest.raises(ValueError, match="params record disagrees"):
        load_history(tmp_path)


def test_a_job_recorded_twice_is_an_error(tmp_path: Path) -> None:
    dump_history(clean(), tmp_path)
    dump_records(tmp_path / "zz.jsonl", [record_of(clean().jobs[5])])
    with pytest.raises(ValueError, match="job 5 recorded twice"):
        load_history(tmp_path)


def test_load_needs_a_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_history(tmp_path / "absent")


@pytest.mark.parametrize("mode", ["", "exactly-once"])
def test_params_refuse_an_unknown_mode(mode: str) -> None:
    with pytest.raises(ValueError, match="mode"):
        Params(lease=1, rescue_interval=1, heartbeat=1, poll_interval=1, mode=mode)


def test_drain_slack_replaces_epsilon_for_drains_only() -> None:
    # The planted drain took 2.5 s against a 1 s budget.
    overrun = drain_overrun(clean())
    assert [v.code for v in check(overrun).violations] == ["DRAIN_OVERRUN"]
    roomy = dataclasses.replace(overrun, params=dataclasses.replace(PARAMS, drain_slack=2.0))
    assert check(roomy).ok
    # A wide epsilon does not widen the drain bound once drain_slack is given.
    tight = dataclasses.replace(PARAMS, epsilon=2.0, drain_slack=1.0)
    assert [v.code for v in check(dataclasses.replace(overrun, params=tight)).violations] == [
        "DRAIN_OVERRUN"
    ]
    with pytest.raises(ValueError, match="drain_slack"):
        dataclasses.replace(PARAMS, drain_slack=-1.0)


def test_duplicates_are_cross_checked_against_the_jobs_ledgers() -> None:
    history = clean()
    assert check(history).duplicates_in_ledger == 0, "no ledger in the snapshot: none counted"
    attempts: dict[int, set[int]] = {}
    for e in history.effects:
        attempts.setdefault(e.job, set()).add(e.attempt)
    twice = {job for job, seen in attempts.items() if len(seen) > 1}
    assert twice, "the clean history has duplicates to explain"
    jobs = dict(history.jobs)
    for job in twice:
        older = sorted(attempts[job])[:-1]
        jobs[job] = dataclasses.replace(
            jobs[job], ledger=[{"event": "rescued", "attempt": a} for a in older]
        )
    report = check(dataclasses.replace(history, jobs=jobs))
    assert report.ok, report.summary()
    assert report.duplicates_in_ledger == report.duplicates_total == 2
    assert report.to_json()["duplicates_in_ledger"] == 2
    assert "in the job's ledger 2" in report.summary()
