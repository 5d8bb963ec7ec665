"""The verdict of ``drover faults --app``: per job kind, what the faults did to the user's handlers.

``analyse`` turns what a run left (the worker processes' execution records,
the nemesis's fault records, the database's final rows and the user's effect
counts) into an ``AppReport``. Duplicate executions (a handler that returned
more than once for one job) are attributed to a fault by the harness's
checker (``drover.faults.harness.checker.check``, run on each kind's slice of
the history), so ``drover faults --app`` and drover's own suite (``python -m
faults`` in a clone) explain a duplicate the same way.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drover.faults.harness.checker import check
from drover.faults.harness.history import (
    TERMINAL_STATES,
    Effect,
    Fault,
    History,
    JobFinal,
    Params,
    Start,
)

__all__ = ["AppReport", "Execution", "KindReport", "analyse", "read_executions", "read_faults"]

_LISTED_JOBS = 20


@dataclass(frozen=True)
class Execution:
    """One handler execution a worker recorded: its start, and its end if the process lived.

    ``outcome`` is ``ok``, ``signal`` (Snooze/Cancel), ``raised``, or None when
    no end was recorded (the process was killed, or the run ended first).
    """

    job: int
    attempt: int
    pid: int
    kind: str
    t_start: float
    t_end: float | None = None
    outcome: str | None = None
    error: str | None = None


@dataclass
class KindReport:
    """One job kind's figures.

    ``runs`` counts executions started; ``duplicates`` the executions beyond
    the one that counted which returned or were cut short by a fault (not
    those that raised: a retry is no duplicate), ``duplicates_by_fault``
    those the checker attributes to a fault (by kind) and
    ``duplicates_unattributed`` the rest; ``raised`` counts executions that
    raised something other than a drover signal, by exception type;
    ``lost`` counts jobs not finished after the final drain. With an effect
    check, ``effects_repeated`` counts jobs whose effect happened more than
    once (``repeated_jobs`` lists the first 20) and ``effects_missing``
    completed jobs whose effect never happened; ``effect_check_error`` says
    why the check could not be run, if it raised.
    """

    kind: str
    jobs: int = 0
    runs: int = 0
    states: dict[str, int] = field(default_factory=dict)
    lost: int = 0
    duplicates: int = 0
    duplicates_by_fault: dict[str, int] = field(default_factory=dict)
    duplicates_unattributed: int = 0
    raised: dict[str, int] = field(default_factory=dict)
    effect_check: bool = False
    effects_repeated: int = 0
    effects_missing: int = 0
    repeated_jobs: list[int] = field(default_factory=list)
    effect_check_error: str | None = None

    @property
    def verdict(self) -> str:
        """``not idempotent``, ``lost jobs``, ``effect check failed`` or ``ok``."""
        if self.effects_repeated:
            return "not idempotent"
        if self.lost:
            return "lost jobs"
        if self.effect_check_error is not None:
            return "effect check failed"
        return "ok"

    @property
    def ok(self) -> bool:
        """True unless an effect repeated, a job was lost or the effect check failed."""
        return self.verdict == "ok"

    def to_json(self) -> dict[str, Any]:
        """The figures and the verdict as a JSON-ready dict."""
        return {
            "verdict": self.verdict,
            "jobs": self.jobs,
            "runs": self.runs,
            "states": dict(self.states),
            "lost": self.lost,
            "duplicates": self.duplicates,
            "duplicates_by_fault": dict(self.duplicates_by_fault),
            "duplicates_unattributed": self.duplicates_unattributed,
            "raised": dict(self.raised),
            "effect_check": self.effect_check,
            "effects_repeated": self.effects_repeated,
            "effects_missing": self.effects_missing,
            "repeated_jobs": list(self.repeated_jobs),
            "effect_check_error": self.effect_check_error,
        }


@dataclass
class AppReport:
    """The run: one ``KindReport`` per sampled kind, the faults injected, the kinds skipped."""

    kinds: dict[str, KindReport]
    faults: dict[str, int]
    not_sampled: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True iff every kind is ``ok`` (the command's exit status 0)."""
        return all(k.ok for k in self.kinds.values())

    def to_json(self) -> dict[str, Any]:
        """``{"ok", "kinds": {kind: ...}, "faults", "not_sampled", "figures"}``."""
        return {
            "ok": self.ok,
            "kinds": {name: k.to_json() for name, k in self.kinds.items()},
            "faults": dict(self.faults),
            "not_sampled": list(self.not_sampled),
            "figures": dict(self.figures),
        }

    def write_json(self, path: Path) -> None:
        """Write ``to_json()`` to ``path`` (indented)."""
        path.write_text(json.dumps(self.to_json(), indent=2, default=str) + "\n")

    def table(self) -> str:
        """The terminal report: one line per kind, then the faults and the kinds not sampled."""
        from drover.cli.output import table

        rows = [
            (
                k.kind, k.jobs, k.runs, k.lost, _duplicates(k), _counts(k.raised) or "-",
                _effects(k), k.verdict.upper() if not k.ok else k.verdict,
            )
            for k in self.kinds.values()
        ]  # fmt: skip
        text = table(
            ["KIND", "JOBS", "RUNS", "LOST", "DUPLICATES", "RAISED", "EFFECTS", "VERDICT"], rows
        )
        text += "\n\nfaults injected: " + (_counts(self.faults) or "none")
        if self.not_sampled:
            text += "\nnot sampled (no args given or found): " + ", ".join(self.not_sampled)
        for k in self.kinds.values():
            if k.repeated_jobs:
                ids = ", ".join(map(str, k.repeated_jobs))
                text += f"\n{k.kind}: effect repeated for job(s) {ids}"
            if k.effect_check_error:
                text += f"\n{k.kind}: the effect check raised {k.effect_check_error}"
        return text


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in sorted(counts.items()))


