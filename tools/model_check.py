"""Checks the kernel's model (``model/drover.pml``) with SPIN: the model, and each planted bug.

From the root of a clone (ADR 0055)::

    .venv/bin/python -m tools.model_check                 # the checks the tests run
    .venv/bin/python -m tools.model_check --full          # and the whole kernel in one model
    .venv/bin/python -m tools.model_check --only leader   # one check (--list names them)
    .venv/bin/python -m tools.model_check --only bug-no-fence --trail   # its counterexample
    .venv/bin/python -m tools.model_check --fingerprints  # is model/mapping.toml current?
    .venv/bin/python -m tools.model_check --fingerprints --write        # record it again

Each check generates the verifier (``spin -a``, with the check's ``-D``
options), compiles it with the C compiler (``gcc``, else ``cc``) and runs it:
an exhaustive safety search (assertions, invalid end states). A check of the
model expects no error; a planted bug's check expects a counterexample that
breaks the invariant it names, and replays it (``spin -t``) as the model's
``MSC:`` lines, one per step.

The mapping (``model/mapping.toml``) ties each model step (the text between
``/* step: name */`` and ``/* end: name */`` in the model, with the macros
and inlines it uses) to the SQL statements it stands for, by a fingerprint of
each side: when either changes, ``tests/model/test_mapping.py`` names the
step to re-check. Needs no SPIN.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from drover._db.queries import expand_state_sets

__all__ = [
    "CHECKS",
    "INVARIANTS",
    "MAPPING",
    "MODEL",
    "Check",
    "Result",
    "mapping_problems",
    "missing_tools",
    "model_steps",
    "recorded_mapping",
    "run",
    "write_mapping",
]

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "model" / "drover.pml"
MAPPING = ROOT / "model" / "mapping.toml"
SQL = ROOT / "sql"

INVARIANTS = (
    "no_stale_write",
    "terminal_once",
    "effects_once",
    "no_job_lost",
    "lease_exclusive",
    "one_leader",
    "tick_once",
)
"""The model's invariants, in its numbering (``I_<name>`` in the model)."""

_KERNEL = ("-DKERNEL",)
# Every fault's budget is "at most": a check with a budget of one also covers every run
# with none of that fault.
_EVERYTHING = (*_KERNEL, "-DMAXCRASH=1", "-DMAXSHUT=1", "-DMAXSNOOZE=1", "-DMAXCANCEL=1")


@dataclass(frozen=True)
class Check:
    """One verification run: the model under some ``-D`` options, and what it must find."""

    name: str
    defines: tuple[str, ...]
    about: str
    expect: str | None = None
    """The invariant a counterexample must break; ``None``: no error at all."""
    full: bool = False
    """Run only with ``--full`` (too long for the test suite)."""
    optimise: bool = False
    """Compile the verifier with -O2 (pays off above a few million states)."""


def _bug(name: str, macro: str, invariant: str, about: str) -> Check:
    defines = _EVERYTHING if invariant not in ("one_leader", "tick_once") else ("-DLEADER",)
    return Check(
        name,
        (*defines, f"-D{macro}", f"-DONLY=I_{invariant}"),
        about,
        expect=invariant,
    )


