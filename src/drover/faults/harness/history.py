"""The fault suite's history as plain data: the database's final truth plus what the processes saw.

A run leaves a directory of JSON-lines files (``*.jsonl``), one JSON object
per line, whose ``ev`` field names the record type:

=========== ===================================================================
``ev``      record
=========== ===================================================================
``job``     ``JobFinal``: a job row after the run (the database snapshot)
``effect``  ``Effect``: one committed side effect of a handler
``start``   ``Start``: a handler began (a worker's own history file)
``end``     ``End``: a handler finished, returned or raised (the same file)
``refused`` ``Refused``: drover refused a stale claim's fenced write
``fault``   ``Fault``: what the nemesis did, and when
``params``  ``Params``: the run's lease, intervals and mode (optional)
``limit``   ``LimitRule``: a concurrency limit the workload declares
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
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drover.faults.harness.jsonl import Fields, dump_records, read_records

__all__ = [
    "FAULT_KINDS",
    "MODES",
    "STATES",
    "TERMINAL_STATES",
    "WORKLOADS",
    "Effect",
    "End",
    "Fault",
    "History",
    "JobFinal",
    "LimitRule",
    "Params",
    "Record",
    "Refused",
    "Start",
    "dump_history",
    "dump_records",
    "load_history",
    "record_of",
]

WORKLOADS = ("fast", "slow", "flaky", "snooze", "cancel", "poison", "limited", "step")
"""How a job's handler behaves; ``cancel`` and ``poison`` jobs never have an effect."""

STATES = (
    "pending", "available", "scheduled", "retryable", "running", "completed", "cancelled", "dead",
)  # fmt: skip
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
    ``kind``, ``queue`` and ``args`` say which limits count the job (empty
    when a snapshot did not record them). ``workflow_id`` is the workflow the
    job belongs to (None for a job inserted on its own) and ``depends_on``
    the ids it waited for, from the database's edges (``drover_job_deps``).
    """

    id: int
    workload: str
    state: str
    attempt: int
    max_attempts: int
    finalized_at: float | None
    errors: list[dict[str, Any]]
    kind: str = ""
    queue: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    workflow_id: int | None = None
    depends_on: tuple[int, ...] = ()
    ledger: list[dict[str, Any]] = field(default_factory=list)
    """The job's duplicate ledger (ADR 0037): ``{"event", "attempt", "worker", ...}``
    entries, oldest first; empty when the snapshot did not record it."""


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
    """A handler began an attempt (from its worker's history; a SIGKILL may have lost it).

    ``deps`` is what a workflow step's handler read of its dependencies as it
    began (``job.parent_results()``: each dependency's result, which the
    suite's steps make their own job id; null for one without a result, so
    not completed when read); None when the handler read nothing.
    """

    job: int
    attempt: int
    pid: int
    t: float
    deps: tuple[int | None, ...] | None = None


@dataclass(frozen=True)
class End:
    """A handler finished an attempt, whatever its outcome (absent if its process died first)."""

    job: int
    attempt: int
    pid: int
    t: float


@dataclass(frozen=True)
class LimitRule:
    """A concurrency limit the run's workload declares: at most ``concurrency`` running at once.

    ``scope`` is ``kind`` or ``queue`` and ``target`` its name; with
    ``partition_by`` the limit holds per value of that top-level args field
    (a missing field is the value null), as ``drover.Limit`` does.
    """

    scope: str
    target: str
    concurrency: int
    partition_by: str | None = None

    def __post_init__(self) -> None:
        if self.scope not in ("kind", "queue"):
            raise ValueError(f"LimitRule.scope must be 'kind' or 'queue', not {self.scope!r}")
        if not self.target:
            raise ValueError("LimitRule.target must name a kind or a queue")
        if isinstance(self.concurrency, bool) or self.concurrency < 1:
            raise ValueError(f"LimitRule.concurrency must be 1 or more, not {self.concurrency!r}")
        if self.partition_by == "":
            raise ValueError("LimitRule.partition_by must name an args field, or be None")

    def __str__(self) -> str:
        by = "" if self.partition_by is None else f"[{self.partition_by}]"
        return f"{self.scope}:{self.target}{by}"


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

    ``epsilon`` is the slack allowed on every time bound; ``drain_slack``,
    when given, replaces it for drains (SIGTERM to exit, which includes the
    interpreter's own exit and is the bound most moved by a loaded CPU);
    ``mode`` is ``plain`` or ``tx`` (handlers used ``complete_tx``).
    """

    lease: float
    rescue_interval: float
    heartbeat: float
    poll_interval: float
    epsilon: float = 1.0
    mode: str = "plain"
    drain_slack: float | None = None

    @property
    def drain_bound_slack(self) -> float:
        """The slack on a drain's budget: ``drain_slack``, else ``epsilon``."""
        return self.epsilon if self.drain_slack is None else self.drain_slack

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"Params.mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        for name in ("lease", "rescue_interval", "heartbeat", "poll_interval", "epsilon"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"Params.{name} must be a finite number >= 0, not {value!r}")
        if self.drain_slack is not None:
            value = self.drain_slack
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"Params.drain_slack must be a finite number >= 0, not {value!r}")


