"""Records that cross drover's layers: what is to be written, what was decided, what a write did.

A leaf module (it imports only ``drover.job``): the insert side builds
``JobInsertParams`` and the database layer writes them; the engine
decides an ``Outcome`` and the database layer records it, reporting a
``Recorded`` per outcome. Keeping these here lets every layer import them
without importing another layer.

Named tuples rather than frozen dataclasses where one is built per job: a
tuple is several times cheaper to build (ADR 0009).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, overload

from drover.job import JobState

__all__ = [
    "AppliedMigration",
    "EncodedBatch",
    "EncodedGraph",
    "Identity",
    "InsertParams",
    "JobInsertParams",
    "KindStats",
    "Migration",
    "MigrationStatus",
    "Outcome",
    "PeriodicInfo",
    "QueueStats",
    "Recorded",
    "Renewal",
    "UniformBatch",
    "WorkerInfo",
    "WriteResult",
]


class InsertParams(NamedTuple):
    """One job as it will be written: validated and encoded (public as ``drover.InsertParams``).

    What an insert middleware reads in a ``drover.InsertBatch`` (ADR 0047).
    A named tuple, so it is immutable: a middleware changes a job with
    ``InsertBatch.replace``, ``add_meta`` or ``add_tags``, which check the
    new values as ``InsertOpts`` does.
    """

    kind: str
    """The job's kind (its args class's ``kind``, or the kind given to ``Inspector.enqueue``)."""
    queue: str
    args_json: str
    """The args as compact JSON text, as they will be stored."""
    max_attempts: int
    scheduled_at: datetime | None
    """The time given, or ``None`` for now (the database clock decides which is due)."""
    unique_key: str | None
    priority: int
    tags: tuple[str, ...] = ()
    meta: str | None = None
    """The job's metadata as JSON text (an object), or ``None`` for none (stored as ``{}``)."""


JobInsertParams = InsertParams
"""The name drover's own modules use for ``InsertParams``."""


class Identity(NamedTuple):
    """A job's unique identity, computed before any I/O (ADR 0031)."""

    hash: str
    """SHA-256 of the identity's canonical JSON, in hex."""
    period_us: int | None
    """The unique period in microseconds: the database clock picks the bucket."""
    states: int
    """The ``unique_states`` mask: the states in which the job holds the identity."""
    form: str
    """``u`` (unique), ``d`` (debounce) or ``t`` (throttle)."""
    window_us: int | None
    """The debounce or throttle window in microseconds."""


class EncodedGraph(NamedTuple):
    """Jobs to insert together with the dependencies between them (ADR 0029)."""

    params: list[JobInsertParams]
    edges: list[tuple[int, int]]
    """``(job, dependency)`` pairs of indexes into ``params``."""
    external: list[tuple[int, int]]
    """``(job index, id of an existing job it depends on)`` pairs."""
    workflow: bool
    """Give the jobs a workflow id (their first job's id)."""


class UniformBatch(Sequence[JobInsertParams]):
    """Encoded items of one args class, none with insert options: the common batch.

    Holds the class's kind, queue, attempts and priority once and the items' JSON texts,
    instead of a ``JobInsertParams`` per item (each one an object the
    garbage collector tracks). Indexing still gives ``JobInsertParams``, built
    on demand, for code that wants them.
    """

    __slots__ = ("args_json", "kind", "max_attempts", "meta", "priority", "queue")

    def __init__(
        self,
        kind: str,
        queue: str,
        max_attempts: int,
        priority: int,
        args_json: list[str],
        meta: str | None = None,
    ) -> None:
        self.kind = kind
        self.queue = queue
        self.max_attempts = max_attempts
        self.priority = priority
        self.args_json = args_json
        self.meta = meta
        """Metadata every item carries (JSON text: a traced batch's trace context), or ``None``."""

    def __len__(self) -> int:
        return len(self.args_json)

    def _params(self, args_json: str) -> JobInsertParams:
        return JobInsertParams(
            self.kind,
            self.queue,
            args_json,
            self.max_attempts,
            None,
            None,
            self.priority,
            (),
            self.meta,
        )

    @overload
    def __getitem__(self, index: int) -> JobInsertParams: ...
    @overload
    def __getitem__(self, index: slice) -> list[JobInsertParams]: ...
    def __getitem__(self, index: int | slice) -> JobInsertParams | list[JobInsertParams]:
        if isinstance(index, slice):
            return [self._params(text) for text in self.args_json[index]]
        return self._params(self.args_json[index])


