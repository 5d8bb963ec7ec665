"""The fault suite's history as plain data: the database's final truth plus what the processes saw.

A run leaves a directory of JSON-lines files (``*.jsonl``), one JSON object
per line, whose ``ev`` field names the record type:

=========== ===================================================================
``ev``      record
=========== ===================================================================
``job``     ``JobFinal``: a job row after the run (the database snapshot)
``effect``  ``Effect``: one committed side effect of a handler
``start``   ``Start``: a handler began (a worker's own history file)
``refused`` ``Refused``: drover refused a stale claim's fenced write
``fault``   ``Fault``: what the nemesis did, and when
``params``  ``Params``: the run's lease, intervals and mode (optional)
=========== ===================================================================

Any other ``ev`` (``process``, say) and any field a record type does not
know are ignored, so the harness may record more than the checker reads.
Each process appends to its own file with one ``write`` per record, so a
SIGKILL can at worst leave the file's last line cut short: such a line is
dropped. Any other malformed line is an error naming the file and line.

Times are float seconds since the epoch (``time.time()``): every process
and the database server run on one machine, so their clocks agree. Nothing
here touches a database; the checker (``drover.faults.harness.checker``) reads
only this data.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "FAULT_KINDS",
    "MODES",
    "STATES",
    "TERMINAL_STATES",
    "WORKLOADS",
    "Effect",
    "Fault",
    "History",
    "JobFinal",
    "Params",
    "Record",
    "Refused",
    "Start",
    "dump_history",
    "dump_records",
    "load_history",
    "record_of",
]

WORKLOADS = ("fast", "slow", "flaky", "snooze", "cancel", "poison")
"""How a job's handler behaves; ``cancel`` and ``poison`` jobs never have an effect."""

STATES = ("available", "scheduled", "retryable", "running", "completed", "cancelled", "dead")
"""drover's job states."""

TERMINAL_STATES = frozenset({"completed", "cancelled", "dead"})
"""The states a job may end a run in; any other after the final drain is a lost job."""

FAULT_KINDS = (
    "kill", "stop", "pg_restart", "pg_crash", "terminate", "proxy_cut", "proxy_blackhole",
    "drain",
)  # fmt: skip
"""The nemesis's fault kinds. Unknown kinds still load (and are counted)."""

MODES = ("plain", "tx")
"""``plain``: handlers return and drover completes; ``tx``: handlers use ``complete_tx``."""


@dataclass(frozen=True)
class JobFinal:
    """A job row as the database holds it after the run (the snapshot taken after the final drain).

    ``errors`` are drover's per-attempt error entries, ``{"attempt": int, "at":
    ISO-8601 with timezone, "error": str, "trace": str | None}``; an entry whose
    ``error`` starts with ``drover: lease expired`` is a rescue by the rescuer.
    """

    id: int
    workload: str
    state: str
    attempt: int
    max_attempts: int
    finalized_at: float | None
    errors: list[dict[str, Any]]


@dataclass(frozen=True)
class Effect:
    """One successful side effect of a handler, as committed to the effects table.

    ``t_start``/``t_end`` are the handler's wall-clock start and the moment it
    wrote the effect; ``db_at`` is the database's clock at the insert. With
    ``tx`` the effect shared the transaction of the job's ``complete_tx``, so
    it exists only because that completion committed.
    """

    job: int
    attempt: int
    pid: int
    t_start: float
    t_end: float
    db_at: float
    tx: bool


@dataclass(frozen=True)
class Start:
    """A handler began an attempt (from its worker's history; a SIGKILL may have lost it)."""

    job: int
    attempt: int
    pid: int
    t: float


@dataclass(frozen=True)
class Refused:
    """drover refused a stale worker's fenced write (completion or failure) for that claim."""

    job: int
    attempt: int
    pid: int
    t: float
    reason: str


@dataclass(frozen=True)
class Fault:
    """One fault the nemesis injected.

    ``pid`` is the worker it hit, or None for a database- or network-wide
    fault that affects every worker. ``stop``: ``t_end`` is the SIGCONT;
    ``kill`` and ``terminate``: ``t_end == t_start``; ``drain``: ``t_start`` is
    the SIGTERM, ``t_end`` the process's exit, ``budget`` the drain budget and
    ``exit_code`` the exit status (None if it had to be killed).
    """

    kind: str
    t_start: float
    t_end: float
    pid: int | None
    budget: float | None = None
    exit_code: int | None = None


@dataclass(frozen=True)
class Params:
    """The run's knobs the checker's bounds depend on (seconds).

    ``epsilon`` is the slack allowed on every time bound; ``mode`` is ``plain``
    or ``tx`` (handlers used ``complete_tx``).
    """

    lease: float
    rescue_interval: float
    heartbeat: float
    poll_interval: float
    epsilon: float = 1.0
    mode: str = "plain"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"Params.mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        for name in ("lease", "rescue_interval", "heartbeat", "poll_interval", "epsilon"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"Params.{name} must be a finite number >= 0, not {value!r}")


