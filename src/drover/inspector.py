"""The Inspector: read and steer jobs from operator tools, without running any."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Self

import pydantic
from psycopg_pool import ConnectionPool

from drover._db.namespace import namespace_for
from drover._db.store import Store
from drover._durations import Duration, to_seconds
from drover._insert.encode import DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE, encode_insert
from drover._jobs_and_queues import JobsAndQueues
from drover._records import JobInsertParams, KindStats, PeriodicInfo, WorkerInfo
from drover.errors import InvalidArgument, InvalidInsertOpts, InvalidJobArgs, NotFound
from drover.health import HealthReport, HealthThresholds, diagnose
from drover.job import (
    DEFAULT_PRIORITY,
    MAX_KIND_LENGTH,
    PUBLISHED_STATES,
    InsertOpts,
    JobArgs,
    JobRow,
    JobState,
    _check_name,
    check_job_id,
)
from drover.limits import LimitKey, LimitState, Period, check_override, parse_limit_key
from drover.progress import check_tags, encode_meta
from drover.queues import QueueSummary, check_queue_name
from drover.unique import UniqueIdentity
from drover.worker import Workers
from drover.workflows import Workflow

__all__ = [
    "Inspector",
    "KindStats",
    "QueueAge",
    "QueueDepth",
    "Stats",
    "Throughput",
    "WorkerInfo",
]

MAX_LIST_LIMIT = 1000
MAX_BULK_IDS = 1000
MAX_ENQUEUE_ARGS_BYTES = 1 << 20
MAX_CANCEL_REASON = 1000
"""A cancel's reason travels in a notification, whose payload PostgreSQL caps at 8000 bytes."""
DEFAULT_CANCEL_GRACE = timedelta(seconds=10)


@dataclass(frozen=True, slots=True)
class QueueDepth:
    """Jobs of one queue in one state."""

    queue: str
    state: str
    count: int


@dataclass(frozen=True, slots=True)
class QueueAge:
    """Age in seconds of a queue's oldest job claimable now (database clock)."""

    queue: str
    age_seconds: float


@dataclass(frozen=True, slots=True)
class Throughput:
    """One minute of ``Inspector.throughput`` (``minute`` is its start, UTC)."""

    minute: datetime
    completed: int
    failed: int
    dead: int


@dataclass(frozen=True, slots=True)
class Stats:
    """A snapshot of the backlog: the same numbers the metrics publish.

    ``depths`` lists only non-zero (queue, state) pairs among available,
    scheduled, retryable, running and dead, sorted; ``oldest`` only queues
    with a job claimable now; ``paused`` the queues operators paused.
    """

    depths: list[QueueDepth]
    oldest: list[QueueAge]
    paused: list[str]


def _refuse_constant(name: str) -> None:
    # Python's json accepts NaN and Infinity; JSON (and jsonb) does not.
    raise ValueError(f"{name} is not valid JSON")


def _validated(args_type: type[JobArgs], kind: str, args_json: str) -> JobArgs:
    try:
        return args_type.model_validate_json(args_json)
    except pydantic.ValidationError as exc:
        raise InvalidJobArgs(
            f"args for kind {kind!r} do not validate as {args_type.__qualname__}: {exc}"
        ) from None


def _containment_json(value: object) -> str:
    """``value`` (a JSON object as a mapping) as canonical JSON text, or `InvalidArgument`."""
    if not isinstance(value, Mapping):
        raise InvalidArgument(
            f"args_contain must be a JSON object (a dict), not {type(value).__name__}"
        )
    try:
        text = json.dumps(dict(value), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"args_contain must be JSON-serialisable: {exc}") from None
    except RecursionError:
        raise InvalidArgument("args_contain is nested too deeply") from None
    if "\x00" in text or "\\u0000" in text:
        raise InvalidArgument("args_contain must not contain NUL characters")
    return text


def _bulk_ids(ids: object) -> list[int]:
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
        raise InvalidArgument(f"ids must be an iterable of job ids, not {type(ids).__name__}")
    checked = sorted({check_job_id(i) for i in ids})
    if len(checked) > MAX_BULK_IDS:
        raise InvalidArgument(f"at most {MAX_BULK_IDS} job ids at once, not {len(checked)}")
    return checked


