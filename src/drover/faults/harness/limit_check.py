"""The checker's limits check: did more executions hold a limit's slots at once than it allows?

A history's ``LimitRule`` records name the concurrency limits the workload
declares. An execution of a job a rule counts (its kind or queue, and its
partition: the JSON value of the args field, null when missing) holds one of
the rule's slots from its handler's ``start`` record until the first of:

- its handler's ``end`` record (the handler returned or raised);
- the attempt's first error entry: a failure, the rescuer's rescue, a
  hand-back at shutdown;
- the job's ``finalized_at``, when the attempt is the job's last (a
  ``complete_tx`` commits before its handler returns);
- its process's death: a ``kill`` fault's time, a ``drain``'s exit.

A handler starts after its claim committed, and each of those moments comes
at or before the database stops counting the attempt as running, so in a
correct run the slots held never exceed the limit, with no tolerance. What
a handler still does after the database let go of its claim (a paused
worker waking after its rescue) is not counted: a limit bounds claims, and
that execution is the at-least-once duplicate the fence deals with. An
execution with none of these ends holds its slot until the end of the
history.

Pure Python over a ``History``; ``checker.check`` runs it.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from drover.faults.harness.history import End, History, JobFinal, LimitRule, Start

__all__ = [
    "Exceeded",
    "LimitFinding",
    "Slot",
    "check_limits",
    "excess_text",
    "partition_of",
    "tipping_job",
]

_OPEN = math.inf


@dataclass(frozen=True)
class Slot:
    """One execution holding a slot from ``start`` to ``end`` (``ended_by`` says what ended it)."""

    job: int
    attempt: int
    pid: int
    start: float
    end: float
    ended_by: str


@dataclass(frozen=True)
class Exceeded:
    """An instant at which more than the limit held slots of one partition, and which did."""

    partition: str
    at: float
    slots: tuple[Slot, ...]


@dataclass
class LimitFinding:
    """One rule's figures: executions it counted, the most holding slots at once, the excesses."""

    rule: LimitRule
    executions: int = 0
    peak: int = 0
    exceeded: list[Exceeded] = field(default_factory=list)


def partition_of(rule: LimitRule, job: JobFinal) -> str:
    """The partition of ``rule`` that ``job`` counts in: ``""`` for a whole scope."""
    if rule.partition_by is None:
        return ""
    value = job.args.get(rule.partition_by)
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _counts(rule: LimitRule, job: JobFinal) -> bool:
    return (job.kind if rule.scope == "kind" else job.queue) == rule.target


def _deaths(history: History) -> dict[int, float]:
    """When each process died: the first SIGKILL of it, or the end of its drain."""
    deaths: dict[int, float] = {}
    for f in history.faults:
        if f.pid is None:
            continue
        t = f.t_start if f.kind == "kill" else f.t_end if f.kind == "drain" else None
        if t is not None:
            deaths[f.pid] = min(t, deaths.get(f.pid, _OPEN))
    return deaths


def _slots(history: History, released: Mapping[tuple[int, int], float]) -> dict[int, list[Slot]]:
    """Every recorded execution's slot, by job (only jobs some rule counts)."""
    counted = {
        job_id
        for job_id, job in history.jobs.items()
        if any(_counts(rule, job) for rule in history.limits)
    }
    ends: dict[tuple[int, int, int], list[End]] = defaultdict(list)
    for e in history.ends:
        if e.job in counted:
            ends[(e.job, e.attempt, e.pid)].append(e)
    deaths = _deaths(history)
    out: dict[int, list[Slot]] = defaultdict(list)
    used: set[End] = set()
    for s in sorted(history.starts, key=lambda s: s.t):
        if s.job not in counted:
            continue
        job = history.jobs[s.job]
        candidates = [(_own_end(s, ends, used), "its end")]
        candidates.append((released.get((s.job, s.attempt), _OPEN), "an error entry"))
        if job.finalized_at is not None and job.attempt == s.attempt:
            candidates.append((job.finalized_at, "its completion"))
        candidates.append((deaths.get(s.pid, _OPEN), "its process's death"))
        end, why = min(candidates, key=lambda c: c[0])
        if end > s.t:
            out[s.job].append(
                Slot(s.job, s.attempt, s.pid, s.t, end, "nothing" if end == _OPEN else why)
            )
    return out


def _own_end(s: Start, ends: Mapping[tuple[int, int, int], list[End]], used: set[End]) -> float:
    for e in ends.get((s.job, s.attempt, s.pid), []):
        if e not in used and e.t >= s.t:
            used.add(e)
            return e.t
    return _OPEN


def _sweep(finding: LimitFinding, partition: str, slots: list[Slot]) -> None:
    limit = finding.rule.concurrency
    # At one instant a slot freed comes before one taken: a hand-over is no overlap.
    events = sorted(
        [(s.start, 1, n) for n, s in enumerate(slots)]
        + [(s.end, 0, n) for n, s in enumerate(slots)]
    )
    held: set[int] = set()
    over = False
    for t, taken, n in events:
        if not taken:
            held.discard(n)
            over = over and len(held) > limit
            continue
        held.add(n)
        finding.peak = max(finding.peak, len(held))
        if len(held) > limit and not over:
            over = True
            members = tuple(sorted((slots[i] for i in held), key=lambda s: (s.start, s.job)))
            finding.exceeded.append(Exceeded(partition, t, members))


def check_limits(history: History, released: Mapping[tuple[int, int], float]) -> list[LimitFinding]:
    """One finding per rule of ``history``, in rule order.

    ``released`` maps ``(job, attempt)`` to the time of the attempt's first
    error entry (the caller parses the job rows' error entries).
    """
    by_job = _slots(history, released)
    findings = []
    for rule in history.limits:
        finding = LimitFinding(rule)
        parts: dict[str, list[Slot]] = defaultdict(list)
        for job_id, slots in by_job.items():
            job = history.jobs[job_id]
            if _counts(rule, job):
                parts[partition_of(rule, job)].extend(slots)
        for partition, slots in sorted(parts.items()):
            finding.executions += len(slots)
            _sweep(finding, partition, slots)
        findings.append(finding)
    return findings


def tipping_job(excess: Exceeded) -> int:
    """The job whose start took the slot one too many."""
    return max(excess.slots, key=lambda s: (s.start, s.job)).job


def excess_text(finding: LimitFinding, excess: Exceeded) -> str:
    """A ``LIMIT_EXCEEDED`` violation's detail: the limit, the instant and each slot held."""
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