@dataclass(frozen=True)
class History:
    """Everything one run recorded: the jobs by id, the effects, starts, refusals and faults."""

    jobs: dict[int, JobFinal]
    effects: list[Effect]
    starts: list[Start]
    refused: list[Refused]
    faults: list[Fault]
    params: Params

    def canonical(self) -> History:
        """This history, jobs by id and every list in time order (as ``load_history`` gives)."""
        return History(
            jobs={job_id: self.jobs[job_id] for job_id in sorted(self.jobs)},
            effects=sorted(self.effects, key=_effect_key),
            starts=sorted(self.starts, key=_start_key),
            refused=sorted(self.refused, key=_refused_key),
            faults=sorted(self.faults, key=_fault_key),
            params=self.params,
        )


Record = JobFinal | Effect | Start | Refused | Fault | Params
"""Any record type of a history file."""


def _effect_key(e: Effect) -> tuple[float, float, int, int, int]:
    return (e.t_start, e.t_end, e.job, e.attempt, e.pid)


def _start_key(s: Start) -> tuple[float, int, int, int]:
    return (s.t, s.job, s.attempt, s.pid)


def _refused_key(r: Refused) -> tuple[float, int, int, int, str]:
    return (r.t, r.job, r.attempt, r.pid, r.reason)


def _fault_key(f: Fault) -> tuple[float, float, str, int]:
    return (f.t_start, f.t_end, f.kind, -1 if f.pid is None else f.pid)


_EV: dict[type[Any], str] = {
    JobFinal: "job",
    Effect: "effect",
    Start: "start",
    Refused: "refused",
    Fault: "fault",
    Params: "params",
}


def record_of(item: Record) -> dict[str, Any]:
    """The JSON-lines record for one item: ``{"ev": ..., **fields}``."""
    return {"ev": _EV[type(item)], **dataclasses.asdict(item)}


def dump_records(path: Path, records: Iterable[Mapping[str, Any]], *, append: bool = False) -> None:
    """Write ``records`` to ``path`` as JSON lines (one compact object per line)."""
    with path.open("a" if append else "w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n")


def dump_history(history: History, directory: Path) -> None:
    """Write ``history`` as a run would leave it: ``db.jsonl``, ``worker-<pid>.jsonl``, and so on.

    The database's truth (jobs, effects) goes to ``db.jsonl``, each worker's
    starts and refusals to ``worker-<pid>.jsonl``, the faults to
    ``orchestrator.jsonl`` and the params to ``params.jsonl``. Files of the
    same names are replaced; ``load_history`` reads it all back.
    """
    directory.mkdir(parents=True, exist_ok=True)
    h = history.canonical()
    dump_records(directory / "params.jsonl", [record_of(h.params)])
    dump_records(
        directory / "db.jsonl",
        [*(record_of(j) for j in h.jobs.values()), *(record_of(e) for e in h.effects)],
    )
    dump_records(directory / "orchestrator.jsonl", [record_of(f) for f in h.faults])
    per_pid: dict[int, list[dict[str, Any]]] = {}
    items: list[Start | Refused] = [*h.starts, *h.refused]
    for item in items:
        per_pid.setdefault(item.pid, []).append(record_of(item))
    for pid, records in sorted(per_pid.items()):
        dump_records(directory / f"worker-{pid}.jsonl", records)


# --- loading --------------------------------------------------------------------------


class _Fields:
    """Typed access to one record's fields; every error names the file and line."""

    def __init__(self, record: Mapping[str, Any], where: str) -> None:
        self._r = record
        self.where = where

    def has(self, name: str) -> bool:
        return name in self._r

    def get_present(self, name: str) -> bool:
        """Whether the field exists and is not null."""
        return self._r.get(name) is not None

    def _get(self, name: str) -> Any:
        if name not in self._r:
            raise ValueError(f"{self.where}: {self._r.get('ev')!r} record has no field {name!r}")
        return self._r[name]

    def _bad(self, name: str, wanted: str) -> ValueError:
        return ValueError(f"{self.where}: field {name!r} must be {wanted}, not {self._r[name]!r}")

    def get_int(self, name: str) -> int:
        value = self._get(name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._bad(name, "an integer")
        return value

    def get_opt_int(self, name: str) -> int | None:
        return None if self._r.get(name) is None else self.get_int(name)

    def get_float(self, name: str) -> float:
        value = self._get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._bad(name, "a number")
        if not math.isfinite(value):
            raise self._bad(name, "a finite number")
        return float(value)

    def get_opt_float(self, name: str) -> float | None:
        return None if self._r.get(name) is None else self.get_float(name)

    def get_str(self, name: str) -> str:
        value = self._get(name)
        if not isinstance(value, str):
            raise self._bad(name, "a string")
        return value

    def get_bool(self, name: str) -> bool:
        value = self._get(name)
        if not isinstance(value, bool):
            raise self._bad(name, "true or false")
        return value

    def get_errors(self, name: str) -> list[dict[str, Any]]:
        value = self._r.get(name)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(e, dict) for e in value):
            raise self._bad(name, "a list of objects")
        return [dict(e) for e in value]