CHECKS: tuple[Check, ...] = (
    Check(
        "kernel",
        _EVERYTHING,
        "2 workers, 2 jobs, every kernel step; a crash, a hand-back, a snooze, a cancel",
        optimise=True,
    ),
    Check(
        "kernel-three-workers",
        (*_KERNEL, "-DNW=3", "-DMAXCRASH=1", "-DMAXSHUT=0", "-DMAXSNOOZE=0", "-DMAXCANCEL=0"),
        "3 workers, 2 jobs: claim, renewal, outcomes, complete_tx, rescue; a crash",
    ),
    Check("leader", ("-DLEADER", "-DNC=3"), "3 candidates for the periodic leader's lease row"),
    Check(
        "leader-session-ticks",
        ("-DLEADER", "-DNC=3", "-DSESSION_LEADER", "-DONLY=I_tick_once"),
        "3 lease candidates and a client leading by the advisory lock: a tick still fires once",
    ),
    Check(
        "leader-session-overlap",
        ("-DLEADER", "-DNC=3", "-DSESSION_LEADER", "-DONLY=I_one_leader"),
        "the same: a lease leader and a lock leader can overlap until the lease's next renewal "
        "(ADR 0040 accepts it; the watermark covers it)",
        expect="one_leader",
    ),
    Check(
        "kernel-three-workers-handback",
        (*_KERNEL, "-DNW=3", "-DMAXCRASH=1", "-DMAXSHUT=1", "-DMAXSNOOZE=0", "-DMAXCANCEL=0"),
        "3 workers, 2 jobs: as kernel-three-workers, and a hand-back",
        full=True,
        optimise=True,
    ),
    Check(
        "kernel-two-crashes",
        (*_KERNEL, "-DMAXCRASH=2", "-DMAXSHUT=1", "-DMAXSNOOZE=1", "-DMAXCANCEL=1"),
        "as kernel, with two crashes",
        full=True,
        optimise=True,
    ),
    Check(
        "kernel-three-attempts",
        (*_EVERYTHING, "-DMAXATT=3"),
        "as kernel, with max_attempts 3",
        full=True,
        optimise=True,
    ),
    _bug(
        "bug-no-fence",
        "BUG_NO_FENCE",
        "no_stale_write",
        "writes fenced on state = 'running' alone, without the attempt",
    ),
    _bug(
        "bug-handback-refunds",
        "BUG_HANDBACK_REFUNDS",
        "no_stale_write",
        "the hand-back gives the attempt back",
    ),
    _bug(
        "bug-fence-no-state",
        "BUG_FENCE_NO_STATE",
        "terminal_once",
        "writes fenced on the attempt alone, without state = 'running'",
    ),
    _bug(
        "bug-complete-tx-unfenced",
        "BUG_COMPLETE_TX_UNFENCED",
        "effects_once",
        "complete_tx's refusal swallowed: the transaction commits anyway",
    ),
    _bug(
        "bug-claim-no-lease",
        "BUG_CLAIM_NO_LEASE",
        "no_job_lost",
        "the claim leaves leased_until NULL",
    ),
    _bug(
        "bug-rescue-ignores-lease",
        "BUG_RESCUE_IGNORES_LEASE",
        "lease_exclusive",
        "the rescuer takes running jobs whatever their lease",
    ),
    _bug(
        "bug-leader-no-expiry-check",
        "BUG_LEADER_NO_EXPIRY_CHECK",
        "one_leader",
        "the lease row is taken over without checking that it expired",
    ),
    _bug(
        "bug-tick-no-watermark",
        "BUG_TICK_NO_WATERMARK",
        "tick_once",
        "a tick is inserted without moving the watermark",
    ),
)


@dataclass
class Result:
    """What one check found."""

    check: Check
    verdict: str
    """``passed`` (no error), ``counterexample`` or ``error`` (the tools failed)."""
    invariant: str | None = None
    """The invariant a counterexample broke (``None``: an invalid end state or none)."""
    states: int = 0
    transitions: int = 0
    seconds: float = 0.0
    detail: str = ""
    trail: list[str] = field(default_factory=list)
    """The counterexample's steps (the model's ``MSC:`` lines), when replayed."""

    @property
    def as_expected(self) -> bool:
        if self.check.expect is None:
            return self.verdict == "passed"
        return self.verdict == "counterexample" and self.invariant == self.check.expect

    def line(self) -> str:
        """One line of the report."""
        if self.verdict == "passed":
            found = "passed"
        elif self.verdict == "counterexample":
            found = f"counterexample: {self.invariant or 'invalid end state'}"
        else:
            found = f"error: {self.detail}"
        wanted = "no error" if self.check.expect is None else f"breaks {self.check.expect}"
        mark = "ok  " if self.as_expected else "FAIL"
        return (
            f"{mark} {self.check.name:<30} {found:<36} (expected: {wanted}; "
            f"{self.states:,} states, {self.transitions:,} transitions, {self.seconds:.1f} s)"
        )


