"""Job data: states, stored rows and insert options; the public home of every job type.

``JobArgs`` (and the name and value checks it shares with ``InsertOpts``)
lives in ``drover._job_args`` and ``Job`` (what a worker receives) in
``drover._job_exec``; both are re-exported here, so ``drover.job`` stays the
one path to import job types from.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple, TypedDict

from drover._durations import MAX_DURATION, Duration, to_seconds
from drover._hints import did_you_mean
from drover._job_args import (
    DEFAULT_PRIORITY,
    MAX_PRIORITY,
    MIN_PRIORITY,
    JobArgs,
    _check_max_attempts,
    _check_priority,
    _check_utf8,
)
from drover._job_args import MAX_KIND_LENGTH as MAX_KIND_LENGTH
from drover._job_args import MAX_QUEUE_LENGTH as MAX_QUEUE_LENGTH
from drover._job_args import _check_name as _check_name
from drover._job_exec import Job
from drover.cancel_request import CancelRequested
from drover.errors import ConfigError, InvalidArgument, InvalidInsertOpts
from drover.ledger import LedgerEntry
from drover.progress import check_tags, encode_meta
from drover.unique import Unique, check_forms

__all__ = [
    "DEFAULT_PRIORITY",
    "MAX_PRIORITY",
    "MIN_PRIORITY",
    "InsertItem",
    "InsertOptions",
    "InsertOpts",
    "Job",
    "JobArgs",
    "JobRow",
    "JobState",
    "check_job_id",
]

MAX_UNIQUE_KEY_LENGTH = 1024
_EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
_LATEST = datetime(9999, 12, 31, tzinfo=UTC)


class JobState(enum.StrEnum):
    """Where a job is in its life. The order matches the ``drover_job_state`` enum.

    ``pending`` waits for the jobs it depends on to complete
    (``InsertOpts.depends_on``, workflows); ``available``, ``scheduled`` and
    ``retryable`` wait to be claimed (once ``scheduled_at`` is due);
    ``running`` holds a lease; ``completed``, ``cancelled`` and ``dead`` are
    terminal (``dead`` is the dead-letter state an operator can retry).
    """

    PENDING = "pending"
    AVAILABLE = "available"
    SCHEDULED = "scheduled"
    RUNNING = "running"
    RETRYABLE = "retryable"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    DEAD = "dead"


# The state sets, defined once. The SQL in sql/queries names them as
# {{states:<name>}} and drover._db.queries expands them from here when the
# files are loaded; the partial indexes in sql/migrations spell them out, and
# tests/db/test_states.py checks both against these tuples. Adding a state
# means changing these tuples plus a migration.
WAITING_STATES = (JobState.AVAILABLE, JobState.SCHEDULED, JobState.RETRYABLE)
"""Claimable once ``scheduled_at`` is due; what the fetch index covers."""
ACTIVE_STATES = (JobState.PENDING, *WAITING_STATES, JobState.RUNNING)
"""Pending, waiting or running: the states in which a unique key is held."""
TERMINAL_STATES = (JobState.COMPLETED, JobState.CANCELLED, JobState.DEAD)
"""Finished: ``finalized_at`` is set, retention may delete the row."""
PUBLISHED_STATES = (JobState.PENDING, *WAITING_STATES, JobState.RUNNING, JobState.DEAD)
"""Counted by the depth gauges and ``Inspector.stats`` (completed and cancelled
rows pile up by design and are not)."""
CANCELLABLE_STATES = (JobState.PENDING, *WAITING_STATES, JobState.DEAD)
"""An operator may cancel these; a running job belongs to its worker."""
RETRIABLE_STATES = (JobState.CANCELLED, JobState.DEAD)
"""An operator may send these back to the queue with fresh attempts."""
UNSUCCESSFUL_STATES = (JobState.CANCELLED, JobState.DEAD)
"""Ended without completing: a job's pending dependents are cancelled when it ends so."""

STATE_SETS: dict[str, tuple[JobState, ...]] = {
    "waiting": WAITING_STATES,
    "active": ACTIVE_STATES,
    "terminal": TERMINAL_STATES,
    "published": PUBLISHED_STATES,
    "cancellable": CANCELLABLE_STATES,
    "retriable": RETRIABLE_STATES,
    "unsuccessful": UNSUCCESSFUL_STATES,
}
"""Every named set, by the name SQL uses for it."""


class _NoMeta(dict[str, Any]):
    """The empty metadata every row without any shares: a dict that refuses changes."""

    __slots__ = ()

    def _refuse(self, *args: object, **kwargs: object) -> Any:
        raise TypeError("a JobRow's metadata is read-only")

    __setitem__ = __delitem__ = update = setdefault = pop = popitem = clear = _refuse
    __ior__ = _refuse

    def __reduce__(self) -> str:
        return "NO_META"


