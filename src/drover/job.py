"""Job data: typed arguments, stored rows, insert options and the job handed to a worker."""

from __future__ import annotations

import difflib
import enum
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar, Generic, NamedTuple, Self, TypeVar, overload

from pydantic import BaseModel, ConfigDict, ValidationError

from drover._durations import Duration
from drover.context import JobContext, Lease
from drover.errors import InvalidArgument, InvalidInsertOpts, InvalidJobArgs
from drover.ledger import LedgerEntry
from drover.limits import Limit, limits_tuple
from drover.progress import MAX_PROGRESS_MESSAGE, check_progress, check_tags, encode_meta
from drover.results import DEFAULT_MAX_RESULT_BYTES, decode_result, encode_result
from drover.unique import Unique, check_forms

__all__ = [
    "DEFAULT_PRIORITY",
    "MAX_PRIORITY",
    "MIN_PRIORITY",
    "InsertItem",
    "InsertOpts",
    "Job",
    "JobArgs",
    "JobRow",
    "JobState",
    "check_job_id",
]

MAX_QUEUE_LENGTH = 128
MAX_KIND_LENGTH = 255
MAX_UNIQUE_KEY_LENGTH = 1024
MIN_PRIORITY = -100
"""The lowest priority a job can have: claimed after every other due job of its queue."""
MAX_PRIORITY = 100
"""The highest priority a job can have: claimed before every other due job of its queue."""
DEFAULT_PRIORITY = 0
"""The priority of a job whose args class and insert options name none."""
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


def _check_name(value: object, what: str, limit: int) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{what} must not be empty")
    if len(value) > limit:
        raise ValueError(f"{what} is {len(value)} characters long; the maximum is {limit}")
    if "\x00" in value:
        raise ValueError(f"{what} must not contain NUL characters")
    _check_utf8(value, what)
    return value


def _check_utf8(value: str, what: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} is not valid UTF-8 text (it holds a lone surrogate)") from None


