"""The checker's workflows check: did every step wait for its dependencies, and run once?

A job the snapshot places in a workflow (its ``workflow_id``) is a *step*;
the ids it waited for (``depends_on``) come from the database's edges, so a
release the database got wrong is still judged by what the workflow asked
for. ``check_workflows`` reports, per step:

``DEPENDENT_EARLY``
    A step's handler started before one of its dependencies' completion:
    before that dependency's ``finalized_at`` (the completing transaction's
    start, on the database clock), before its accepted attempt wrote its
    effect, or, in ``plain`` mode, before that attempt's handler returned
    (the completion is written after the return; with ``complete_tx`` it
    commits inside the handler, so the return is no bound there). Also a
    start while a dependency was not completed at all, and a handler that
    read no result of a dependency (the suite's steps each return their own
    id, so a null read means the dependency had not completed).
``CALLBACK_DUPLICATE``
    A step with dependencies (a chord's callback, a chain's later step)
    started again, its previous execution neither failed (an error entry of
    its own: a retry, not a duplicate) nor explained by a fault (the same
    attribution as the checker's duplicate effects: a fault of that process,
    or a database- or network-wide one, overlapping the execution or the
    lease and rescue after it).
``STEP_DUPLICATE``
    The same for a workflow's first steps (those that wait for nothing).
``DEPENDENT_OF_FAILED_RAN``
    A step started, or ended completed, although a dependency ended ``dead``
    or ``cancelled``: such a step must be cancelled without running.
``WRONG_OUTCOME``
    A step whose dependency failed did not end ``cancelled`` (the checker's
    own outcome check judges the steps whose dependencies all completed).

A step left ``pending`` is the checker's ``LOST``; ``pending_reason`` says
why it is stuck (a release or a cancellation the database never made).

Times: handler records are ``time.time()``, ``finalized_at`` the server's
``now()``, on one machine and one clock; a dependent starts only after the
transaction that released it committed, which follows every one of those
moments, so the check needs no tolerance. Pure Python over a ``History``;
``checker.check`` runs it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise

from drover.faults.harness.history import End, Fault, History, JobFinal, Start

__all__ = [
    "WORKFLOW_CODES",
    "WorkflowFindings",
    "check_workflows",
    "pending_reason",
]

WORKFLOW_CODES: dict[str, str] = {
    "DEPENDENT_EARLY": "a workflow step started before a dependency's completion",
    "CALLBACK_DUPLICATE": "a step with dependencies started again with no failure or fault "
    "to explain it",
    "STEP_DUPLICATE": "a workflow's first step started again with no failure or fault to "
    "explain it",
    "DEPENDENT_OF_FAILED_RAN": "a step ran (or completed) although a dependency ended dead or "
    "cancelled",
}
"""The violation codes this check adds to the checker's (it also reports ``WRONG_OUTCOME``)."""

_FAILED = frozenset({"dead", "cancelled"})

Explain = Callable[[int, float, float], Fault | None]
"""``explain(pid, t_start, t_end)``: the fault that explains an execution's rerun, if any."""


@dataclass
class WorkflowFindings:
    """The figures and violations of one history's workflows.

    ``steps`` counts jobs in a workflow, ``dependents`` those that wait for
    others; ``starts`` counts their recorded handler starts. A start after
    the first is a ``retried`` one (the previous attempt failed), an
    ``attributed`` duplicate (by fault kind in ``duplicates_by_fault``) or
    an ``unattributed`` one (a violation). ``cancelled_by_dependency``
    counts steps cancelled because a dependency failed; ``release_lag_worst``
    is the longest wait from a dependent's last dependency completing to its
    first start (seconds; None without samples), ``release_lag_samples`` the
    samples. ``violations`` are ``(code, job, detail)``.
    """

    workflows: int = 0
    steps: int = 0
    dependents: int = 0
    starts: int = 0
    retried: int = 0
    duplicates_attributed: int = 0
    duplicates_unattributed: int = 0
    duplicates_by_fault: dict[str, int] = field(default_factory=dict)
    cancelled_by_dependency: int = 0
    release_lag_samples: int = 0
    release_lag_worst: float | None = None
    violations: list[tuple[str, int, str]] = field(default_factory=list)

    def figures(self) -> dict[str, object]:
        """The counters as a JSON-ready dict (no violations)."""
        return {
            "workflows": self.workflows,
            "steps": self.steps,
            "dependents": self.dependents,
            "starts": self.starts,
            "retried": self.retried,
            "duplicates_attributed": self.duplicates_attributed,
            "duplicates_unattributed": self.duplicates_unattributed,
            "duplicates_by_fault": dict(sorted(self.duplicates_by_fault.items())),
            "cancelled_by_dependency": self.cancelled_by_dependency,
            "release_lag_samples": self.release_lag_samples,
            "release_lag_worst": None
            if self.release_lag_worst is None
            else round(self.release_lag_worst, 6),
        }