_NO_META: Mapping[str, Any] = _NoMeta()


class JobRow(NamedTuple):
    """One row of ``drover_jobs`` as stored, with ``args`` still raw JSON (decoded to Python).

    Timestamps are timezone-aware. ``errors`` is a tuple with one entry per
    failed attempt, oldest first: ``{"attempt", "at", "error", "trace"}``
    (empty for a job that has not failed).

    A named tuple: immutable, compared field by field, and cheap to build (a
    claim or a bulk insert builds one per job; see ADR 0009). Read fields by
    name; ``row._replace(...)`` and ``row._asdict()`` are the tuple's own
    helpers. A row is a snapshot: it does not change when the job does.
    """

    # The database layer builds rows by position (drover._db.rows.JOB_COLUMNS
    # declares the same order and checks it against these fields).
    id: int
    kind: str
    queue: str
    args: Any
    state: JobState
    attempt: int
    max_attempts: int
    errors: tuple[dict[str, Any], ...]
    scheduled_at: datetime
    leased_until: datetime | None
    created_at: datetime
    finalized_at: datetime | None
    unique_key: str | None
    priority: int = DEFAULT_PRIORITY
    """From -100 to 100; within a queue, due jobs of a higher priority are claimed first."""
    progress: float | None = None
    """What the handler last reported with ``Job.set_progress`` (0 to 1), or ``None``."""
    progress_message: str | None = None
    """The message reported with that progress, if any."""
    meta: Mapping[str, Any] = _NO_META
    """The job's metadata: a dict given at insert (``InsertOpts.meta``), merged into by
    ``Job.update_meta``."""
    tags: tuple[str, ...] = ()
    """Labels given at insert (``InsertOpts.tags``), to filter jobs by."""

    @property
    def duplicate(self) -> bool:
        """True when an insert with ``unique``, ``debounce`` or ``throttle`` found the job
        already there and returned it instead of inserting a new one (see "Uniqueness")."""
        return False

    @property
    def ledger(self) -> tuple[LedgerEntry, ...]:
        """The job's duplicate ledger, oldest first (``drover.ledger``, ADR 0037).

        Read by ``Inspector.get_job`` and ``Client.get_job`` only: every
        re-run of an attempt (a rescue, a hand-back) and every stale write the
        fence refused, on the database clock. Empty for a job that ran once,
        and on the rows claims, inserts and listings return (they do not read
        it).
        """
        return ()

    @property
    def cancel_request(self) -> CancelRequested | None:
        """An operator's request to cancel this job while it ran (ADR 0030), or ``None``.

        Read by ``Inspector.get_job`` and ``Client.get_job`` only (``None``
        on the rows claims, inserts and listings return). While the job is
        ``running`` it means a cancel is on its way to the worker; after the
        attempt it says why it ended ``cancelled``. A redrive clears it.
        """
        return None


NO_META = _NO_META
"""``JobRow.meta`` of a job without metadata: an empty, read-only mapping shared by every row."""