class EncodedBatch(NamedTuple):
    """An ``insert_many`` batch, encoded, with what the writer needs to choose its path."""

    params: Sequence[JobInsertParams]
    queues: set[str]
    """Every queue an item goes to."""
    unique: bool
    """Some item has a unique key."""
    timed: bool
    """Some item has a time."""
    decorated: bool = False
    """Some item has tags or metadata."""
    identities: dict[int, Identity] | None = None
    """The unique identity of each item that has one, by position (ADR 0031)."""
    shared_meta: str | None = None
    """Every item's metadata when they all carry the same and no tags (a traced batch,
    ADR 0042): the direct COPY writes it once per row instead of taking the staging table."""


class Outcome(NamedTuple):
    """A state change for one claimed job, fenced on the claim's ``(id, attempt)``."""

    id: int
    attempt: int
    state: JobState
    scheduled_at: datetime | None = None
    """Wake time for ``retryable``/``scheduled``; ``None`` means now (database clock)."""
    error: dict[str, Any] | None = None
    """Entry appended to ``errors``, or nothing."""
    refund_attempt: bool = False
    """Return the claim's attempt to the job (a snooze does not spend one)."""
    settles_tx: bool = False
    """The handler called ``complete_tx``: a refusal because that completion
    committed is the expected case, not a stale write."""
    result: str | None = None
    """The handler's result as JSON text, stored by a completion (ADR 0028)."""


class WriteResult(enum.Enum):
    """What happened to one fenced write."""

    APPLIED = "applied"
    NOT_FOUND = "not found"
    NOT_RUNNING = "not running"
    LEASE_LOST = "lease lost"


class Recorded(NamedTuple):
    """The result of one outcome write, with the row's state when it was refused."""

    outcome: Outcome
    result: WriteResult
    current_state: str | None
    current_attempt: int | None
    cancelled: bool = False
    """Applied, but the job ended ``cancelled``: an operator asked to cancel it while it
    ran (ADR 0030)."""