def compiler() -> str | None:
    """The C compiler for the verifier: gcc, else cc."""
    return shutil.which("gcc") or shutil.which("cc")


def missing_tools() -> str | None:
    """Why the checks cannot run here (``None``: spin and a C compiler are there)."""
    if shutil.which("spin") is None:
        return "spin is not installed (Debian's spin package)"
    if compiler() is None:
        return "no C compiler (gcc or cc) to build SPIN's verifier"
    return None


_STORED = re.compile(r"(\d+) states, stored")
_TRANSITIONS = re.compile(r"(\d+) transitions \(= stored\+matched\)")
_ERRORS = re.compile(r"errors: (\d+)")
_VIOLATED = re.compile(r"assertion violated.*?violated_(\w+)")


def _tool(argv: Sequence[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)


def run(check: Check, *, workdir: Path | None = None, trail: bool = True) -> Result:
    """Run ``check`` in ``workdir`` (a temporary directory by default)."""
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="drover-model-") as tmp:
            return run(check, workdir=Path(tmp), trail=trail)
    cc = compiler()
    if cc is None or shutil.which("spin") is None:
        return Result(check, "error", detail=missing_tools() or "")
    started = time.monotonic()
    shutil.copyfile(MODEL, workdir / MODEL.name)
    steps: list[tuple[str, list[str]]] = [
        ("spin -a", ["spin", "-a", *check.defines, MODEL.name]),
        (
            "compile pan.c",
            [
                cc,
                "-O2" if check.optimise else "-O0",
                "-w",
                "-DSAFETY",
                # A counterexample is wanted short: breadth first finds the shortest.
                *(["-DBFS"] if check.expect is not None else []),
                "-o",
                "pan",
                "pan.c",
            ],
        ),
        ("pan", ["./pan", "-m1000000"]),
    ]
    out = ""
    for label, argv in steps:
        done = _tool(argv, workdir)
        out = done.stdout + done.stderr
        if label != "pan" and done.returncode != 0:
            return Result(check, "error", detail=f"{label} failed: {out.strip()[-2000:]}")
    seconds = time.monotonic() - started
    stored = _STORED.search(out)
    moves = _TRANSITIONS.search(out)
    errors = _ERRORS.search(out)
    result = Result(
        check,
        "error",
        states=int(stored.group(1)) if stored else 0,
        transitions=int(moves.group(1)) if moves else 0,
        seconds=seconds,
    )
    if errors is None or "max search depth too small" in out:
        result.detail = f"pan did not finish a full search: {out.strip()[-2000:]}"
        return result
    if errors.group(1) == "0":
        result.verdict = "passed"
        return result
    result.verdict = "counterexample"
    violated = _VIOLATED.search(out)
    result.invariant = violated.group(1) if violated else None
    result.detail = next((ln.strip() for ln in out.splitlines() if ln.startswith("pan:1:")), "")
    if trail:
        replay = _tool(["spin", "-t", *check.defines, MODEL.name], workdir)
        result.trail = [
            ln.strip().removeprefix("MSC: ")
            for ln in replay.stdout.splitlines()
            if ln.strip().startswith("MSC:")
        ]
    return result


# ---- the mapping between the model's steps and the SQL they stand for -----------------------

