"""The history checker: did drover keep its delivery contract under the faults the run injected?

``check`` reads a ``History`` (the database's
final rows plus what the processes recorded) and returns a ``Report``:
counters, recovery and drain figures, and one ``Violation`` per broken
invariant (docs/reliability.md §3.1). Pure Python, no database. ``Report`` and ``Violation``
(``.report``) and ``RESCUE_PREFIX`` (``.entries``) are defined beside it, re-exported here.

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

from drover.faults.harness.entries import RESCUE_PREFIX, error_entries
from drover.faults.harness.history import TERMINAL_STATES, Effect, Fault, History, JobFinal, Start
from drover.faults.harness.limit_check import check_limits, excess_text, tipping_job
from drover.faults.harness.report import Report, Violation
from drover.faults.harness.workflow_check import WORKFLOW_CODES, check_workflows, pending_reason

__all__ = ["CODES", "NO_EFFECT_WORKLOADS", "RESCUE_PREFIX", "Report", "Violation", "check"]

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
        self.entries = {job_id: error_entries(job) for job_id, job in history.jobs.items()}
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
                self.flag("LIMIT_EXCEEDED", tipping_job(excess), excess_text(finding, excess))

    # 9. workflows ------------------------------------------------------------------------------

    def workflows(self) -> None:
        found = check_workflows(self.h, self.explain)
        if found.steps:
            self.report.workflows = found.figures()
        for code, job, detail in found.violations:
            self.flag(code, job, detail)


def check(history: History) -> Report:
    """Check ``history`` against drover's delivery invariants (codes: see the module docstring)."""
    return _Checker(history).run()