@dataclass(frozen=True, slots=True, kw_only=True)
class InsertOpts:
    """Per-insert options. Every field is optional.

    - ``queue``: the queue to insert into. ``None`` means the args class's
      ``queue=`` default, else ``"default"``. A queue no client works is not an
      error; the job waits.
    - ``scheduled_at``: a timezone-aware time before which the job is not run.
      The database clock decides: a time in the future stores the job
      ``scheduled``; ``None`` or a time in the past means now (``available``).
    - ``delay``: run the job no sooner than this long after the insert (a
      ``timedelta`` or seconds, zero or more, up to ten years): the due time
      is this process's clock at the insert plus the delay, as if
      ``scheduled_at=datetime.now(UTC) + delay`` were given then (an
      ``InsertOpts`` kept and reused counts from each insert). Not with
      ``scheduled_at``.
    - ``unique_key``: at most one non-terminal job (waiting or running) may hold a
      given ``(queue, kind, unique_key)``; a second insert raises
      ``drover.DuplicateJob``. Empty means not unique.
    - ``max_attempts``: executions allowed before the job is dead. ``None``
      means the args class's default, else 25.
    - ``priority``: an int from -100 to 100, higher first. Within a queue
      the claim takes the due job of the highest priority, then the earliest
      due time, then the lowest id. ``None`` means the args class's
      ``priority=`` default, else 0. A priority orders the claim only: it
      does not pre-empt a running job, and a queue's workers still run jobs
      of every priority.

    - ``depends_on``: jobs (rows or ids) that must complete before this
      one may run. Until then the job is ``pending``; the completion of the
      last one makes it ``available`` (or ``scheduled``, if
      ``scheduled_at`` is later), in the same transaction. If one ends
      ``dead`` or ``cancelled``, this job is cancelled, with an error naming
      it. A job that does not exist, or that already ended dead or
      cancelled, is an error at insert; one already completed counts as
      done. At most 10,000 ids; stored sorted, without repeats.
    - ``tags``: labels to find the job by (``Inspector.list_jobs(tags=...)``,
      ``drover jobs list --tag``, the status page). Each a string of 1 to 64
      characters without commas or control characters; at most 20; repeats
      are dropped.
    - ``meta``: a dict of JSON values stored with the job (at most 64 KiB as
      JSON); the handler can merge more into it with ``Job.update_meta``.
    - ``unique``: a ``drover.Unique`` identity (by args, named fields, queue,
      key, period, states). An insert whose identity is held returns the
      holding job with ``row.duplicate`` True and writes nothing; the unique
      index decides races between concurrent inserts, so exactly one wins.
    - ``debounce``: a window (``timedelta`` or seconds). Inserting again while
      the job waits replaces its args, tags and metadata (last wins) and moves
      its due time to one window after that insert; a job already running
      hands the identity on, so the next insert makes a new job.
    - ``throttle``: a window. The first job is kept and later inserts within
      the window from its insert return it flagged.

    Invalid values raise ``drover.InvalidInsertOpts`` at construction.
    """

    queue: str | None = None
    scheduled_at: datetime | None = None
    delay: Duration | None = None
    unique_key: str | None = None
    max_attempts: int | None = None
    priority: int | None = None
    depends_on: Sequence[int | JobRow] = ()
    tags: Sequence[str] = ()
    meta: Mapping[str, Any] | None = None
    unique: Unique | None = None
    debounce: Duration | None = None
    throttle: Duration | None = None

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "depends_on", _dependency_ids(self.depends_on))
            object.__setattr__(self, "tags", check_tags(self.tags, "InsertOpts.tags"))
            if self.meta is not None:
                encode_meta(self.meta, "InsertOpts.meta")
            if self.queue is not None:
                _check_name(self.queue, "InsertOpts.queue", MAX_QUEUE_LENGTH)
            if self.scheduled_at is not None:
                if not isinstance(self.scheduled_at, datetime):
                    raise TypeError(
                        "InsertOpts.scheduled_at must be a datetime, "
                        f"not {type(self.scheduled_at).__name__}"
                    )
                if self.scheduled_at.utcoffset() is None:
                    raise ValueError(
                        "InsertOpts.scheduled_at must be timezone-aware "
                        "(e.g. datetime.now(timezone.utc)); a naive time is ambiguous"
                    )
                try:
                    in_utc = self.scheduled_at.astimezone(UTC)
                except OverflowError:
                    in_utc = None
                if in_utc is None or not _EARLIEST <= in_utc < _LATEST:
                    # A day of margin each side: the value is read back in the
                    # session's time zone, which may be up to 14 hours away.
                    raise ValueError(
                        f"InsertOpts.scheduled_at {self.scheduled_at.isoformat()} is outside "
                        "the range drover can store (0001-01-02 to 9999-12-30, UTC)"
                    )
            if self.unique_key is not None:
                if not isinstance(self.unique_key, str):
                    raise TypeError(
                        f"InsertOpts.unique_key must be a str, not {type(self.unique_key).__name__}"
                    )
                if len(self.unique_key) > MAX_UNIQUE_KEY_LENGTH:
                    raise ValueError(
                        f"InsertOpts.unique_key is {len(self.unique_key)} characters long; "
                        f"the maximum is {MAX_UNIQUE_KEY_LENGTH}"
                    )
                if "\x00" in self.unique_key:
                    raise ValueError("InsertOpts.unique_key must not contain NUL characters")
                _check_utf8(self.unique_key, "InsertOpts.unique_key")
            if self.delay is not None:
                object.__setattr__(self, "delay", _delay(self.delay, self.scheduled_at))
            if self.max_attempts is not None:
                _check_max_attempts(self.max_attempts, "InsertOpts.max_attempts")
            if self.priority is not None:
                _check_priority(self.priority, "InsertOpts.priority")
        except (TypeError, ValueError) as exc:
            raise InvalidInsertOpts(str(exc)) from None
        if self.unique is not None or self.debounce is not None or self.throttle is not None:
            debounce, throttle = check_forms(
                unique=self.unique,
                debounce=self.debounce,
                throttle=self.throttle,
                unique_key=self.unique_key,
                scheduled_at=self.scheduled_at,
                delay=self.delay,
                depends_on=self.depends_on,
            )
            object.__setattr__(self, "debounce", debounce)
            object.__setattr__(self, "throttle", throttle)


