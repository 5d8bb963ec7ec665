"""The history checker: did drover keep its delivery contract under the faults the run injected?

``check`` reads a ``History`` (the database's
final rows plus what the processes recorded) and returns a ``Report``:
counters, recovery and drain figures, and one ``Violation`` per broken
invariant (docs/reliability.md §3.1). Pure Python, no database.

The checker never demands a history record for something the database
already settled (the "indeterminate" rule, §3.2): a process killed right
after its completion committed may have left no ``start`` or outcome record,
and the row alone decides. What it does demand of the history is limited to
what a fault cannot erase: an effect row is committed before the handler
returns, and a rescue is written by the rescuer, not by the dead process.

Violation codes (``CODES``):

``LOST``
    A job not in a terminal state after the final drain, or history records of
    a job the database no longer has.
``PHANTOM``
    A completion nothing backs: ``completed`` with no effect at all, or none of
    the accepted attempt, or that effect reaching the database more than ε
    after the completion; or any effect of a ``cancel``/``poison`` job.
``STALE_ACCEPTED``
    An attempt was started (or wrote its effect) beyond the row's final
    attempt: a newer claim existed, yet an older attempt's write won.
``ATTEMPTS``
    An attempt above ``max_attempts`` or below 1, or one attempt started twice
    (a ``snooze`` job may restart one attempt once: a snooze gives it back).
``DUPLICATE_UNATTRIBUTED``
    An extra execution (an effect of an attempt other than the accepted one)
    that no fault of its process, or no database/network-wide fault, explains.
``DUPLICATE_IN_TX``
    In ``tx`` mode effects commit only with the completion, so any job with
    more than one effect is a violation, explained or not.
``RECOVERY_SLOW``
    A job in flight in a killed or stopped process was rescued more than
    lease + rescue_interval + ε after the fault.
``RECOVERY_MISSING``
    A job in flight in a killed process ended without ever being rescued: its
    attempt moved on without the rescuer (so its lease was overridden).
``DRAIN_OVERRUN``
    A drain took longer than its budget + ε.
``LIMIT_EXCEEDED``
    More executions held a concurrency limit's slots (one partition's) at
    once than the limit allows (``drover.faults.harness.limit_check``).
``DEPENDENT_EARLY``, ``CALLBACK_DUPLICATE``, ``STEP_DUPLICATE``, ``DEPENDENT_OF_FAILED_RAN``
    A workflow step started before a dependency completed, started again
    with no failure or fault to explain it, or ran although a dependency
    failed (``drover.faults.harness.workflow_check``). A step left
    ``pending`` is ``LOST``, its detail saying which release was lost.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from drover.faults.harness.history import TERMINAL_STATES, Effect, Fault, History, JobFinal, Start
from drover.faults.harness.limit_check import Exceeded, LimitFinding, check_limits
from drover.faults.harness.workflow_check import WORKFLOW_CODES, check_workflows, pending_reason

__all__ = ["CODES", "NO_EFFECT_WORKLOADS", "RESCUE_PREFIX", "Report", "Violation", "check"]

RESCUE_PREFIX = "drover: lease expired"
"""An error entry whose ``error`` starts with this is the rescuer's, not the handler's."""

NO_EFFECT_WORKLOADS = frozenset({"cancel", "poison"})
"""Workloads whose handler never succeeds, so never leaves an effect."""

_EXPECTED_STATE = {"cancel": "cancelled", "poison": "dead"}
"""The terminal state each workload must reach; the others must complete."""

CODES: dict[str, str] = {
    "LOST": "a job not terminal after the final drain (or gone from the database)",
    "PHANTOM": "a completion no effect of the accepted attempt backs, or an impossible effect",
    "STALE_ACCEPTED": "an attempt newer than the row's final attempt was started",
    "ATTEMPTS": "an attempt out of range, or one attempt started twice",
    "DUPLICATE_UNATTRIBUTED": "an extra execution no fault explains",
    "DUPLICATE_IN_TX": "more than one effect of a job in tx mode",
    "RECOVERY_SLOW": "a dead or paused worker's job rescued later than lease + rescue + epsilon",
    "RECOVERY_MISSING": "a killed worker's job moved on without a rescue",
    "DRAIN_OVERRUN": "a drain took longer than its budget + epsilon",
    "WRONG_OUTCOME": "a job ended in a state its workload cannot explain (a job that succeeds "
    "died with attempts left, a cancelling job did not end cancelled)",
    "LIMIT_EXCEEDED": "more executions held a concurrency limit's slots at once than it allows",
    **WORKFLOW_CODES,
}
"""Every violation code the checker reports, with a one-line meaning."""

_REPLAYABLE_STARTS = {"snooze": 1}
"""Extra starts of one attempt a workload may have: a snooze gives its attempt back."""

_MAX_JOBS_IN_SUMMARY = 20
_MAX_VIOLATIONS_IN_JSON = 100


@dataclass(frozen=True)
class Violation:
    """One broken invariant: a code from ``CODES``, the job (None if not a job's), and why."""

    code: str
    job: int | None
    detail: str

    def to_json(self) -> dict[str, Any]:
        """``{"code", "job", "detail"}``."""
        return {"code": self.code, "job": self.job, "detail": self.detail}


@dataclass
class Report:
    """What ``check`` found: counters, figures and violations.

    ``states`` and ``faults`` count jobs by final state and faults by kind;
    ``lost``, ``wrong_outcome``, ``phantom``, ``stale_accepted`` and
    ``attempt_violations`` count jobs with that violation. ``duplicates_total``
    counts extra executions (effects beyond the accepted one), split into
    attributed (by the kind of fault that explains each:
    ``duplicates_by_fault``) and unattributed;
    ``duplicates_in_tx`` counts jobs with more than one effect in tx mode.
    Recovery samples are rescue time minus fault time for the jobs in flight in
    a killed or stopped process; samples overlapping a database/network-wide
    fault are counted in ``recovery_confounded`` and left out of the figures
    (the lease bound is for a process fault alone). ``drains`` counts drains
    with a budget. ``limits`` has, per concurrency limit of the history, its
    ``concurrency``, the ``executions`` it counted and the ``peak`` holding
    its slots at once (in one partition); ``limit_exceeded`` counts the
    instants a limit was exceeded. ``workflows`` has the workflow check's
    figures (``WorkflowFindings.figures``), empty for a history without
    workflow steps. ``history`` is what was checked (for ``summary``).
    """

    jobs: int = 0
    states: dict[str, int] = field(default_factory=dict)
    effects: int = 0
    starts: int = 0
    refused: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    lost: int = 0
    wrong_outcome: int = 0
    phantom: int = 0
    stale_accepted: int = 0
    attempt_violations: int = 0
    duplicates_total: int = 0
    duplicates_attributed: int = 0
    duplicates_unattributed: int = 0
    duplicates_by_fault: dict[str, int] = field(default_factory=dict)
    duplicates_in_tx: int = 0
    duplicates_in_ledger: int = 0
    recovery_samples: int = 0
    recovery_worst: float | None = None
    recovery_p99: float | None = None
    recovery_confounded: int = 0
    drains: int = 0
    drain_worst: float | None = None
    limits: dict[str, dict[str, int]] = field(default_factory=dict)
    limit_exceeded: int = 0
    workflows: dict[str, Any] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)
    history: History | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        """True iff there is no violation."""
        return not self.violations

    def codes(self) -> dict[str, int]:
        """How many violations of each code (only codes that occur)."""
        return dict(Counter(v.code for v in self.violations))

    def to_json(self) -> dict[str, Any]:
        """The figures as a JSON-ready dict (at most 100 violations listed; the total is given).

        Durations are seconds, rounded to the microsecond.
        """
        return {
            "ok": self.ok,
            "jobs": self.jobs,
            "states": dict(self.states),
            "effects": self.effects,
            "starts": self.starts,
            "refused": self.refused,
            "faults": dict(self.faults),
            "lost": self.lost,
            "wrong_outcome": self.wrong_outcome,
            "phantom": self.phantom,
            "stale_accepted": self.stale_accepted,
            "attempt_violations": self.attempt_violations,
            "duplicates_total": self.duplicates_total,
            "duplicates_attributed": self.duplicates_attributed,
            "duplicates_unattributed": self.duplicates_unattributed,
            "duplicates_by_fault": dict(self.duplicates_by_fault),
            "duplicates_in_tx": self.duplicates_in_tx,
            "duplicates_in_ledger": self.duplicates_in_ledger,
            "recovery_samples": self.recovery_samples,
            "recovery_worst": _micro(self.recovery_worst),
            "recovery_p99": _micro(self.recovery_p99),
            "recovery_confounded": self.recovery_confounded,
            "drains": self.drains,
            "drain_worst": _micro(self.drain_worst),
            "limits": {key: dict(figures) for key, figures in self.limits.items()},
            "limit_exceeded": self.limit_exceeded,
            "workflows": dict(self.workflows),
            "violations_total": len(self.violations),
            "violations_by_code": self.codes(),
            "violations": [v.to_json() for v in self.violations[:_MAX_VIOLATIONS_IN_JSON]],
        }

    def summary(self) -> str:
        """A human summary: the figures, then up to 20 violating jobs, each with its timeline."""
        duplicates = f"duplicates {self.duplicates_total}: attributed {self.duplicates_attributed}"
        if self.duplicates_by_fault:
            duplicates += f" ({_counts(self.duplicates_by_fault)})"
        duplicates += f", unattributed {self.duplicates_unattributed}"
        duplicates += f"; in the job's ledger {self.duplicates_in_ledger}"
        if self.duplicates_in_tx:
            duplicates += f"; jobs with more than one effect in tx mode {self.duplicates_in_tx}"
        recovery = (
            f"recovery: {self.recovery_samples} samples, worst {_secs(self.recovery_worst)}, "
            f"p99 {_secs(self.recovery_p99)}"
        )
        if self.history is not None:
            p = self.history.params
            recovery += f" (bound {_secs(p.lease + p.rescue_interval + p.epsilon)})"
        if self.recovery_confounded:
            recovery += f"; {self.recovery_confounded} confounded by a database/network fault"
        lines = [
            f"history: {self.jobs} jobs ({_counts(self.states)}); {self.effects} effects, "
            f"{self.starts} starts, {self.refused} stale writes refused",
            f"faults: {_counts(self.faults) or 'none'}",
            f"lost {self.lost}, wrong outcome {self.wrong_outcome}, phantom {self.phantom}, "
            f"stale accepted {self.stale_accepted}, attempt violations {self.attempt_violations}",
            duplicates,
            recovery,
            f"drains: {self.drains}, worst {_secs(self.drain_worst)}",
        ]
        if self.limits:
            lines.append(
                "limits (peak of limit, executions): "
                + ", ".join(
                    f"{key} {f['peak']} of {f['concurrency']} ({f['executions']})"
                    for key, f in self.limits.items()
                )
            )
        if self.workflows.get("steps"):
            w = self.workflows
            lines.append(
                f"workflows: {w['workflows']} ({w['steps']} steps, {w['dependents']} waiting); "
                f"reruns: retried {w['retried']}, attributed {w['duplicates_attributed']}, "
                f"unattributed {w['duplicates_unattributed']}; cancelled by a dependency "
                f"{w['cancelled_by_dependency']}; release lag worst {_secs(w['release_lag_worst'])}"
            )
        if self.ok:
            lines.append("OK: no violations")
            return "\n".join(lines)
        lines.append(f"VIOLATIONS: {len(self.violations)} ({_counts(self.codes())})")
        unassigned = [v for v in self.violations if v.job is None]
        for v in unassigned:
            lines.append(f"  {v.code}: {v.detail}")
        by_job: dict[int, list[Violation]] = {}
        for v in self.violations:
            if v.job is not None:
                by_job.setdefault(v.job, []).append(v)
        shown = list(by_job)[:_MAX_JOBS_IN_SUMMARY]
        timeline = _Timeline(self.history) if self.history is not None else None
        for job_id in shown:
            lines.append("")
            lines.append(timeline.header(job_id) if timeline else f"job {job_id}:")
            lines.extend(f"  ! {v.code}: {v.detail}" for v in by_job[job_id])
            if timeline:
                lines.extend(timeline.events(job_id))
        rest = list(by_job)[_MAX_JOBS_IN_SUMMARY:]
        if rest:
            ids = ", ".join(str(j) for j in rest[:50]) + (", ..." if len(rest) > 50 else "")
            lines.append("")
            lines.append(f"... and {len(rest)} more violating jobs: {ids}")
        return "\n".join(lines)


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items())