class Inspector(JobsAndQueues):
    """Operator access to jobs, queues and periodic jobs, without running any.

    No worker pool and no start/stop. ``pool_or_conninfo`` is a
    ``psycopg_pool.ConnectionPool`` (borrowed, never closed) or a conninfo
    string (a small pool is opened and closed by ``close`` / ``with``).
    ``workers``, when given, is the registry of the application's job kinds:
    ``enqueue`` then validates args of a known kind against its class
    and applies the class's defaults. ``schema`` is the PostgreSQL schema of
    the installation to inspect (``Config.schema``; ``None`` is the default).
    Thread-safe. Operator writes are conditioned on the job's state, so they
    are safe against a worker finishing the same job at the same moment: one
    of the two wins and the other is refused.
    """

    def __init__(
        self,
        pool_or_conninfo: ConnectionPool[Any] | str,
        *,
        workers: Workers | None = None,
        schema: str | None = None,
    ) -> None:
        if workers is not None and not isinstance(workers, Workers):
            raise InvalidArgument(
                f"Inspector workers must be a drover.Workers, not {type(workers).__name__}"
            )
        ns = namespace_for(schema, "Inspector schema")
        self._workers = workers
        self._store = Store.open(pool_or_conninfo, who="Inspector", max_size=2, ns=ns)

    def stats(self) -> Stats:
        """Depth per queue and state, oldest claimable age per queue, paused queues."""
        snapshot, states = self._store.queue_overview("stats")
        paused = [q.name for q in states if q.paused]
        return Stats(
            depths=[
                QueueDepth(q, s, n)
                for (q, s), n in sorted(
                    snapshot.depth.items(),
                    key=lambda i: (i[0][0], PUBLISHED_STATES.index(JobState(i[0][1]))),
                )
                if n
            ],
            oldest=[QueueAge(q, a) for q, a in sorted(snapshot.oldest_age.items())],
            paused=paused,
        )

    def queues(self) -> list[QueueSummary]:
        """Every queue with a waiting, running or dead job or a pause record, by name.

        Each carries whether it is paused (and since when), its count in each
        published state and the age of its oldest job claimable now. Read in
        one connection; like ``stats``, the counts are served by partial
        indexes and never scan finished jobs.
        """
        snapshot, states = self._store.queue_overview("list queues")
        pauses = {q.name: q for q in states}
        names = sorted({q for q, _ in snapshot.depth} | set(snapshot.oldest_age) | set(pauses))
        return [
            QueueSummary(
                name=name,
                paused_at=pauses[name].paused_at if name in pauses else None,
                counts={s.value: snapshot.depth.get((name, s.value), 0) for s in PUBLISHED_STATES},
                oldest_age_seconds=snapshot.oldest_age.get(name),
            )
            for name in names
        ]

    def unique_identity(self, job_id: int) -> UniqueIdentity | None:
        """The unique identity a job was inserted with (``InsertOpts.unique``,
        ``debounce``, ``throttle``), or ``None`` if it has none (see "Uniqueness").

        Raises:
            drover.NotFound: no job has that id.
            drover.InvalidArgument: ``job_id`` is not an int in 1..2**63-1.
            drover.DatabaseError: the database refused or could not be reached.
        """
        checked = check_job_id(job_id)
        found = self._store.unique_identity(checked)
        if found is False:
            raise NotFound(f"job {checked} does not exist")
        assert found is not True
        return found

    def periodic(self) -> list[PeriodicInfo]:
        """Every periodic job a leader has registered, by id, with who leads now.

        Each entry carries its schedule and zone, its next and last fire
        times, the job its last tick inserted, and the leader (``None`` while
        no client holds the lock). ``current`` is False for an entry the
        current leader does not have, which is therefore not firing.
        """
        return self._store.periodic_list()

    def list_jobs(
        self,
        queue: str | None = None,
        state: JobState | str | None = None,
        limit: int = 100,
        *,
        kind: str | None = None,
        before_id: int | None = None,
        args_contain: Mapping[str, Any] | None = None,
        tags: Sequence[str] | None = None,
    ) -> list[JobRow]:
        """Jobs newest first, optionally of one queue, state and kind; at most ``limit`` (≤ 1000).

        ``before_id`` pages: only jobs with a smaller id are listed, so passing
        the last id of one page gives the next (stable while jobs are added).
        ``args_contain`` keeps jobs whose args contain that JSON object
        (PostgreSQL's ``@>``: each of its keys present with an equal value,
        nested objects compared the same way): ``{"to": "ada@example.com"}``
        finds every job sent to Ada. No index serves it; the scan stops once
        ``limit`` jobs matched. ``tags`` keeps jobs that carry every one of
        them (``InsertOpts.tags``; a GIN index serves it).

        Raises:
            ValueError: an unknown state (``drover.InvalidInsertOpts`` for a bad
                queue name), a limit outside 1..1000, a bad kind or ``before_id``,
                an ``args_contain`` that is not a JSON object.
        """
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise InvalidArgument(f"limit must be an int, not {type(limit).__name__}")
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise InvalidArgument(f"limit must be between 1 and {MAX_LIST_LIMIT}, not {limit}")
        parsed_state: JobState | None = None
        if state is not None:
            try:
                parsed_state = JobState(state)
            except ValueError:
                known = ", ".join(s.value for s in JobState)
                raise InvalidArgument(f"unknown job state {state!r}; use one of: {known}") from None
        if queue is not None:
            InsertOpts(queue=queue)  # same rules as everywhere a queue is named
        if kind is not None:
            try:
                _check_name(kind, "kind", MAX_KIND_LENGTH)
            except (TypeError, ValueError) as exc:
                raise InvalidArgument(str(exc)) from None
        before = None if before_id is None else check_job_id(before_id)
        args_json = None if args_contain is None else _containment_json(args_contain)
        wanted = None if tags is None else _tag_filter(tags)
        return self._store.list_jobs(
            queue=queue,
            state=parsed_state,
            limit=limit,
            kind=kind,
            before_id=before,
            args_json=args_json,
            tags=wanted,
        )

    def workers(self) -> list[WorkerInfo]:
        """Every live client that runs jobs, oldest first: one per started `Client`.

        Read from the registry the clients keep: each started client writes
        its row at start (host, pid, drover version, queues, concurrency),
        refreshes it every heartbeat interval with how many jobs it is running
        and deletes it when it stops cleanly. A row not refreshed for three of
        its client's intervals (a crashed, killed or frozen process) is not
        listed, and the next refresh of any client deletes it. Producers (a
        `Client` without a `Config`, or never started) have no row. Read-only,
        one statement.
        """
        return self._store.live_clients()

    def kinds(self, minutes: int = 60) -> list[KindStats]:
        """Per job kind over the last ``minutes`` (1..1440), by kind, database clock.

        For each kind seen in the window: jobs that completed and went dead
        in it, attempts that failed in it (every error recorded, retried or
        final; snoozes are not errors), and the 50th and 95th percentile run
        time of the completed jobs (their last attempt, from claim to
        completion). One statement over the same indexes as `throughput`; jobs
        retention already deleted are not counted.
        """
        if isinstance(minutes, bool) or not isinstance(minutes, int) or not 1 <= minutes <= 1440:
            raise InvalidArgument(f"minutes must be an int between 1 and 1440, not {minutes!r}")
        return self._store.kind_stats(minutes)

    def lease_holder(self, job_id: int) -> str | None:
        """The worker whose claim set the job's current attempt (``None`` if never claimed).

        ``"<client id> (pid <pid> on <host>)"``; kept after the job moves on,
        so for a job that is no longer running it names the last holder.

        Raises:
            drover.NotFound: no such job.
        """
        checked = check_job_id(job_id)
        exists, holder = self._store.lease_holder(checked)
        if not exists:
            raise NotFound(f"job {checked} does not exist")
        return holder

    def throughput(self, minutes: int = 60) -> list[Throughput]:
        """Per minute, oldest first, over the last ``minutes`` (1..1440), database clock.

        Each minute counts jobs that completed, attempts that failed (snoozes
        excluded, cancellations included) and jobs that went dead. Completed
        and dead jobs already deleted by retention are no longer counted.
        """
        if isinstance(minutes, bool) or not isinstance(minutes, int) or not 1 <= minutes <= 1440:
            raise InvalidArgument(f"minutes must be an int between 1 and 1440, not {minutes!r}")
        since, counts = self._store.throughput(minutes)
        return [
            Throughput(
                minute=minute,
                completed=counts.get((minute, "completed"), 0),
                failed=counts.get((minute, "failed"), 0),
                dead=counts.get((minute, "dead"), 0),
            )
            for minute in (since + timedelta(minutes=i) for i in range(minutes))
        ]

    @staticmethod
    def validate_enqueue(kind: object, args_json: object) -> tuple[str, str]:
        """Check what ``enqueue`` would check, without a database: ``(kind, canonical_json)``.

        Raises:
            drover.InvalidJobArgs: as ``enqueue``.
        """
        try:
            checked_kind = _check_name(kind, "kind", MAX_KIND_LENGTH)
        except (TypeError, ValueError) as exc:
            raise InvalidJobArgs(str(exc)) from None
        if not isinstance(args_json, str):
            raise InvalidJobArgs(f"args must be a JSON string, not {type(args_json).__name__}")
        if len(args_json.encode("utf-8", "surrogatepass")) > MAX_ENQUEUE_ARGS_BYTES:
            raise InvalidJobArgs(f"args are larger than {MAX_ENQUEUE_ARGS_BYTES} bytes")
        try:
            value = json.loads(args_json, parse_constant=_refuse_constant)
            canonical = json.dumps(
                value, ensure_ascii=False, separators=(",", ":"), allow_nan=False
            )
            canonical.encode("utf-8")  # a lone surrogate (from "\\ud800") cannot be stored
        except (ValueError, UnicodeEncodeError) as exc:
            raise InvalidJobArgs(f"args must be valid JSON: {exc}") from None
        except RecursionError:
            raise InvalidJobArgs("args must be valid JSON: nested too deeply") from None
        if "\x00" in canonical or "\\u0000" in canonical:
            raise InvalidJobArgs("args must not contain NUL characters")
        return checked_kind, canonical

    def enqueue(self, kind: str, args_json: str, opts: InsertOpts | None = None) -> JobRow:
        """Insert a job by kind with raw JSON args, for operators and scripts.

        Validation happens before anything is written: an empty kind, args
        that are not JSON, contain a NUL character or exceed 1 MiB are
        refused with ``drover.InvalidJobArgs``. When the Inspector was
        given a ``workers`` registry that knows ``kind``, the args must also
        validate as that kind's args class (the pydantic message says why
        not), are stored as ``Client.insert`` would store them, and the
        class's ``queue``, ``max_attempts`` and ``priority`` defaults apply
        where ``opts`` leaves them unset; for an unknown kind any JSON value is
        accepted, with queue ``default``, 25 attempts and priority 0. Honours
        ``opts`` (queue, time, unique key, attempts, priority, tags, metadata) and wakes
        listening workers; ``opts`` with ``unique``, ``debounce`` or
        ``throttle`` is refused (``drover.InvalidInsertOpts``).
        """
        checked_kind, canonical = self.validate_enqueue(kind, args_json)
        if opts is not None and not isinstance(opts, InsertOpts):
            raise InvalidJobArgs(f"opts must be a drover.InsertOpts, not {type(opts).__name__}")
        if opts is not None and (opts.unique or opts.debounce or opts.throttle):
            raise InvalidInsertOpts(
                "Inspector.enqueue does not take unique, debounce or throttle; "
                "insert with Client.insert"
            )
        entry = self._workers.get(checked_kind) if self._workers is not None else None
        if entry is not None:
            params = encode_insert(_validated(entry[0], checked_kind, canonical), opts)
        else:
            opts = opts or InsertOpts()
            params = JobInsertParams(
                kind=checked_kind,
                queue=opts.queue or DEFAULT_QUEUE,
                args_json=canonical,
                max_attempts=opts.max_attempts or DEFAULT_MAX_ATTEMPTS,
                scheduled_at=opts.scheduled_at,
                unique_key=opts.unique_key or None,
                priority=DEFAULT_PRIORITY if opts.priority is None else opts.priority,
                tags=tuple(opts.tags),
                meta=None if opts.meta is None else _meta_json(opts.meta),
            )
        return self._store.insert(params, notify=True)

    def cancel_job(
        self,
        job_id: int,
        *,
        reason: str | None = None,
        hard: bool = False,
        grace: Duration = DEFAULT_CANCEL_GRACE,
    ) -> JobRow:
        """Cancel a job: a pending, waiting or dead one at once; a running one through its worker.

        A pending, waiting (available, scheduled, retryable) or dead job
        becomes ``cancelled`` now, and the row returned says so. A running
        job stays ``running`` in the row returned: the request is recorded
        and its worker is told within a round trip of the commit (a
        notification on ``drover_cancel``; a worker without notifications
        learns it from its next heartbeat). Its handler's context is
        cancelled, the same signal ``Timeout`` and shutdown use; whenever
        the attempt ends (the handler returns, raises, or its worker dies
        and the job is rescued), the job ends ``cancelled`` with an errors
        entry giving ``reason``, never retried. A handler that ignores the
        signal finishes its attempt, and the job is still recorded
        cancelled (ADR 0030).

        ``hard`` asks a supervised worker process (``drover worker
        --processes N``) to hand back its other jobs and be replaced if the
        handler has not returned ``grace`` (a ``timedelta`` or seconds,
        default 10 s) after the worker learned of it; an unsupervised worker
        treats it as a soft cancel and logs a WARNING saying so. A repeated
        request replaces the first (a soft cancel can be made hard).

        Raises:
            drover.InvalidArgument: a bad id, a reason that is not a string
                or longer than 1000 characters, a ``hard`` that is not a bool,
                a negative or non-finite ``grace``. Nothing is written.
            drover.NotFound: no such job.
            drover.InvalidTransition: the job is completed or cancelled already.
        """
        checked = check_job_id(job_id)
        if reason is not None and not isinstance(reason, str):
            raise InvalidArgument(f"reason must be a str or None, not {type(reason).__name__}")
        if reason is not None and len(reason) > MAX_CANCEL_REASON:
            raise InvalidArgument(
                f"reason must be at most {MAX_CANCEL_REASON} characters, not {len(reason)}"
            )
        if not isinstance(hard, bool):
            raise InvalidArgument(f"hard must be a bool, not {type(hard).__name__}")
        seconds = to_seconds(grace, "grace")
        if seconds < 0:
            raise InvalidArgument(f"grace must not be negative, not {seconds:g} s")
        row, _ = self._store.cancel_or_request(
            checked, reason=reason or None, hard=hard, grace=seconds
        )
        return row

    def retry_job(self, job_id: int) -> JobRow:
        """Send a dead or cancelled job back to ``available`` with fresh attempts (errors kept).

        Raises:
            drover.NotFound: no such job.
            drover.InvalidTransition: the job is not dead or cancelled.
            drover.DuplicateJob: its unique key is now held by another active job.
        """
        return self._store.retry_job(check_job_id(job_id))

    def retry_jobs(self, ids: Iterable[int]) -> list[int]:
        """Send every listed dead or cancelled job back to ``available``, in one statement.

        Returns the ids redriven, ascending; the others are left as they are
        (not retriable, missing, locked by a concurrent operator, or holding a
        unique key or identity another job holds again; of several listed jobs
        sharing one only the newest goes). At most 1000 ids;
        duplicates count once. Listening workers are woken.

        Raises:
            drover.InvalidArgument: an id that cannot name a job, or too many.
        """
        checked = _bulk_ids(ids)
        return self._store.retry_jobs(checked) if checked else []

    def cancel_jobs(self, ids: Iterable[int]) -> list[int]:
        """Cancel every listed waiting or dead job, in one statement.

        Returns the ids cancelled, ascending; running, finished and missing
        jobs are left as they are. At most 1000 ids; duplicates count once.

        Raises:
            drover.InvalidArgument: an id that cannot name a job, or too many.
        """
        checked = _bulk_ids(ids)
        return self._store.cancel_jobs(checked) if checked else []

    def retry_dead(self, kind: str, queue: str | None = None) -> int:
        """Send every dead job of ``kind`` (on ``queue`` if given) back to ``available``.

        One statement; returns how many were redriven. A dead job whose
        unique key is held again by a waiting or running job stays dead, and
        of several dead jobs sharing a key only the newest is redriven. Jobs
        a concurrent operator holds are skipped. Listening workers are woken.
        """
        try:
            checked_kind = _check_name(kind, "kind", MAX_KIND_LENGTH)
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(str(exc)) from None
        if queue is not None:
            check_queue_name(queue)
        return self._store.retry_dead(checked_kind, queue)

    def workflow(self, job_id: int) -> Workflow:
        """The workflow job ``job_id`` belongs to (any of its jobs' ids, or the workflow's id).

        Every job of it in id order, each with the ids it waits for: what
        ``drover workflow show`` and the status page draw. One statement's
        snapshot; jobs that retention deleted are missing.

        Raises:
            drover.NotFound: no such job, or it belongs to no workflow (a job
                inserted on its own, even with ``depends_on``).
            drover.InvalidArgument: ``job_id`` is not an int in 1..2**63-1.
            drover.DatabaseError: the database refused or could not be reached.
        """
        checked = check_job_id(job_id)
        found = self._store.workflow(checked)
        if found is None:
            raise NotFound(f"job {checked} does not exist or belongs to no workflow")
        workflow_id, jobs = found
        return Workflow(workflow_id, tuple(jobs))

    def limits(self) -> list[LimitState]:
        """Every cluster-wide limit, by scope, target and partition field, with its use now.

        Each carries the effective values the claim enforces, what code
        declared and what an operator overrode, and its use: running jobs,
        starts in the current rate window, partitions in use and at their
        limit, the busiest partitions of a partitioned limit (see
        `drover.LimitState`). One statement; a snapshot, already changing as
        jobs start and end.
        """
        return self._store.limits()

    def set_limit(
        self,
        key: str | LimitKey,
        *,
        concurrency: int | None = None,
        rate: int | None = None,
        per: Period | None = None,
    ) -> LimitState:
        """Override a limit for every client, from their next claim; returns it as written.

        `key` names the scope: `"kind:charge"`, `"kind:charge[tenant_id]"`
        (per value of that args field) or `"queue:images"`. Only the values
        given change (the others keep their override or declaration: a new
        `rate` keeps the period in force unless `per` is given); a limit no
        code declared is created. The override outlives restarts (a client's
        declaration at start keeps it) until `clear_limit`. Every listening
        client's fetcher is woken, so jobs a raised limit releases start at
        once; a client that does not listen follows from its next poll.

        The state returned is read in the write's own transaction, under its
        row lock: concurrent operators' writes to the same limit are applied
        one after the other, and the state is this write's.

        Raises:
            drover.InvalidLimit: a bad key, neither `concurrency` nor `rate`,
                a value that is not an int from 1 to 2**31 - 1, `per` without
                `rate`, or a period that is not a duration of at most a day.
                Nothing is written.
        """
        parsed = parse_limit_key(key)
        conc, rate_, period = check_override(concurrency, rate, per, "set_limit")
        return self._store.set_limit(parsed, conc, rate_, period)

    def clear_limit(self, key: str | LimitKey) -> bool:
        """Drop an operator's override: the declared values apply again, from the next claim.

        A limit that no code declared is removed. Returns False when nothing
        changed (no such limit, or a declared one without an override). The
        row is locked while it is cleared, so a concurrent `set_limit` comes
        before or after, never in between. Wakes every listening fetcher.

        Raises:
            drover.InvalidLimit: a bad key; nothing is written.
        """
        return self._store.clear_limit(parse_limit_key(key)) is not None

    def delete_limit(self, key: str | LimitKey) -> bool:
        """Remove a limit, declared or not, from the next claim on; False when there was none.

        Its recorded starts go with it. A client whose code still declares the
        limit writes it again when it next starts: remove it from the code too.

        Raises:
            drover.InvalidLimit: a bad key; nothing is written.
        """
        return self._store.delete_limit(parse_limit_key(key))

    def health(self, thresholds: HealthThresholds | None = None) -> HealthReport:
        """What hurts this queue now, with evidence and a remedy (the queue doctor, ADR 0035).

        Names the sessions, replication slots and prepared transactions
        holding back vacuum, drover tables full of dead tuples, running jobs
        whose lease expired unrescued, queues with waiting jobs and no live
        worker, periodic jobs with no leader, and a schema behind this
        library. Read-only, on one pooled connection; the statements read
        server views, statistics and the running and waiting partial indexes,
        never the history of finished jobs. Thread-safe; no timeout of its
        own beyond the pool's. ``thresholds`` defaults to
        ``HealthThresholds()``.
        """
        if thresholds is None:
            thresholds = HealthThresholds()
        elif not isinstance(thresholds, HealthThresholds):
            raise InvalidArgument(
                f"thresholds must be a drover.HealthThresholds, not {type(thresholds).__name__}"
            )
        return diagnose(self._store.health_facts(thresholds), thresholds)

    def close(self) -> None:
        """Close the pool if the Inspector opened it; idempotent."""
        self._store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _tag_filter(tags: object) -> tuple[str, ...]:
    try:
        return check_tags(tags, "tags")
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(str(exc)) from None


def _meta_json(meta: object) -> str:
    # Checked when the InsertOpts was built; again here, as the dict may have changed.
    try:
        return encode_meta(meta, "InsertOpts.meta")
    except (TypeError, ValueError) as exc:
        raise InvalidInsertOpts(str(exc)) from None