@dataclass(frozen=True)
class History:
    """Everything one run recorded: jobs by id, effects, starts, refusals, faults, ends, limits."""

    jobs: dict[int, JobFinal]
    effects: list[Effect]
    starts: list[Start]
    refused: list[Refused]
    faults: list[Fault]
    params: Params
    ends: list[End] = field(default_factory=list)
    limits: list[LimitRule] = field(default_factory=list)

    def canonical(self) -> History:
        """This history, jobs by id and every list in time order (as ``load_history`` gives)."""
        return History(
            jobs={job_id: self.jobs[job_id] for job_id in sorted(self.jobs)},
            effects=sorted(self.effects, key=_effect_key),
            starts=sorted(self.starts, key=_start_key),
            refused=sorted(self.refused, key=_refused_key),
            faults=sorted(self.faults, key=_fault_key),
            params=self.params,
            ends=sorted(self.ends, key=_start_key),
            limits=sorted(self.limits, key=str),
        )


Record = JobFinal | Effect | Start | End | Refused | Fault | Params | LimitRule
"""Any record type of a history file."""


def _effect_key(e: Effect) -> tuple[float, float, int, int, int]:
    return (e.t_start, e.t_end, e.job, e.attempt, e.pid)


def _start_key(s: Start | End) -> tuple[float, int, int, int]:
    return (s.t, s.job, s.attempt, s.pid)


def _refused_key(r: Refused) -> tuple[float, int, int, int, str]:
    return (r.t, r.job, r.attempt, r.pid, r.reason)


def _fault_key(f: Fault) -> tuple[float, float, str, int]:
    return (f.t_start, f.t_end, f.kind, -1 if f.pid is None else f.pid)


_EV: dict[type[Any], str] = {
    JobFinal: "job",
    Effect: "effect",
    Start: "start",
    End: "end",
    Refused: "refused",
    Fault: "fault",
    Params: "params",
    LimitRule: "limit",
}


def record_of(item: Record) -> dict[str, Any]:
    """The JSON-lines record for one item: ``{"ev": ..., **fields}``."""
    return {"ev": _EV[type(item)], **dataclasses.asdict(item)}


def dump_history(history: History, directory: Path) -> None:
    """Write ``history`` as a run would leave it: ``db.jsonl``, ``worker-<pid>.jsonl``, and so on.

    The database's truth (jobs, effects) goes to ``db.jsonl``, each worker's
    starts, ends and refusals to ``worker-<pid>.jsonl``, the faults and limits
    to ``orchestrator.jsonl`` and the params to ``params.jsonl``. Files of the
    same names are replaced; ``load_history`` reads it all back.
    """
    directory.mkdir(parents=True, exist_ok=True)
    h = history.canonical()
    dump_records(directory / "params.jsonl", [record_of(h.params)])
    dump_records(
        directory / "db.jsonl",
        [*(record_of(j) for j in h.jobs.values()), *(record_of(e) for e in h.effects)],
    )
    dump_records(
        directory / "orchestrator.jsonl",
        [*(record_of(f) for f in h.faults), *(record_of(lim) for lim in h.limits)],
    )
    per_pid: dict[int, list[dict[str, Any]]] = {}
    items: list[Start | End | Refused] = [*h.starts, *h.ends, *h.refused]
    for item in items:
        per_pid.setdefault(item.pid, []).append(record_of(item))
    for pid, records in sorted(per_pid.items()):
        dump_records(directory / f"worker-{pid}.jsonl", records)


# --- loading --------------------------------------------------------------------------


def _params(f: Fields) -> Params:
    return Params(
        lease=f.get_float("lease"),
        rescue_interval=f.get_float("rescue_interval"),
        heartbeat=f.get_float("heartbeat"),
        poll_interval=f.get_float("poll_interval"),
        epsilon=f.get_float("epsilon") if f.has("epsilon") else 1.0,
        mode=f.get_str("mode") if f.has("mode") else "plain",
        drain_slack=f.get_opt_float("drain_slack") if f.has("drain_slack") else None,
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
    ends: list[End] = []
    limits: list[LimitRule] = []
    recorded: Params | None = None
    for path in sorted(directory.glob("*.jsonl")):
        for where, record in read_records(path):
            f = Fields(record, where)
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
                    kind=f.get_opt_str("kind") or "",
                    queue=f.get_opt_str("queue") or "",
                    args=f.get_object("args"),
                    workflow_id=f.get_opt_int("workflow_id"),
                    depends_on=f.get_ints("depends_on"),
                    ledger=f.get_errors("ledger"),
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
                        deps=f.get_opt_ints_or_nulls("deps"),
                    )
                )
            elif ev == "end":
                ends.append(
                    End(
                        job=f.get_int("job"),
                        attempt=f.get_int("attempt"),
                        pid=f.get_int("pid"),
                        t=f.get_float("t"),
                    )
                )
            elif ev == "limit":
                limits.append(
                    LimitRule(
                        scope=f.get_str("scope"),
                        target=f.get_str("target"),
                        concurrency=f.get_int("concurrency"),
                        partition_by=f.get_opt_str("partition_by"),
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
        jobs=jobs,
        effects=effects,
        starts=starts,
        refused=refused,
        faults=faults,
        params=chosen,
        ends=ends,
        limits=limits,
    ).canonical()
