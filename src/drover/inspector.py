"""The Inspector: read and steer jobs from operator tools, without running any.

Its reads (stats, queues, listing, throughput, workers, workflows, limits,
the doctor) and limit overrides live here. Its operator writes (enqueue,
cancel, retry) are delegated to an ``OperatorWrites``
(``drover._operator_writes``), reading a job and switching queues to a
``JobsAndQueues`` (``drover._jobs_and_queues``, which the Client holds
too): objects the Inspector holds, not base classes, so its public methods
are the ones written here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Self

from psycopg_pool import ConnectionPool

from drover._db.namespace import namespace_for
from drover._db.store import Store
from drover._durations import Duration
from drover._jobs_and_queues import JobsAndQueues
from drover._operator_writes import DEFAULT_CANCEL_GRACE, OperatorWrites, validate_enqueue
from drover._records import KindStats, PeriodicInfo, WorkerInfo
from drover.errors import InvalidArgument, NotFound
from drover.health import HealthReport, HealthSample, HealthThresholds, diagnose
from drover.insert_middleware import InsertMiddleware, checked_insert_chain
from drover.job import (
    MAX_KIND_LENGTH,
    PUBLISHED_STATES,
    InsertOpts,
    JobRow,
    JobState,
    _check_name,
    check_job_id,
)
from drover.limits import LimitKey, LimitState, Period, check_override, parse_limit_key
from drover.middleware import Middleware
from drover.progress import check_tags
from drover.queues import QueueState, QueueSummary
from drover.unique import UniqueIdentity
from drover.worker import Workers
from drover.workflows import Workflow, WorkflowSummary

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


@dataclass(frozen=True, slots=True)
class OperatorRights:
    """Which operator writes the Inspector's role may make (``Inspector.rights``, ADR 0054).

    ``role`` is the role the connection acts as; ``retry_and_cancel`` covers
    retrying and cancelling jobs (one, many, every dead job of a kind),
    ``pause_queues`` pausing and resuming, ``set_limits`` setting, clearing
    and removing a limit. The owner may do all three; the roles ``drover
    roles`` prints, none.
    """

    role: str
    retry_and_cancel: bool
    pause_queues: bool
    set_limits: bool

    @property
    def any(self) -> bool:
        """True when the role may make at least one of the writes."""
        return self.retry_and_cancel or self.pause_queues or self.set_limits


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


class Inspector:
    """Operator access to jobs, queues and periodic jobs, without running any.

    No worker pool and no start/stop. ``pool_or_conninfo`` is a
    ``psycopg_pool.ConnectionPool`` (borrowed, never closed) or a conninfo
    string (a small pool is opened and closed by ``close`` / ``with``).
    ``workers``, when given, is the registry of the application's job kinds:
    ``enqueue`` then validates args of a known kind against its class
    and applies the class's defaults. ``schema`` is the PostgreSQL schema of
    the installation to inspect (``Config.schema``; ``None`` is the default).
    ``middleware``: the insert middleware ``enqueue`` goes through
    (``drover.InsertMiddleware``; a ``Config.middleware`` list may be passed
    as is, its execution middleware are left out).
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
        middleware: Sequence[Middleware | InsertMiddleware] = (),
    ) -> None:
        if workers is not None and not isinstance(workers, Workers):
            raise InvalidArgument(
                f"Inspector workers must be a drover.Workers, not {type(workers).__name__}"
            )
        ns = namespace_for(schema, "Inspector schema")
        # Checked before the pool opens: bad input changes nothing.
        chain = checked_insert_chain(middleware, "Inspector middleware")
        self._store = Store.open(pool_or_conninfo, who="Inspector", max_size=2, ns=ns)
        self._jobs = JobsAndQueues(self._store.operator)
        self._writes = OperatorWrites(self._store, workers, chain)

    # --- reading a job, switching queues (delegated to JobsAndQueues) -----------------------

    def get_job(self, job_id: int) -> JobRow:
        """The job's current row, read now (a snapshot; it does not follow the job).

        Raises:
            drover.NotFound: no job has that id (it never existed, or retention
                deleted it).
            drover.InvalidArgument: ``job_id`` is not an int in 1..2**63-1.
            drover.DatabaseError: the database refused or could not be reached.
        """
        return self._jobs.get_job(job_id)

    def get_result(self, job_id: int) -> Any:
        """The result stored for the job, read now, without waiting (``None``: none yet).

        A job has a result once it completed and its handler returned
        something other than ``None`` (parsed JSON: a model comes back as a
        dict). To wait for a job's end, use ``Client.result``.

        Raises:
            drover.NotFound: no job has that id.
            drover.InvalidArgument: ``job_id`` is not an int in 1..2**63-1.
            drover.DatabaseError: the database refused or could not be reached.
        """
        return self._jobs.get_result(job_id)

    def pause_queue(self, name: str) -> QueueState:
        """Stop every client from claiming jobs from ``name``, until ``resume_queue``.

        Persisted in the database (``drover_queues``), so it applies to all
        clients on this database, including ones started later, from their next
        claim (within one poll interval). Jobs already running finish normally;
        inserts into a paused queue are accepted and wait. Idempotent: pausing
        a paused queue keeps its first ``paused_at``. Returns the queue's state.

        Raises:
            drover.InvalidInsertOpts: ``name`` is not a valid queue name.
        """
        return self._jobs.pause_queue(name)

    def resume_queue(self, name: str) -> bool:
        """Let clients claim from ``name`` again; False if it was not paused (a no-op).

        Listening clients (``Config.notify``) are woken at once by a
        notification on the queue; others pick the queue up within one poll
        interval.

        Raises:
            drover.InvalidInsertOpts: ``name`` is not a valid queue name.
        """
        return self._jobs.resume_queue(name)

    def queue_states(self) -> list[QueueState]:
        """Every queue ever paused, by name; ``QueueState.paused`` tells whether it still is."""
        return self._jobs.queue_states()

    # --- operator writes (delegated to OperatorWrites) ---------------------------------------

    @staticmethod
    def validate_enqueue(kind: object, args_json: object) -> tuple[str, str]:
        """Check what ``enqueue`` would check, without a database: ``(kind, canonical_json)``.

        Raises:
            drover.InvalidJobArgs: as ``enqueue``.
        """
        return validate_enqueue(kind, args_json)

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
        return self._writes.enqueue(kind, args_json, opts)

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
        return self._writes.cancel_job(job_id, reason=reason, hard=hard, grace=grace)

    def retry_job(self, job_id: int) -> JobRow:
        """Send a dead or cancelled job back to ``available`` with fresh attempts (errors kept).

        Raises:
            drover.NotFound: no such job.
            drover.InvalidTransition: the job is not dead or cancelled.
            drover.DuplicateJob: its unique key is now held by another active job.
        """
        return self._writes.retry_job(job_id)

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
        return self._writes.retry_jobs(ids)

    def cancel_jobs(self, ids: Iterable[int]) -> list[int]:
        """Cancel every listed waiting or dead job, in one statement.

        Returns the ids cancelled, ascending; running, finished and missing
        jobs are left as they are. At most 1000 ids; duplicates count once.

        Raises:
            drover.InvalidArgument: an id that cannot name a job, or too many.
        """
        return self._writes.cancel_jobs(ids)

    def retry_dead(self, kind: str, queue: str | None = None) -> int:
        """Send every dead job of ``kind`` (on ``queue`` if given) back to ``available``.

        One statement; returns how many were redriven. A dead job whose
        unique key is held again by a waiting or running job stays dead, and
        of several dead jobs sharing a key only the newest is redriven. Jobs
        a concurrent operator holds are skipped. Listening workers are woken.
        """
        return self._writes.retry_dead(kind, queue)

    def count_dead(self, kind: str, queue: str | None = None) -> int:
        """How many dead jobs of ``kind`` (on ``queue`` if given) there are now.

        One count; what ``retry_dead`` would consider (it may redrive fewer:
        held unique keys and rows a concurrent operator holds are skipped).
        The status page asks the operator to confirm this number first.
        """
        return self._writes.count_dead(kind, queue)

    def rights(self) -> OperatorRights:
        """Which operator writes this role may make, asked of PostgreSQL without trying one.

        One read of the privilege functions (``has_column_privilege``,
        ``has_table_privilege``), no drover row: the status page asks once
        to show only the buttons its role may use (ADR 0054). A write the
        answer allows may still be refused (grants change); it then raises
        ``drover.PermissionDenied`` as before.
        """
        found = self._store.page_rights()
        return OperatorRights(found.role, found.jobs, found.queues, found.limits)

    # --- reads, limits, the doctor ---------------------------------------------------------------

    def stats(self) -> Stats:
        """Depth per queue and state, oldest claimable age per queue, paused queues."""
        snapshot, states = self._store.operator.queue_overview("stats")
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
        snapshot, states = self._store.operator.queue_overview("list queues")
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
        found = self._store.operator.unique_identity(checked)
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
        return self._store.operator.periodic_list()

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
        return self._store.operator.list_jobs(
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

        For each kind seen in the window: jobs that completed, went dead and
        ended cancelled in it, attempts that ran and failed in it (every error
        recorded, retried or final; snoozes and cancellations are not
        failures, nor a job cancelled before it ever ran), and the 50th and 95th percentile run
        time of the completed jobs (their last attempt, from claim to
        completion). One statement over the same indexes as `throughput`; jobs
        retention already deleted are not counted.
        """
        if isinstance(minutes, bool) or not isinstance(minutes, int) or not 1 <= minutes <= 1440:
            raise InvalidArgument(f"minutes must be an int between 1 and 1440, not {minutes!r}")
        return self._store.operator.kind_stats(minutes)

    def lease_holder(self, job_id: int) -> str | None:
        """The worker whose claim set the job's current attempt (``None`` if never claimed).

        ``"<client id> (pid <pid> on <host>)"``; kept after the job moves on,
        so for a job that is no longer running it names the last holder.

        Raises:
            drover.NotFound: no such job.
        """
        checked = check_job_id(job_id)
        exists, holder = self._store.operator.lease_holder(checked)
        if not exists:
            raise NotFound(f"job {checked} does not exist")
        return holder

    def throughput(
        self, minutes: int = 60, *, kind: str | None = None, queue: str | None = None
    ) -> list[Throughput]:
        """Per minute, oldest first, over the last ``minutes`` (1..1440), database clock;
        only ``kind``'s jobs and ``queue``'s when given.

        Each minute counts jobs that completed, attempts that ran and failed
        (snoozes and cancellations excluded, as ``kinds`` counts them) and
        jobs that went dead. Completed and dead jobs already deleted by
        retention are no longer counted.
        """
        if isinstance(minutes, bool) or not isinstance(minutes, int) or not 1 <= minutes <= 1440:
            raise InvalidArgument(f"minutes must be an int between 1 and 1440, not {minutes!r}")
        if kind is not None:
            try:
                _check_name(kind, "kind", MAX_KIND_LENGTH)
            except (TypeError, ValueError) as exc:
                raise InvalidArgument(str(exc)) from None
        if queue is not None:
            InsertOpts(queue=queue)  # same rules as everywhere a queue is named
        since, counts = self._store.operator.throughput(minutes, kind, queue)
        return [
            Throughput(
                minute=minute,
                completed=counts.get((minute, "completed"), 0),
                failed=counts.get((minute, "failed"), 0),
                dead=counts.get((minute, "dead"), 0),
            )
            for minute in (since + timedelta(minutes=i) for i in range(minutes))
        ]

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

    def workflows(self, limit: int = 50, before: int | None = None) -> list[WorkflowSummary]:
        """The newest workflows, newest first: each one's id, insert time, first kind and
        jobs by state (``WorkflowSummary``); ``before`` pages (ids below it).

        One statement that reads the workflow index backwards and stops after
        ``limit`` (1..1000) workflows, then counts only their jobs: its cost
        does not grow with the history. Workflows retention deleted are gone.

        Raises:
            drover.InvalidArgument: a bad ``limit`` or ``before``.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise InvalidArgument(f"limit must be an int between 1 and 1000, not {limit!r}")
        checked = None if before is None else check_job_id(before)
        return self._store.workflows(limit, checked)

    def limits(self) -> list[LimitState]:
        """Every cluster-wide limit, by scope, target and partition field, with its use now.

        Each carries the effective values the claim enforces, what code
        declared and what an operator overrode, and its use: running jobs,
        starts in the current rate window, partitions in use and at their
        limit, the busiest partitions of a partitioned limit (see
        `drover.LimitState`). One statement; a snapshot, already changing as
        jobs start and end.
        """
        return self._store.operator.limits()

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
        return self._store.operator.set_limit(parsed, conc, rate_, period)

    def clear_limit(self, key: str | LimitKey) -> bool:
        """Drop an operator's override: the declared values apply again, from the next claim.

        A limit that no code declared is removed. Returns False when nothing
        changed (no such limit, or a declared one without an override). The
        row is locked while it is cleared, so a concurrent `set_limit` comes
        before or after, never in between. Wakes every listening fetcher.

        Raises:
            drover.InvalidLimit: a bad key; nothing is written.
        """
        return self._store.operator.clear_limit(parse_limit_key(key)) is not None

    def delete_limit(self, key: str | LimitKey) -> bool:
        """Remove a limit, declared or not, from the next claim on; False when there was none.

        Its recorded starts go with it. A client whose code still declares the
        limit writes it again when it next starts: remove it from the code too.

        Raises:
            drover.InvalidLimit: a bad key; nothing is written.
        """
        return self._store.operator.delete_limit(parse_limit_key(key))

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
        return diagnose(self._store.operator.health_facts(thresholds), thresholds)

    def health_samples(self, since: datetime) -> list[HealthSample]:
        """The health history from ``since`` (a timezone-aware datetime) on, oldest first:
        one sample a minute of ``drover_jobs``' dead and live tuples and size, the live
        clients' claim times and the MVCC horizon's age (ADR 0060).

        A started client writes the minute's sample at its registry refresh
        (every heartbeat interval) unless another has, so minutes with no
        started client are missing; samples are kept for a week. Read-only,
        one statement on the primary key. Thread-safe.

        Raises:
            drover.InvalidArgument: ``since`` is not a timezone-aware datetime.
        """
        if not isinstance(since, datetime) or since.tzinfo is None:
            raise InvalidArgument(f"since must be a timezone-aware datetime, not {since!r}")
        return self._store.operator.health_samples(since)

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