def _micro(value: float | None) -> float | None:
    """Seconds rounded to the microsecond (error entries' resolution)."""
    return None if value is None else round(value, 6)


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


def _parse_at(value: object) -> float | None:
    """An error entry's ``at`` (ISO-8601) as epoch seconds; naive means UTC; None if unreadable."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


@dataclass(frozen=True)
class _Entry:
    """One error entry of a job, parsed."""

    attempt: int | None
    at: float | None
    error: str

    @property
    def rescue(self) -> bool:
        return self.error.startswith(RESCUE_PREFIX)


def _entries(job: JobFinal) -> list[_Entry]:
    out = []
    for raw in job.errors:
        attempt = raw.get("attempt")
        error = raw.get("error")
        out.append(
            _Entry(
                attempt=attempt
                if isinstance(attempt, int) and not isinstance(attempt, bool)
                else None,
                at=_parse_at(raw.get("at")),
                error=error if isinstance(error, str) else "",
            )
        )
    return out


def _p99(samples: list[float]) -> float:
    """The nearest-rank 99th percentile."""
    ordered = sorted(samples)
    return ordered[max(1, math.ceil(0.99 * len(ordered))) - 1]


class _Checker:
    """One pass over a history; fills a ``Report``."""

    def __init__(self, history: History) -> None:
        self.h = history
        self.p = history.params
        self.report = Report(history=history)
        self.starts_by_job: dict[int, list[Start]] = defaultdict(list)
        self.starts_by_pid: dict[int, list[Start]] = defaultdict(list)
        self.effects_by_job: dict[int, list[Effect]] = defaultdict(list)
        for s in sorted(history.starts, key=lambda s: s.t):
            self.starts_by_job[s.job].append(s)
            self.starts_by_pid[s.pid].append(s)
        for e in sorted(history.effects, key=lambda e: (e.t_end, e.t_start)):
            self.effects_by_job[e.job].append(e)
        self.entries = {job_id: _entries(job) for job_id, job in history.jobs.items()}
        self.global_faults = [f for f in history.faults if f.pid is None]

    def flag(self, code: str, job: int | None, detail: str) -> None:
        self.report.violations.append(Violation(code, job, detail))

    def run(self) -> Report:
        h, r = self.h, self.report
        r.jobs = len(h.jobs)
        r.states = dict(sorted(Counter(j.state for j in h.jobs.values()).items()))
        r.effects = len(h.effects)
        r.starts = len(h.starts)
        r.refused = len(h.refused)
        r.faults = dict(sorted(Counter(f.kind for f in h.faults).items()))
        self.lost()
        for job in h.jobs.values():
            self.outcome(job)
            self.phantom(job)
            self.stale(job)
            self.attempts(job)
            self.duplicates(job)
        self.recovery()
        self.drain()
        self.limits()
        self.workflows()
        r.duplicates_by_fault = dict(sorted(r.duplicates_by_fault.items()))
        order = {code: n for n, code in enumerate(CODES)}
        r.violations.sort(key=lambda v: (order.get(v.code, len(order)), v.job or 0))
        return r

    # 1. nothing lost ------------------------------------------------------------------------

    def lost(self) -> None:
        for job in self.h.jobs.values():
            if job.state not in TERMINAL_STATES:
                self.report.lost += 1
                why = pending_reason(job, self.h.jobs) if job.state == "pending" else ""
                self.flag(
                    "LOST",
                    job.id,
                    f"{job.workload} job left {job.state} (attempt {job.attempt}/"
                    f"{job.max_attempts}) after the final drain" + (f": {why}" if why else ""),
                )
        unknown = sorted((set(self.starts_by_job) | set(self.effects_by_job)) - set(self.h.jobs))
        for job_id in unknown:
            self.report.lost += 1
            self.flag(
                "LOST",
                job_id,
                f"{len(self.starts_by_job.get(job_id, []))} start(s) and "
                f"{len(self.effects_by_job.get(job_id, []))} effect(s) recorded, "
                "but the job is not in the database snapshot",
            )

    # 1b. the outcome the workload implies ----------------------------------------------------

    def outcome(self, job: JobFinal) -> None:
        if job.state not in TERMINAL_STATES or not job.workload:
            return  # LOST already says so; a job not of the workload has no expectation
        if any(
            d in self.h.jobs and self.h.jobs[d].state in ("dead", "cancelled")
            for d in job.depends_on
        ):
            return  # a dependency failed: the workflow check says what this step must be
        expected = _EXPECTED_STATE.get(job.workload, "completed")
        if job.state == expected:
            return
        if job.state == "dead" and len(self.entries.get(job.id, [])) >= job.max_attempts:
            return  # every attempt was spent (faults can spend them): dead is honest
        self.report.wrong_outcome += 1
        errors = self.entries.get(job.id, [])
        last = errors[-1].error if errors else "no error recorded"
        self.flag(
            "WRONG_OUTCOME",
            job.id,
            f"a {job.workload} job should end {expected} but ended {job.state} at attempt "
            f"{job.attempt}/{job.max_attempts} with {len(errors)} error(s); last: {last}",
        )

    # 2. no phantom --------------------------------------------------------------------------

    def phantom(self, job: JobFinal) -> None:
        effects = self.effects_by_job.get(job.id, [])
        reasons = []
        if job.workload in NO_EFFECT_WORKLOADS and effects:
            attempts = ", ".join(str(e.attempt) for e in effects)
            reasons.append(
                f"a {job.workload} job never succeeds, yet it has {len(effects)} effect(s) "
                f"(attempts {attempts})"
            )
        if job.state == "completed":
            accepted = [e for e in effects if e.attempt == job.attempt]
            if not effects:
                reasons.append(f"completed at attempt {job.attempt} without any effect")
            elif not accepted:
                seen = ", ".join(str(e.attempt) for e in effects)
                reasons.append(
                    f"completed at attempt {job.attempt}, but only attempts {seen} have an effect: "
                    "the accepted completion's handler never finished"
                )
            elif job.finalized_at is not None:
                first = min(e.db_at for e in accepted)
                # Both times are the database's. In plain mode the effect commits
                # before the handler returns, so before the completion's
                # transaction starts: a later effect means the completion came
                # from elsewhere (a stale write accepted). In tx mode the effect
                # is written inside the completion's transaction, after its start.
                slack = 0.001 if self.p.mode == "plain" else self.p.epsilon
                if first > job.finalized_at + slack:
                    reasons.append(
                        f"the effect of the accepted attempt {job.attempt} reached the database "
                        f"{first - job.finalized_at:.3f} s after the completion (> "
                        f"{slack} s): the completion came first"
                    )
        if reasons:
            self.report.phantom += 1
            self.flag("PHANTOM", job.id, "; ".join(reasons))

    # 3. no stale write accepted --------------------------------------------------------------

    def _highest_attempt(self, job_id: int) -> tuple[int, str] | None:
        best: tuple[int, str] | None = None
        for s in self.starts_by_job.get(job_id, []):
            if best is None or s.attempt > best[0]:
                best = (s.attempt, f"started by pid {s.pid}")
        for e in self.effects_by_job.get(job_id, []):
            if best is None or e.attempt > best[0]:
                best = (e.attempt, f"with an effect by pid {e.pid}")
        return best

    def stale(self, job: JobFinal) -> None:
        highest = self._highest_attempt(job.id)
        if highest is None or highest[0] <= job.attempt:
            return
        attempt, how = highest
        self.report.stale_accepted += 1
        self.flag(
            "STALE_ACCEPTED",
            job.id,
            f"attempt {attempt} was claimed ({how}) but the row ended {job.state} at attempt "
            f"{job.attempt}: a superseded attempt's write was accepted",
        )

    # 4. bounded attempts ------------------------------------------------------------------------

    def attempts(self, job: JobFinal) -> None:
        starts = self.starts_by_job.get(job.id, [])
        effects = self.effects_by_job.get(job.id, [])
        reasons = []
        if job.attempt > job.max_attempts:
            reasons.append(f"row attempt {job.attempt} > max_attempts {job.max_attempts}")
        ran = {s.attempt for s in starts} | {e.attempt for e in effects}
        over = sorted(a for a in ran if a > job.max_attempts)
        if over:
            reasons.append(f"attempts {over} ran, above max_attempts {job.max_attempts}")
        under = sorted(a for a in ran if a < 1)
        if under:
            reasons.append(f"attempts {under} ran, below 1")
        per_attempt: dict[int, list[int]] = defaultdict(list)
        for s in starts:
            per_attempt[s.attempt].append(s.pid)
        surplus = sum(len(pids) - 1 for pids in per_attempt.values())
        if surplus > _REPLAYABLE_STARTS.get(job.workload, 0):
            twice = "; ".join(
                f"attempt {a} started {len(pids)} times (pids {', '.join(map(str, pids))})"
                for a, pids in sorted(per_attempt.items())
                if len(pids) > 1
            )
            reasons.append(twice)
        if reasons:
            self.report.attempt_violations += 1
            self.flag("ATTEMPTS", job.id, "; ".join(reasons))

    # 5. duplicates, attributed to faults ----------------------------------------------------

    def _explaining_fault(self, e: Effect) -> Fault | None:
        """The fault that best explains why ``e``'s completion was not accepted, if any."""
        return self.explain(e.pid, e.t_start, e.t_end)

    def explain(self, pid: int, t_start: float, t_end: float) -> Fault | None:
        """The fault that best explains why an execution by ``pid`` over [t_start, t_end] ran again.

        A fault of that process, or a database- or network-wide one, that
        overlaps the execution or the lease and rescue that follow it;
        the process's own and the nearest first.
        """
        p = self.p
        lo = t_start - p.epsilon
        hi = t_end + p.lease + p.rescue_interval + p.epsilon
        candidates = [
            f
            for f in self.h.faults
            if (f.pid is None or f.pid == pid) and f.t_start <= hi and f.t_end >= lo
        ]
        if not candidates:
            return None

        def rank(f: Fault) -> tuple[bool, float, float]:
            gap = max(0.0, f.t_start - t_end, t_start - f.t_end)
            return (f.pid is None, gap, f.t_start)

        return min(candidates, key=rank)

    def duplicates(self, job: JobFinal) -> None:
        effects = self.effects_by_job.get(job.id, [])
        if len(effects) < 2:
            return
        r = self.report
        # The execution that counts: the accepted attempt's, or, if a stale write was
        # accepted (STALE_ACCEPTED), the newest claim's; failing that, the first effect.
        highest = self._highest_attempt(job.id)
        reference = max(job.attempt, highest[0] if highest else 0)
        keep = next((i for i, e in enumerate(effects) if e.attempt == reference), 0)
        unexplained = []
        # The attempts the job's own duplicate ledger (ADR 0037) says ran again or were
        # fenced out: the database's account of the duplicate, beside the fault's.
        in_ledger = {entry.get("attempt") for entry in job.ledger}
        for i, e in enumerate(effects):
            if i == keep:
                continue
            r.duplicates_total += 1
            if e.attempt in in_ledger:
                r.duplicates_in_ledger += 1
            fault = self._explaining_fault(e)
            if fault is None:
                r.duplicates_unattributed += 1
                unexplained.append(e)
            else:
                r.duplicates_attributed += 1
                r.duplicates_by_fault[fault.kind] = r.duplicates_by_fault.get(fault.kind, 0) + 1
        if self.p.mode == "tx":
            r.duplicates_in_tx += 1
            attempts = ", ".join(f"{e.attempt} (pid {e.pid})" for e in effects)
            self.flag(
                "DUPLICATE_IN_TX",
                job.id,
                f"{len(effects)} effects in tx mode (attempts {attempts}); a tx effect commits "
                "only with the completion, so at most one may exist",
            )
        elif unexplained:
            what = "; ".join(
                f"attempt {e.attempt} by pid {e.pid} ran {e.t_start:.3f}..{e.t_end:.3f}"
                for e in unexplained
            )
            self.flag(
                "DUPLICATE_UNATTRIBUTED",
                job.id,
                f"{len(unexplained)} extra execution(s) no fault explains: {what} (accepted "
                f"attempt {job.attempt} of a {job.state} job)",
            )

    # 6. recovery after kill / stop ------------------------------------------------------------

    def _settled_before(self, start: Start, job: JobFinal, t: float) -> bool:
        """Whether ``start``'s attempt provably ended by ``t`` (database or later claim)."""
        eps = self.p.epsilon
        final = job.finalized_at
        if job.state in TERMINAL_STATES and final is not None and final <= t + eps:
            return True
        for entry in self.entries.get(job.id, []):
            if entry.attempt != start.attempt or entry.at is None:
                continue
            if entry.rescue and entry.at < t:
                return True  # rescued before this fault (an earlier one took it)
            if not entry.rescue and entry.at <= t + eps:
                return True  # its handler failed, cancelled or was handed back
        return any(
            other is not start and start.t < other.t <= t
            for other in self.starts_by_job.get(job.id, [])
        )

    def _rescue_after(self, job_id: int, attempt: int, t: float) -> float | None:
        times = [
            e.at
            for e in self.entries.get(job_id, [])
            if e.rescue and e.attempt == attempt and e.at is not None and e.at >= t
        ]
        return min(times) if times else None

    def recovery(self) -> None:
        p = self.p
        bound = p.lease + p.rescue_interval + p.epsilon
        samples: list[float] = []
        for fault in self.h.faults:
            if fault.kind not in ("kill", "stop") or fault.pid is None:
                continue
            t = fault.t_start
            for start in self.starts_by_pid.get(fault.pid, []):
                job = self.h.jobs.get(start.job)
                if start.t > t or job is None or self._settled_before(start, job, t):
                    continue
                rescued = self._rescue_after(job.id, start.attempt, t)
                if rescued is None:
                    # A stopped process may finish its job after SIGCONT (no rescue
                    # needed); a snooze hands its attempt back without a trace.
                    if (
                        fault.kind == "kill"
                        and job.state in TERMINAL_STATES
                        and job.workload not in _REPLAYABLE_STARTS
                    ):
                        self.flag(
                            "RECOVERY_MISSING",
                            job.id,
                            f"attempt {start.attempt} was in flight in pid {fault.pid} when it "
                            f"was killed at {t:.3f}, yet no rescue of it is recorded; the job "
                            f"ended {job.state} at attempt {job.attempt}",
                        )
                    continue
                if any(
                    g.t_start <= rescued and g.t_end >= t - p.epsilon for g in self.global_faults
                ):
                    self.report.recovery_confounded += 1
                    continue
                took = rescued - t
                samples.append(took)
                if took > bound:
                    self.flag(
                        "RECOVERY_SLOW",
                        job.id,
                        f"attempt {start.attempt} in flight in pid {fault.pid} at the {fault.kind} "
                        f"({t:.3f}) was rescued {took:.3f} s later (> lease {p.lease} + rescue "
                        f"{p.rescue_interval} + epsilon {p.epsilon} = {bound:.3f} s)",
                    )
        self.report.recovery_samples = len(samples)
        if samples:
            self.report.recovery_worst = max(samples)
            self.report.recovery_p99 = _p99(samples)

    # 7. bounded drains ------------------------------------------------------------------------

    def drain(self) -> None:
        worst: float | None = None
        for fault in self.h.faults:
            if fault.kind != "drain" or fault.budget is None:
                continue
            took = fault.t_end - fault.t_start
            self.report.drains += 1
            worst = took if worst is None else max(worst, took)
            slack = self.p.drain_bound_slack
            if took > fault.budget + slack:
                self.flag(
                    "DRAIN_OVERRUN",
                    None,
                    f"pid {fault.pid} took {took:.3f} s to drain from SIGTERM at "
                    f"{fault.t_start:.3f} (budget {fault.budget} s + slack {slack} s; "
                    f"exit code {fault.exit_code})",
                )
        self.report.drain_worst = worst

    # 8. concurrency limits ---------------------------------------------------------------------

    def limits(self) -> None:
        released: dict[tuple[int, int], float] = {}
        for job_id, entries in self.entries.items():
            for entry in entries:
                if entry.attempt is None or entry.at is None:
                    continue
                key = (job_id, entry.attempt)
                released[key] = min(entry.at, released.get(key, math.inf))
        for finding in check_limits(self.h, released):
            self.report.limits[str(finding.rule)] = {
                "concurrency": finding.rule.concurrency,
                "executions": finding.executions,
                "peak": finding.peak,
            }
            for excess in finding.exceeded:
                self.report.limit_exceeded += 1
                self.flag("LIMIT_EXCEEDED", _tipping_job(excess), _excess_text(finding, excess))

    # 9. workflows ------------------------------------------------------------------------------

    def workflows(self) -> None:
        found = check_workflows(self.h, self.explain)
        if found.steps:
            self.report.workflows = found.figures()
        for code, job, detail in found.violations:
            self.flag(code, job, detail)