def _check_max_attempts(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not 1 <= value <= 2**31 - 1:
        raise ValueError(f"{what} must be between 1 and 2147483647, not {value}")
    return value


def _check_priority(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not MIN_PRIORITY <= value <= MAX_PRIORITY:
        raise ValueError(
            f"{what} must be between {MIN_PRIORITY} and {MAX_PRIORITY} "
            f"(higher runs first), not {value}"
        )
    return value


def _unknown_keys(exc: ValidationError) -> list[str]:
    """The top-level keys an `extra="forbid"` model refused, in the order given."""
    return [
        str(error["loc"][0])
        for error in exc.errors()
        if error["type"] == "extra_forbidden" and len(error["loc"]) == 1
    ]


def _accepted_names(cls: type[BaseModel]) -> list[str]:
    """The keyword names a model's constructor takes: its fields, or their aliases."""
    names: list[str] = []
    for name, info in cls.model_fields.items():
        alias = info.validation_alias if isinstance(info.validation_alias, str) else info.alias
        names.append(alias or name)
        if alias and alias != name and cls.model_config.get("populate_by_name"):
            names.append(name)
    return names


class JobArgs(BaseModel):
    """Base class for a job's arguments: a frozen pydantic model with a ``kind``.

    Declare the kind, and optionally insert defaults, as class keywords:

        class SendEmail(drover.JobArgs, kind="send_email", queue="email", max_attempts=5):
            to: str
            subject: str

    ``kind`` names the job type in the database and selects the worker; it is
    checked when the class is defined (missing or empty raises
    ``drover.InvalidJobArgs``, a ``TypeError``).
    A base class meant only to be subclassed passes ``abstract=True`` instead.
    ``queue``, ``max_attempts`` and ``priority`` are defaults that
    ``InsertOpts`` can override per insert. ``priority`` is an int from -100
    to 100 (default 0): within a queue, due jobs of a higher priority are
    claimed first. A value out of range or not an int raises
    ``drover.InvalidJobArgs`` when the class is defined.

    Instances are validated when constructed and encoded to JSON on insert
    (the JSON ``model_dump_json()`` gives); a worker validates the stored JSON
    back into the class (``model_validate``) before the handler runs.

    Unknown fields: constructing an instance with a field the class does not
    have (`SendEmail(to="a", subjet="hi")`) raises `drover.InvalidJobArgs`
    naming it and the closest field, where pydantic's default would drop it
    silently. JSON given to `drover enqueue` / `Inspector.enqueue` is refused
    the same way. Stored args are decoded leniently: a key the class no longer
    has (a row written by an older producer, during a rolling deploy) is
    ignored, so removing a field never kills the jobs already queued; add
    fields only with defaults, so that older rows still validate. To accept
    and drop unknown fields at construction too, declare the class with
    `extra="ignore"` (`class SendEmail(drover.JobArgs, kind="send_email",
    extra="ignore")`); `extra="allow"` keeps them and stores them. Other
    validation errors (a missing field, a wrong type) are pydantic's
    `ValidationError`, as for any pydantic model.
    """

    # NaN and infinities are written as JSON constants, never silently as null:
    # the encoder then refuses them (jsonb has no such numbers). Unknown fields
    # are refused when constructing; model_validate (decoding) drops them.
    model_config = ConfigDict(frozen=True, ser_json_inf_nan="constants", extra="forbid")

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            unknown = _unknown_keys(exc)
            if not unknown:
                raise
            raise InvalidJobArgs(_unknown_message(type(self), unknown, exc)) from None

    # pydantic runs a model's own __init__ from model_validate too, unless it is
    # marked as the base one (RootModel marks its own the same way). Construction
    # goes through this __init__; decoding stored args (model_validate) must not.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> Self:
        """Validate stored or given data into the class, ignoring top-level keys it does not have.

        The worker decodes a claimed job's stored args with this. A key the
        class does not declare is dropped rather than refused: a row written by
        an older producer may carry a field that was removed since. Every other
        rule of the class applies (pydantic's `ValidationError` otherwise);
        an explicit `extra=` (pydantic 2.11 and later) is honoured as given.
        """
        try:
            return super().model_validate(obj, **kwargs)
        except ValidationError as exc:
            if kwargs.get("extra") is not None or not isinstance(obj, Mapping):
                raise
            unknown = set(_unknown_keys(exc))
            if not unknown:
                raise
            known = {key: value for key, value in obj.items() if key not in unknown}
            return super().model_validate(known, **kwargs)

    kind: ClassVar[str]
    default_queue: ClassVar[str | None] = None
    default_max_attempts: ClassVar[int | None] = None
    default_priority: ClassVar[int | None] = None
    declared_limits: ClassVar[tuple[Limit, ...]] = ()
    """Cluster-wide limits on this kind (class keyword `limits=`), inherited by subclasses."""

    def __init_subclass__(
        cls,
        *,
        kind: str | None = None,
        queue: str | None = None,
        max_attempts: int | None = None,
        priority: int | None = None,
        limits: Limit | Sequence[Limit] | None = None,
        abstract: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        try:
            if limits is not None:
                cls.declared_limits = limits_tuple(limits, f"{cls.__qualname__} limits")
            if kind is not None:
                cls.kind = _check_name(kind, f"{cls.__qualname__} kind", MAX_KIND_LENGTH)
            if queue is not None:
                cls.default_queue = _check_name(
                    queue, f"{cls.__qualname__} queue", MAX_QUEUE_LENGTH
                )
            if max_attempts is not None:
                cls.default_max_attempts = _check_max_attempts(
                    max_attempts, f"{cls.__qualname__} max_attempts"
                )
            if priority is not None:
                cls.default_priority = _check_priority(priority, f"{cls.__qualname__} priority")
        except (TypeError, ValueError) as exc:
            raise InvalidJobArgs(str(exc)) from None
        if abstract:
            return
        current = getattr(cls, "kind", None)
        if not isinstance(current, str) or not current.strip():
            raise InvalidJobArgs(
                f"{cls.__qualname__} needs a job kind: "
                f'class {cls.__name__}(drover.JobArgs, kind="...")'
            )

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        # Runs once pydantic has built the fields, which __init_subclass__
        # cannot see: a limit's partition field must be one of them.
        super().__pydantic_init_subclass__(**kwargs)
        _check_partition_fields(cls)


def _check_partition_fields(cls: type[JobArgs]) -> None:
    fields = set(cls.model_fields)
    for limit in cls.declared_limits:
        field = limit.partition_by
        if field is not None and field not in fields:
            close = difflib.get_close_matches(field, sorted(fields), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InvalidJobArgs(
                f"{cls.__qualname__} limits: partition_by={field!r} is not one of its fields"
                f"{hint}; its fields are {', '.join(sorted(fields)) or 'none'}"
            )


def _unknown_message(cls: type[JobArgs], unknown: list[str], exc: ValidationError) -> str:
    accepted = _accepted_names(cls)
    parts = []
    for key in unknown:
        close = difflib.get_close_matches(key, accepted, n=1)
        parts.append(f"{key!r} (did you mean {close[0]!r}?)" if close else repr(key))
    noun = "an unknown field" if len(unknown) == 1 else "unknown fields"
    message = (
        f"{cls.__qualname__} got {noun} {', '.join(parts)}; its fields are "
        f"{', '.join(accepted) or 'none'}. Unknown fields are refused so that a misspelled "
        f'one is not dropped; declare the class with extra="ignore" to drop them instead'
    )
    others = [e for e in exc.errors() if e["type"] != "extra_forbidden" or len(e["loc"]) != 1]
    if others:
        details = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or cls.__qualname__}: {e['msg']}" for e in others
        )
        message += f". Also: {details}"
    return message


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
                depends_on=self.depends_on,
            )
            object.__setattr__(self, "debounce", debounce)
            object.__setattr__(self, "throttle", throttle)


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


ArgsT = TypeVar("ArgsT", bound=JobArgs, covariant=True)
T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class Job(Generic[ArgsT]):
    """What a worker receives: the claimed row's identity and its decoded, typed args.

    ``attempt`` counts executions including this one (1 on the first run).
    ``context`` carries cancellation (shutdown escalation, timeouts), the
    deadline if any, and values set by middleware.
    """

    id: int
    kind: str
    queue: str
    attempt: int
    max_attempts: int
    created_at: datetime
    args: ArgsT
    context: JobContext = field(default_factory=JobContext, compare=False)

    @property
    def lease(self) -> Lease:
        """The execution's fence: ``attempt``, ``leased_until`` and the ``lost`` event."""
        return self.context.lease

    @property
    def lease_lost(self) -> threading.Event:
        """Set when this worker learns it no longer holds the job (see ``drover.Lease``).

        A long handler checks it between steps and stops early: its outcome
        would be refused, and another execution may already be running.
        """
        return self.context.lease.lost

    @overload
    def parent_results(self, as_type: None = None) -> list[Any]: ...
    @overload
    def parent_results(self, as_type: type[T]) -> list[T]: ...
    def parent_results(self, as_type: type[T] | None = None) -> list[Any]:
        """The results of the jobs this one waited for, in the order they were listed.

        For a chained step, the previous step's result (a list of one); for a
        chord's callback, every member's result in member order; for
        ``InsertOpts.depends_on``, in id order. ``None`` for a job that
        returned nothing. With ``as_type`` each is validated as that type
        (``drover.InvalidResult`` when one does not). Read from the database
        on each call (one query); dependencies retention has deleted are
        missing from the list.

        Raises ``drover.InvalidArgument`` for a job not claimed by a worker.
        """
        read = self.context._read_parents
        if read is None:
            raise InvalidArgument(
                "parent_results needs a job claimed by a drover worker; this Job was built by hand"
            )
        return [decode_result(value, as_type, self.id) for _, _, value in read(self.id)]

    def set_progress(self, fraction: float, message: str | None = None) -> None:
        """Report how far the handler has got: ``fraction`` from 0 to 1, and a short message.

        Cheap enough for a tight loop: the call stores the latest values and
        returns, taking no lock and making no round trip. The client's progress
        writer writes every running job's latest report in one statement about
        twice a second (only jobs whose report changed), and the last report
        is written just before the job's outcome, so it is never lost to the
        throttling. The writes are fenced on this execution ``(id, attempt,
        state = 'running')``: once the lease is lost, the reports of this
        execution are refused by the database and the row keeps what the
        current execution says. Visible as ``JobRow.progress`` and
        ``progress_message`` (``Inspector.get_job``, ``drover jobs get``, the
        job's page). A report from a retried attempt replaces the earlier
        attempt's.

        Raises ``drover.InvalidArgument`` for a fraction that is not a number
        from 0 to 1 or a message that is not a string of at most 1,000
        characters. On a hand-built ``Job`` the values are kept and never
        written.
        """
        if (
            fraction.__class__ is not float
            or not 0.0 <= fraction <= 1.0
            or (
                message is not None
                and (
                    message.__class__ is not str
                    or len(message) > MAX_PROGRESS_MESSAGE
                    or "\x00" in message
                )
            )
        ):
            try:
                fraction = check_progress(fraction, message)
            except (TypeError, ValueError) as exc:
                raise InvalidArgument(str(exc)) from None
        context = self.context
        slot = context._progress
        if slot is None:
            slot = context._progress_slot()
        slot.latest = (fraction, message)

    def update_meta(self, values: Mapping[str, Any]) -> None:
        """Merge ``values`` into the job's metadata (top-level keys replace, as jsonb ``||``).

        Written like progress: by the client's progress writer within about
        half a second, and before the job's outcome at the latest, fenced on
        this execution. The whole metadata must stay JSON of at most 64 KiB.

        Raises ``drover.InvalidArgument`` (and merges nothing) for a value
        that is not a dict with string keys of JSON values, or that would take
        the metadata past its size limit.
        """
        try:
            self.context._progress_slot().merge(values)
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(str(exc)) from None

    def complete_tx(self, conn: object, *, result: object = None) -> None:
        """Complete this job inside the caller's transaction, fenced on this execution.

        ``conn`` is what ``Client.insert_tx`` accepts: a psycopg connection or
        cursor inside a transaction, a Django connection or cursor inside
        ``transaction.atomic()``, a SQLAlchemy ``Connection`` or ``Session``.
        The handler's own writes and the job's completion then commit or roll
        back together: if the transaction commits, the job is ``completed``
        and its effects are there; if it rolls back, neither is, and the job
        is retried like a failed attempt (error "drover: complete_tx was called
        but its transaction did not commit"). The engine writes no completion
        of its own for the job.

        The update is fenced on ``(id, attempt, state = 'running')``. If this
        execution no longer holds the job (its lease lapsed and it was
        rescued, perhaps re-claimed or cancelled since; shutdown handed it
        back), ``drover.LeaseLost`` is raised and nothing of drover's is
        written: let it escape the transaction block so the handler's writes
        roll back too. That is what makes a handler whose side effects live in
        the same database effectively-once (ADR 0002).

        The completion holds a row lock until the transaction ends: commit
        before the handler returns (an open transaction at return is reported
        and the job left to the rescuer). Call it at most once per execution;
        after a commit, raising from the handler changes nothing.

        ``result`` is stored as the job's result with the completion (what
        the handler returns afterwards is not: the job is already complete).

        Raises ``drover.InvalidArgument`` for a job not claimed by a
        worker, ``drover.NotInTransaction`` for an autocommit connection,
        ``drover.UnsupportedConnection`` for anything else it cannot use and
        ``drover.InvalidResult`` for a result it cannot store; each before
        anything is written.
        """
        complete = self.context._complete_tx
        if complete is None:
            raise InvalidArgument(
                "complete_tx needs a job claimed by a drover worker; this Job was built by hand"
            )
        slot = self.context._result_slot
        text = encode_result(
            result, kind=self.kind, max_bytes=slot.max_bytes or DEFAULT_MAX_RESULT_BYTES
        )
        complete(conn, text)
        slot.in_tx = True