def pending_reason(job: JobFinal, jobs: dict[int, JobFinal]) -> str:
    """Why a step left ``pending`` is stuck, from its dependencies' final states."""
    deps = [jobs[d] for d in job.depends_on if d in jobs]
    failed = [d for d in deps if d.state in _FAILED]
    if failed:
        return (
            f"pending although dependency {failed[0].id} ended {failed[0].state}: a cancellation "
            "of its dependents was lost"
        )
    if deps and all(d.state == "completed" for d in deps):
        last = max((d.finalized_at or 0.0) for d in deps)
        return (
            f"pending although all {len(deps)} dependencies completed (the last at {last:.6f}): "
            "a stuck release"
        )
    waiting = ", ".join(f"{d.id} {d.state}" for d in deps if d.state != "completed")
    return f"pending, waiting for dependencies that never completed ({waiting or 'none known'})"


class _WorkflowChecker:
    def __init__(self, history: History, explain: Explain) -> None:
        self.h = history
        self.explain = explain
        self.f = WorkflowFindings()
        self.starts: dict[int, list[Start]] = defaultdict(list)
        for s in sorted(history.starts, key=lambda s: s.t):
            self.starts[s.job].append(s)
        self.ends: dict[tuple[int, int], list[End]] = defaultdict(list)
        for e in history.ends:
            self.ends[(e.job, e.attempt)].append(e)
        self.effect_end: dict[tuple[int, int], float] = {}
        for eff in history.effects:
            key = (eff.job, eff.attempt)
            self.effect_end[key] = min(eff.t_end, self.effect_end.get(key, math.inf))
        # Attempts whose handler failed (an error entry not the rescuer's): a
        # rerun after one is a retry. Rescues and hand-backs need a fault.
        self.failed_attempts: set[tuple[int, int]] = set()
        for job in history.jobs.values():
            for entry in job.errors:
                error = entry.get("error")
                attempt = entry.get("attempt")
                if (
                    isinstance(attempt, int)
                    and isinstance(error, str)
                    and not _not_a_failure(error)
                ):
                    self.failed_attempts.add((job.id, attempt))

    def flag(self, code: str, job: int, detail: str) -> None:
        self.f.violations.append((code, job, detail))

    def run(self) -> WorkflowFindings:
        steps = [j for j in self.h.jobs.values() if j.workflow_id is not None]
        self.f.workflows = len({j.workflow_id for j in steps})
        self.f.steps = len(steps)
        self.f.dependents = sum(1 for j in steps if j.depends_on)
        lags: list[float] = []
        for job in steps:
            starts = self.starts.get(job.id, [])
            self.f.starts += len(starts)
            deps = [self.h.jobs[d] for d in job.depends_on if d in self.h.jobs]
            self.outcome(job, deps, starts)
            for s in starts:
                self.early(job, deps, s)
            self.reruns(job, starts)
            lag = self._lag(deps, starts)
            if lag is not None:
                lags.append(lag)
        self.f.release_lag_samples = len(lags)
        self.f.release_lag_worst = max(lags) if lags else None
        return self.f

    def completion(self, dep: JobFinal) -> tuple[float, str]:
        """The latest moment known to precede ``dep``'s completion commit, and what it is."""
        bounds = [(dep.finalized_at or -math.inf, "completion (finalized_at)")]
        effect = self.effect_end.get((dep.id, dep.attempt))
        if effect is not None:
            bounds.append((effect, f"attempt {dep.attempt}'s effect"))
        if self.h.params.mode == "plain":
            ends = self.ends.get((dep.id, dep.attempt), [])
            if ends:
                bounds.append((min(e.t for e in ends), f"attempt {dep.attempt}'s handler return"))
        return max(bounds, key=lambda b: b[0])

    def early(self, job: JobFinal, deps: list[JobFinal], s: Start) -> None:
        for dep in deps:
            if dep.state in _FAILED:
                continue  # outcome() reports it: DEPENDENT_OF_FAILED_RAN
            if dep.state != "completed":
                self.flag(
                    "DEPENDENT_EARLY",
                    job.id,
                    f"attempt {s.attempt} started at {s.t:.6f} (pid {s.pid}) although dependency "
                    f"{dep.id} never completed (it ended {dep.state})",
                )
                continue
            bound, what = self.completion(dep)
            if s.t < bound:
                self.flag(
                    "DEPENDENT_EARLY",
                    job.id,
                    f"attempt {s.attempt} started at {s.t:.6f} (pid {s.pid}), {bound - s.t:.6f} s "
                    f"before dependency {dep.id}'s {what} at {bound:.6f}",
                )
        if s.deps is not None and None in s.deps:
            self.flag(
                "DEPENDENT_EARLY",
                job.id,
                f"attempt {s.attempt} (pid {s.pid}) read its dependencies' results as "
                f"{list(s.deps)}: a dependency without a result had not completed",
            )

    def outcome(self, job: JobFinal, deps: list[JobFinal], starts: list[Start]) -> None:
        failed = [d for d in deps if d.state in _FAILED]
        if failed:
            cause = f"dependency {failed[0].id} ended {failed[0].state}"
            if starts:
                self.flag(
                    "DEPENDENT_OF_FAILED_RAN",
                    job.id,
                    f"{len(starts)} start(s) (the first at {starts[0].t:.6f}, pid "
                    f"{starts[0].pid}) although {cause}",
                )
            elif job.state == "completed":
                self.flag("DEPENDENT_OF_FAILED_RAN", job.id, f"ended completed although {cause}")
            if job.state == "cancelled":
                self.f.cancelled_by_dependency += 1
            elif job.state not in ("pending", "completed"):
                self.flag(
                    "WRONG_OUTCOME", job.id, f"ended {job.state}, not cancelled, although {cause}"
                )

    def reruns(self, job: JobFinal, starts: list[Start]) -> None:
        code = "CALLBACK_DUPLICATE" if job.depends_on else "STEP_DUPLICATE"
        # In claim order, not start order: a paused worker may begin its
        # superseded attempt only after it wakes, when the rerun has finished.
        for prev, nxt in pairwise(sorted(starts, key=lambda s: (s.attempt, s.t))):
            if (job.id, prev.attempt) in self.failed_attempts:
                self.f.retried += 1
                continue
            ends = [e.t for e in self.ends.get((job.id, prev.attempt), []) if e.pid == prev.pid]
            until = min(ends) if ends else nxt.t
            fault = self.explain(prev.pid, prev.t, until)
            if fault is not None:
                self.f.duplicates_attributed += 1
                by = self.f.duplicates_by_fault
                by[fault.kind] = by.get(fault.kind, 0) + 1
                continue
            self.f.duplicates_unattributed += 1
            self.flag(
                code,
                job.id,
                f"attempt {nxt.attempt} started at {nxt.t:.6f} (pid {nxt.pid}) after attempt "
                f"{prev.attempt} ran from {prev.t:.6f} to {until:.6f} (pid {prev.pid}), which "
                "neither failed nor overlaps a fault",
            )

    def _lag(self, deps: list[JobFinal], starts: list[Start]) -> float | None:
        if not deps or not starts or any(d.state != "completed" for d in deps):
            return None
        done = [d.finalized_at for d in deps if d.finalized_at is not None]
        if len(done) != len(deps):
            return None
        return starts[0].t - max(done)


def _not_a_failure(error: str) -> bool:
    """Error entries the handler did not cause: a rescue, a hand-back, a dependency's cascade."""
    return error.startswith(("drover: lease expired", "drover: worker shut down")) or (
        error.startswith("dependency ") and "so this job will not run" in error
    )


def check_workflows(history: History, explain: Explain) -> WorkflowFindings:
    """Judge ``history``'s workflow steps; ``explain`` attributes a rerun to a fault."""
    return _WorkflowChecker(history, explain).run()