def _tipping_job(excess: Exceeded) -> int:
    """The job whose start took the slot one too many."""
    return max(excess.slots, key=lambda s: (s.start, s.job)).job


def _excess_text(finding: LimitFinding, excess: Exceeded) -> str:
    rule = finding.rule
    where = f"{rule}={excess.partition}" if rule.partition_by is not None else str(rule)
    held = "; ".join(
        f"job {s.job} attempt {s.attempt} pid {s.pid} from {s.start:.6f} until "
        + ("the end of the history" if s.end == math.inf else f"{s.end:.6f} ({s.ended_by})")
        for s in excess.slots
    )
    return (
        f"{len(excess.slots)} executions held slots of {where} at once at {excess.at:.6f} "
        f"(limit {rule.concurrency}): {held}"
    )


class _Timeline:
    """Renders one job's events (starts, effects, refusals, errors, faults) for the summary."""

    def __init__(self, history: History) -> None:
        self.h = history
        times: list[float] = [s.t for s in history.starts]
        times += [e.t_start for e in history.effects]
        times += [r.t for r in history.refused]
        times += [f.t_start for f in history.faults]
        self.t0 = min(times) if times else 0.0

    def rel(self, t: float | None) -> str:
        return "?" if t is None else f"+{t - self.t0:.3f}"

    def header(self, job_id: int) -> str:
        job = self.h.jobs.get(job_id)
        if job is None:
            return f"job {job_id} (not in the database snapshot):"
        return (
            f"job {job_id} ({job.workload}, {job.state}, attempt {job.attempt}/"
            f"{job.max_attempts}, finalized {self.rel(job.finalized_at)}):"
        )

    def events(self, job_id: int) -> list[str]:
        h = self.h
        rows: list[tuple[float, str]] = []
        pids: set[int] = set()
        for s in h.starts:
            if s.job == job_id:
                pids.add(s.pid)
                rows.append((s.t, f"start     attempt {s.attempt} pid {s.pid}"))
        for e in h.effects:
            if e.job == job_id:
                pids.add(e.pid)
                rows.append(
                    (
                        e.t_end,
                        f"effect    attempt {e.attempt} pid {e.pid} (handler from "
                        f"{self.rel(e.t_start)}, db {self.rel(e.db_at)}{', tx' if e.tx else ''})",
                    )
                )
        for end in h.ends:
            if end.job == job_id:
                rows.append((end.t, f"end       attempt {end.attempt} pid {end.pid}"))
        for r in h.refused:
            if r.job == job_id:
                pids.add(r.pid)
                rows.append((r.t, f"refused   attempt {r.attempt} pid {r.pid}: {r.reason}"))
        job = h.jobs.get(job_id)
        undated: list[str] = []
        if job is not None:
            for entry in _entries(job):
                first_line = entry.error.splitlines()[0] if entry.error else ""
                text = f"error     attempt {entry.attempt}: {first_line}"
                if entry.at is None:
                    undated.append(text)
                else:
                    rows.append((entry.at, text))
            if job.finalized_at is not None:
                rows.append((job.finalized_at, f"finalized {job.state} at attempt {job.attempt}"))
        if rows:
            p = h.params
            lo = min(t for t, _ in rows) - p.lease - p.rescue_interval - p.epsilon
            hi = max(t for t, _ in rows) + p.epsilon
            for f in h.faults:
                if (f.pid is None or f.pid in pids) and f.t_start <= hi and f.t_end >= lo:
                    who = "all workers" if f.pid is None else f"pid {f.pid}"
                    rows.append(
                        (f.t_start, f"FAULT     {f.kind} of {who} until {self.rel(f.t_end)}")
                    )
        rows.sort(key=lambda row: row[0])
        return [f"  {self.rel(t):>12}  {text}" for t, text in rows] + [
            f"  {'?':>12}  {text}" for text in undated
        ]


def check(history: History) -> Report:
    """Check ``history`` against drover's delivery invariants (codes: see the module docstring)."""
    return _Checker(history).run()