def _delay(value: object, scheduled_at: datetime | None) -> timedelta:
    """``InsertOpts.delay`` as a ``timedelta``; ``ValueError``/``TypeError`` naming the problem."""
    try:
        seconds = to_seconds(value, "InsertOpts.delay")  # type: ignore[arg-type]
    except ConfigError as exc:
        raise TypeError(str(exc)) from None
    if seconds < 0:
        raise ValueError(f"InsertOpts.delay must be zero or more, not {seconds:g} seconds")
    delay = value if isinstance(value, timedelta) else timedelta(seconds=seconds)
    if delay > MAX_DURATION:
        raise ValueError("InsertOpts.delay must be at most ten years; give scheduled_at instead")
    if scheduled_at is not None:
        raise ValueError(
            "InsertOpts takes scheduled_at or delay, not both: delay=D means "
            "scheduled_at=datetime.now(UTC) + D at the insert"
        )
    return delay


class InsertOptions(TypedDict, total=False):
    """The keyword options of ``insert`` and ``insert_tx`` (``Client``, ``AsyncClient``).

    Each is the ``InsertOpts`` field of the same name, with the same rules:
    ``client.insert(args, priority=5, delay=300)`` is
    ``client.insert(args, InsertOpts(priority=5, delay=300))``. Given with
    an ``InsertOpts``, the keywords replace its fields of the same name.
    """

    queue: str
    scheduled_at: datetime
    delay: Duration
    unique_key: str
    max_attempts: int
    priority: int
    depends_on: Sequence[int | JobRow]
    tags: Sequence[str]
    meta: Mapping[str, Any]
    unique: Unique
    debounce: Duration
    throttle: Duration


_OPTION_NAMES = tuple(f.name for f in fields(InsertOpts))


def with_options(opts: InsertOpts | None, options: Mapping[str, Any]) -> InsertOpts | None:
    """``opts`` with the keyword ``options`` of an insert applied (``opts`` itself without).

    Raises ``InvalidInsertOpts`` naming an unknown option (with the closest
    known one) or a bad value, before anything is written.
    """
    if not options:
        return opts
    unknown = [name for name in options if name not in _OPTION_NAMES]
    if unknown:
        named = ", ".join(f"{name!r}{did_you_mean(name, _OPTION_NAMES)}" for name in unknown)
        raise InvalidInsertOpts(
            f"unknown insert option {named}; the options are {', '.join(_OPTION_NAMES)}"
        )
    if opts is None:
        return InsertOpts(**options)
    if not isinstance(opts, InsertOpts):
        raise InvalidInsertOpts(
            f"insert options must be a drover.InsertOpts, not {type(opts).__qualname__}"
        )
    given = dict(options)
    if opts.delay is not None and "scheduled_at" in given and "delay" not in given:
        given["delay"] = None  # a time given now replaces the kept delay
    if opts.scheduled_at is not None and "delay" in given and "scheduled_at" not in given:
        given["scheduled_at"] = None
    return replace(opts, **given)


MAX_DEPENDENCIES = 10_000
"""The most jobs one job may depend on (``InsertOpts.depends_on``)."""


def _dependency_ids(value: object) -> tuple[int, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence | set | frozenset):
        raise TypeError(
            "InsertOpts.depends_on must be a list of jobs (rows or ids), "
            f"not {type(value).__name__}"
        )
    ids: set[int] = set()
    for item in value:
        job_id = item.id if isinstance(item, JobRow) else item
        if isinstance(job_id, bool) or not isinstance(job_id, int):
            raise TypeError(
                "InsertOpts.depends_on holds drover.JobRow rows or job ids, "
                f"not {type(item).__name__}"
            )
        if not 1 <= job_id <= MAX_JOB_ID:
            raise ValueError(f"InsertOpts.depends_on: {job_id} is not a job id")
        ids.add(job_id)
    if len(ids) > MAX_DEPENDENCIES:
        raise ValueError(
            f"InsertOpts.depends_on names {len(ids)} jobs; the most is {MAX_DEPENDENCIES}"
        )
    return tuple(sorted(ids))


InsertItem = JobArgs | tuple[JobArgs, InsertOpts | None]
"""An element of ``insert_many``: args alone, or ``(args, opts)``."""

MAX_JOB_ID = 2**63 - 1


def check_job_id(job_id: object) -> int:
    """``job_id`` if it can name a job (an int in 1..2**63-1), else ``InvalidArgument``."""
    if isinstance(job_id, bool) or not isinstance(job_id, int):
        raise InvalidArgument(f"job id must be an int, not {type(job_id).__name__}")
    if not 1 <= job_id <= MAX_JOB_ID:
        raise InvalidArgument(f"job id must be between 1 and {MAX_JOB_ID}, not {job_id}")
    return job_id