def _lines(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """The records of one file, with ``file:line``; a cut-short last line is dropped."""
    data = path.read_bytes()
    lines = data.split(b"\n")
    # A file written line by line ends with "\n", leaving an empty last element;
    # a non-empty last element is a line whose writer never finished it.
    unterminated = len(lines) - 1 if lines[-1] else None
    for index, raw in enumerate(lines):
        if not raw.strip():
            continue
        where = f"{path}:{index + 1}"
        try:
            record = json.loads(raw)
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError alike
            if index == unterminated:
                return  # truncated by a SIGKILL mid-write: never a complete record
            raise ValueError(f"{where}: not a JSON line ({exc})") from None
        if not isinstance(record, dict):
            raise ValueError(
                f"{where}: a record must be a JSON object, not {type(record).__name__}"
            )
        yield where, record


def _params(f: _Fields) -> Params:
    return Params(
        lease=f.get_float("lease"),
        rescue_interval=f.get_float("rescue_interval"),
        heartbeat=f.get_float("heartbeat"),
        poll_interval=f.get_float("poll_interval"),
        epsilon=f.get_float("epsilon") if f.has("epsilon") else 1.0,
        mode=f.get_str("mode") if f.has("mode") else "plain",
    )


def load_history(directory: Path, params: Params | None = None) -> History:
    """Read every ``*.jsonl`` file in ``directory`` into a ``History``.

    ``params`` given here win; otherwise the directory must hold a ``params``
    record (as ``dump_history`` writes). Lists come back in time order,
    jobs by id (see ``History.canonical``). Raises ``ValueError`` for a
    malformed record, a job recorded twice, conflicting params records or
    missing params, and ``FileNotFoundError`` if ``directory`` does not exist.
    """
    if not directory.is_dir():
        raise FileNotFoundError(f"no history directory at {directory}")
    jobs: dict[int, JobFinal] = {}
    effects: list[Effect] = []
    starts: list[Start] = []
    refused: list[Refused] = []
    faults: list[Fault] = []
    recorded: Params | None = None
    for path in sorted(directory.glob("*.jsonl")):
        for where, record in _lines(path):
            f = _Fields(record, where)
            ev = f.get_str("ev")
            if ev == "job":
                job = JobFinal(
                    id=f.get_int("id"),
                    # A job not enqueued by the workload has no workload (null): "".
                    workload=f.get_str("workload") if f.get_present("workload") else "",
                    state=f.get_str("state"),
                    attempt=f.get_int("attempt"),
                    max_attempts=f.get_int("max_attempts"),
                    finalized_at=f.get_opt_float("finalized_at"),
                    errors=f.get_errors("errors"),
                )
                if job.id in jobs:
                    raise ValueError(f"{where}: job {job.id} recorded twice")
                jobs[job.id] = job
            elif ev == "effect":
                effects.append(
                    Effect(
                        job=f.get_int("job"),
                        attempt=f.get_int("attempt"),
                        pid=f.get_int("pid"),
                        t_start=f.get_float("t_start"),
                        t_end=f.get_float("t_end"),
                        db_at=f.get_float("db_at"),
                        tx=f.get_bool("tx"),
                    )
                )
            elif ev == "start":
                starts.append(
                    Start(
                        job=f.get_int("job"),
                        attempt=f.get_int("attempt"),
                        pid=f.get_int("pid"),
                        t=f.get_float("t"),
                    )
                )
            elif ev == "refused":
                refused.append(
                    Refused(
                        job=f.get_int("job"),
                        attempt=f.get_int("attempt"),
                        pid=f.get_int("pid"),
                        t=f.get_float("t"),
                        reason=f.get_str("reason"),
                    )
                )
            elif ev == "fault":
                faults.append(
                    Fault(
                        kind=f.get_str("kind"),
                        t_start=f.get_float("t_start"),
                        t_end=f.get_float("t_end"),
                        pid=f.get_opt_int("pid"),
                        budget=f.get_opt_float("budget"),
                        exit_code=f.get_opt_int("exit_code"),
                    )
                )
            elif ev == "params":
                found = _params(f)
                if recorded is not None and found != recorded:
                    raise ValueError(f"{where}: params record disagrees with an earlier one")
                recorded = found
    chosen = params if params is not None else recorded
    if chosen is None:
        raise ValueError(
            f"{directory}: no params record in the history; pass params to load_history"
        )
    return History(
        jobs=jobs, effects=effects, starts=starts, refused=refused, faults=faults, params=chosen
    ).canonical()