_STEP = re.compile(r"/\* step: ([a-z_]+) \*/(.*?)/\* end: \1 \*/", re.DOTALL)
_DEFINE = re.compile(r"^#define (\w+)(?:\([^)]*\))?((?:[^\n]*\\\n)*[^\n]*)", re.MULTILINE)
_INLINE = re.compile(r"^inline (\w+)\([^)]*\) \{\n(.*?)^\}", re.DOTALL | re.MULTILINE)
_WORD = re.compile(r"\b\w+\b")
_FUNCTION = "CREATE FUNCTION public.{name}("
_NAME = re.compile(r"--\s*name:\s*(\w+)")


def model_steps(text: str | None = None) -> dict[str, str]:
    """Each step's model text: its marked regions, then the macros and inlines they use
    (every definition of each, transitively), so a change to any of them changes the step."""
    if text is None:
        text = MODEL.read_text(encoding="utf-8")
    regions: dict[str, list[str]] = {}
    for match in _STEP.finditer(text):
        regions.setdefault(match.group(1), []).append(match.group(2))
    bodies: dict[str, list[str]] = {}
    for match in _DEFINE.finditer(text):
        bodies.setdefault(match.group(1), []).append(match.group(0))
    for match in _INLINE.finditer(text):
        bodies.setdefault(match.group(1), []).append(match.group(0))
    steps: dict[str, str] = {}
    for name, parts in regions.items():
        seen: set[str] = set()
        pending = [w for part in parts for w in _WORD.findall(part)]
        used: list[str] = []
        while pending:
            word = pending.pop(0)
            if word in bodies and word not in seen:
                seen.add(word)
                used.extend(bodies[word])
                pending.extend(w for body in bodies[word] for w in _WORD.findall(body))
        steps[name] = "\n".join([*parts, *used])
    return steps


def _normalise_sql(sql: str) -> str:
    lines = [ln.split("--", 1)[0] if "'" not in ln else ln for ln in sql.splitlines()]
    return " ".join(" ".join(lines).split())


def sql_text(ref: str) -> str:
    """A statement's text by reference: ``file.sql:name`` (a named query in sql/queries,
    comments dropped, state sets expanded) or ``function:name`` (sql/schema.sql)."""
    where, name = ref.split(":", 1)
    if where == "function":
        schema = (SQL / "schema.sql").read_text(encoding="utf-8")
        start = schema.find(_FUNCTION.format(name=name))
        if start < 0:
            raise KeyError(f"{ref}: no function {name} in sql/schema.sql")
        end = schema.index("$$;", start) + 3
        return _normalise_sql(schema[start:end])
    path = SQL / "queries" / where
    current: str | None = None
    body: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        head = _NAME.match(line.strip())
        if head:
            current = head.group(1)
        elif current == name and not line.lstrip().startswith("--"):
            body.append(line)
    if not body:
        raise KeyError(f"{ref}: no query named {name} in sql/queries/{where}")
    return _normalise_sql(expand_state_sets("\n".join(body), where))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def recorded_mapping() -> dict[str, dict[str, object]]:
    """model/mapping.toml: ``{step: {"sql": [refs], "sql_fingerprint", "model_fingerprint"}}``."""
    with MAPPING.open("rb") as handle:
        steps = tomllib.load(handle)["step"]
    assert isinstance(steps, dict)
    return steps


def _fingerprints(refs: Iterable[str], model_text: str) -> tuple[str, str]:
    sql = "\n".join(f"{ref}\n{sql_text(ref)}" for ref in refs)
    return _digest(sql), _digest(" ".join(model_text.split()))


