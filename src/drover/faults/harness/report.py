"""What the history checker returns: ``Report`` and ``Violation``, and the report's text.

Separate from ``checker`` because it is the output side: the figures, their
JSON form and the human summary with each violating job's timeline, where
``checker`` holds the invariants that fill them. Both classes are
re-exported by ``checker``, where callers import them from.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from drover.faults.harness.entries import error_entries
from drover.faults.harness.history import History

__all__ = ["Report", "Violation"]

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
            for entry in error_entries(job):
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