@dataclass(frozen=True, slots=True)
class Renewal:
    """What one heartbeat learned about one held claim."""

    id: int
    leased_until: datetime | None
    """The new expiry, or ``None`` when not renewed this time."""
    current: bool
    """False once the claim moved on: this client has lost the job."""


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Depth by state and oldest-claimable age per queue, read on the database clock."""

    depth: dict[tuple[str, str], int]
    """``{(queue, state): rows}`` for available, scheduled, retryable, running and dead."""
    oldest_age: dict[str, float]
    """``{queue: seconds}`` for queues with a job claimable now."""


@dataclass(frozen=True, slots=True)
class Migration:
    """One numbered schema migration file shipped with drover."""

    version: int
    name: str
    sql: str

    @property
    def label(self) -> str:
        """``0001_create_jobs``: how logs and errors name the migration."""
        return f"{self.version:04d}_{self.name}"


@dataclass(frozen=True, slots=True)
class AppliedMigration:
    """A migration recorded in ``drover_schema_version``."""

    version: int
    name: str
    applied_at: datetime


@dataclass(frozen=True, slots=True)
class MigrationStatus:
    """Which migrations a database has, and which it still needs."""

    applied: tuple[AppliedMigration, ...]
    pending: tuple[Migration, ...]

    @property
    def current_version(self) -> int:
        """The highest applied version (0 on a database drover never touched)."""
        return max((m.version for m in self.applied), default=0)

    @property
    def up_to_date(self) -> bool:
        """True when nothing is pending."""
        return not self.pending


@dataclass(frozen=True, slots=True)
class PeriodicInfo:
    """One periodic job as the database knows it (``drover.Inspector.periodic``).

    Written by the leader: the definition it registered (``schedule``,
    ``timezone``, ``kind``, ``queue``), the watermark (``fired_through``:
    every fire time up to it is accounted for), the latest tick
    (``last_fire``, ``last_job_id``) and the next fire it computed.
    ``leader`` is the client holding leadership now (``None`` when none
    does); ``current`` is False for an entry the current leader does not
    have in its configuration (removed, or from another deploy), which is
    therefore not firing.
    """

    id: str
    schedule: str
    timezone: str
    kind: str
    queue: str
    fired_through: datetime
    last_fire: datetime | None
    last_job_id: int | None
    next_fire: datetime | None
    defined_by: str
    leader: str | None
    current: bool


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """One live client that runs jobs, as its registry row says (`drover.Inspector.workers`).

    Every started `Client` keeps one row: a process under `drover worker
    --processes N` has its own. The row is refreshed every heartbeat interval
    and deleted when the client stops cleanly; one not refreshed for three
    intervals (a crashed or frozen process) has expired and is not listed.
    `running` is the number of jobs the client held at its last refresh, so it
    lags by up to one interval. Times are the database's.
    """

    client_id: str
    """The six hex characters in the client's `repr` and its thread names."""
    host: str
    pid: int
    version: str
    """The drover version the client runs."""
    queues: tuple[str, ...]
    """The queues it claims from."""
    concurrency: int
    running: int
    started_at: datetime
    heartbeat_at: datetime
    """Its last refresh."""
    expires_at: datetime
    """When the row stops counting as live unless refreshed again."""
    heartbeat_age_seconds: float
    """Seconds since `heartbeat_at` when it was read."""
    claims: int | None = None
    """Claims the client made in its last refresh window (one heartbeat interval);
    `None` from a client of a release before claim timing (ADR 0060)."""
    claim_p50_seconds: float | None = None
    """The median claim's seconds in that window (to a histogram bucket's top, at most
    19% high); `None` with no claim."""
    claim_p99_seconds: float | None = None
    """The 99th percentile claim's seconds in that window, as `claim_p50_seconds`."""
    claim_max_seconds: float | None = None
    """The slowest claim's seconds in that window."""
    walk_max_seconds: float | None = None
    """The slowest walk's seconds in that window (a claim reading every priority level
    from its oldest job, ADR 0059); `None` with no walk."""
    kinds: tuple[str, ...] | None = None
    """The kinds the client has workers for, sorted; `None` from a client of a release
    before the registry kept them."""

    @property
    def name(self) -> str:
        """`"<client id> (pid <pid> on <host>)"`: how a job's lease holder names this client."""
        return f"{self.client_id} (pid {self.pid} on {self.host})"


@dataclass(frozen=True, slots=True)
class KindStats:
    """One job kind's outcomes over a recent window (`drover.Inspector.kinds`).

    `completed`, `dead` and `cancelled` count jobs that ended so in the
    window; `failed` counts attempts that ran and failed in the window (each
    error recorded: a retry or a final failure, a lease that expired),
    whatever became of the job since: not cancellations (the handler's, an
    operator's, or a dependency's that kept a job from running), which
    `cancelled` counts. `p50_seconds` and `p95_seconds` are the run times of
    the window's completed jobs (their last attempt, from claim to
    completion), `None` when none has one.
    """

    kind: str
    completed: int
    failed: int
    dead: int
    p50_seconds: float | None
    p95_seconds: float | None
    cancelled: int = 0
    """Jobs that ended cancelled in the window (0 from a caller building one by hand)."""