def mapping_problems() -> list[str]:
    """What no longer agrees between the model, the SQL and model/mapping.toml (none: [])."""
    steps = model_steps()
    recorded = recorded_mapping()
    problems: list[str] = []
    fix = "then record it: .venv/bin/python -m tools.model_check --fingerprints --write"
    for name in sorted(set(steps) - set(recorded)):
        problems.append(
            f"model step {name!r} is not in model/mapping.toml: map it to the SQL it stands for "
            f"there and in ADR 0055's table, {fix}"
        )
    for name in sorted(set(recorded) - set(steps)):
        problems.append(
            f"model/mapping.toml maps step {name!r}, which the model no longer marks "
            "(/* step: name */ ... /* end: name */)"
        )
    for name in sorted(set(steps) & set(recorded)):
        entry = recorded[name]
        refs = entry.get("sql", [])
        assert isinstance(refs, list)
        if "sql_fingerprint" not in entry or "model_fingerprint" not in entry:
            problems.append(
                f"step {name!r} has no recorded fingerprints: check it against "
                f"{', '.join(refs) or 'what it stands for'} (ADR 0055's table), {fix}"
            )
            continue
        try:
            sql_now, model_now = _fingerprints(refs, steps[name])
        except (KeyError, OSError) as exc:
            problems.append(f"step {name!r}: {exc}")
            continue
        if sql_now != entry.get("sql_fingerprint"):
            problems.append(
                f"statement {', '.join(refs)} changed: re-check model step {name!r} "
                f"(model/drover.pml) and ADR 0055's table against it, {fix}"
            )
        if model_now != entry.get("model_fingerprint"):
            problems.append(
                f"model step {name!r} changed: re-check that it still stands for "
                f"{', '.join(refs) or 'no statement'} (ADR 0055's table), {fix}"
            )
    return problems


def write_mapping() -> None:
    """Record the current fingerprints in model/mapping.toml, keeping each step's SQL list."""
    steps = model_steps()
    recorded = recorded_mapping()
    lines = [
        "# Each model step (model/drover.pml) and the SQL statements it stands for (ADR 0055),",
        "# with a fingerprint of each side. tests/model/test_mapping.py fails when either",
        "# changes; re-check the step, then: .venv/bin/python -m tools.model_check "
        "--fingerprints --write",
        "",
    ]
    for name in sorted(steps):
        entry = recorded.get(name, {})
        refs = entry.get("sql", [])
        assert isinstance(refs, list)
        sql_now, model_now = _fingerprints(refs, steps[name])
        listed = ", ".join(f'"{r}"' for r in refs)
        lines += [
            f"[step.{name}]",
            f"sql = [{listed}]",
            f'sql_fingerprint = "{sql_now}"',
            f'model_fingerprint = "{model_now}"',
            "",
        ]
    MAPPING.write_text("\n".join(lines), encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.model_check", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--full", action="store_true", help="also the whole-kernel check")
    parser.add_argument("--only", action="append", default=[], help="run this check (repeatable)")
    parser.add_argument("--list", action="store_true", help="name the checks and stop")
    parser.add_argument("--trail", action="store_true", help="print each counterexample's steps")
    parser.add_argument("--fingerprints", action="store_true", help="check model/mapping.toml")
    parser.add_argument("--write", action="store_true", help="with --fingerprints: record them")
    args = parser.parse_args(argv)
    if args.fingerprints:
        if args.write:
            write_mapping()
        problems = mapping_problems()
        for problem in problems:
            print(problem)
        print("mapping: current" if not problems else f"mapping: {len(problems)} problem(s)")
        return 1 if problems else 0
    if args.list:
        for check in CHECKS:
            print(f"{check.name:<30} {check.about}{' (--full)' if check.full else ''}")
        return 0
    reason = missing_tools()
    if reason is not None:
        print(f"cannot check the model: {reason}", file=sys.stderr)
        return 2
    unknown = set(args.only) - {c.name for c in CHECKS}
    if unknown:
        parser.error(f"no check named {', '.join(sorted(unknown))} (see --list)")
    chosen = [
        c for c in CHECKS if (c.name in args.only) or (not args.only and (args.full or not c.full))
    ]
    failed = 0
    for check in chosen:
        result = run(check)
        print(result.line(), flush=True)
        if args.trail and result.trail:
            for step in result.trail:
                print(f"       {step}")
        failed += not result.as_expected
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