def _duplicates(k: KindReport) -> str:
    if not k.duplicates:
        return "0"
    parts = dict(k.duplicates_by_fault)
    if k.duplicates_unattributed:
        parts["unattributed"] = k.duplicates_unattributed
    return f"{k.duplicates} ({_counts(parts)})"


def _effects(k: KindReport) -> str:
    if not k.effect_check:
        return "no check"
    if k.effect_check_error is not None:
        return "check raised"
    text = f"repeated {k.effects_repeated}" if k.effects_repeated else "once each"
    if k.effects_missing:
        text += f", missing {k.effects_missing}"
    return text


def _records(path: Path) -> Iterable[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        for line in f:
            # A SIGKILL can cut nothing short (one write per record), but be lenient anyway.
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                yield record


def read_executions(history_dir: Path) -> list[Execution]:
    """The executions the worker processes recorded (``worker-*.jsonl``), by start time."""
    started: dict[tuple[int, int, int, float], Execution] = {}
    ended: dict[tuple[int, int, int, float], dict[str, Any]] = {}
    for path in sorted(history_dir.glob("worker-*.jsonl")):
        for r in _records(path):
            if r.get("ev") == "start":
                key = (r["job"], r["attempt"], r["pid"], r["t"])
                started[key] = Execution(r["job"], r["attempt"], r["pid"], r["kind"], r["t"])
            elif r.get("ev") == "end":
                ended[(r["job"], r["attempt"], r["pid"], r["t_start"])] = r
    out = []
    for key, e in started.items():
        end = ended.get(key)
        if end is not None:
            e = Execution(
                e.job, e.attempt, e.pid, e.kind, e.t_start, end["t"], end["outcome"], end["error"]
            )
        out.append(e)
    return sorted(out, key=lambda e: (e.t_start, e.job, e.attempt))


def read_faults(history_dir: Path) -> list[Fault]:
    """The faults the nemesis recorded (``orchestrator.jsonl``)."""
    path = history_dir / "orchestrator.jsonl"
    if not path.exists():
        return []
    return [
        Fault(
            kind=r["kind"],
            t_start=r["t_start"],
            t_end=r["t_end"],
            pid=r.get("pid"),
            budget=r.get("budget"),
            exit_code=r.get("exit_code"),
        )
        for r in _records(path)
        if r.get("ev") == "fault"
    ]


def analyse(
    jobs: list[JobFinal],
    executions: list[Execution],
    faults: list[Fault],
    params: Params,
    effect_counts: dict[str, dict[int, int] | str],
) -> dict[str, KindReport]:
    """Per kind of ``jobs``: runs, losses, duplicates (attributed), raises and repeated effects.

    ``effect_counts`` maps a kind with an effect check to each job's count,
    or to the error text if its check raised. Pure: no database, no clock.
    """
    reports: dict[str, KindReport] = {}
    by_kind: dict[str, list[JobFinal]] = {}
    for job in jobs:
        by_kind.setdefault(job.kind, []).append(job)
    for kind, kind_jobs in sorted(by_kind.items()):
        ids = {j.id for j in kind_jobs}
        mine = [e for e in executions if e.job in ids]
        r = KindReport(kind=kind, jobs=len(kind_jobs), runs=len(mine))
        r.states = dict(sorted(Counter(j.state for j in kind_jobs).items()))
        r.lost = sum(1 for j in kind_jobs if j.state not in TERMINAL_STATES)
        r.raised = dict(
            sorted(Counter(e.error or "?" for e in mine if e.outcome == "raised").items())
        )
        # In the checker's terms an execution that returned, or that a fault cut
        # short (no end record), had its "effect": the handler's side effects may
        # all have happened. One that raised was a retry, not a duplicate.
        history = History(
            jobs={j.id: j for j in kind_jobs},
            effects=[
                Effect(e.job, e.attempt, e.pid, e.t_start, end, end, tx=False)
                for e in mine
                if e.outcome in ("ok", None)
                for end in [e.t_start if e.t_end is None else e.t_end]
            ],
            starts=[Start(e.job, e.attempt, e.pid, e.t_start) for e in mine],
            refused=[],
            faults=faults,
            params=params,
        )
        checked = check(history.canonical())
        r.duplicates = checked.duplicates_total
        r.duplicates_by_fault = dict(checked.duplicates_by_fault)
        r.duplicates_unattributed = checked.duplicates_unattributed
        counts = effect_counts.get(kind)
        if counts is not None:
            r.effect_check = True
            if isinstance(counts, str):
                r.effect_check_error = counts
            else:
                repeated = sorted(job_id for job_id, n in counts.items() if n > 1)
                r.effects_repeated = len(repeated)
                r.repeated_jobs = repeated[:_LISTED_JOBS]
                r.effects_missing = sum(
                    1 for j in kind_jobs if j.state == "completed" and counts.get(j.id, 0) == 0
                )
        reports[kind] = r
    return reports
