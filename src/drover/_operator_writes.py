"""The Inspector's operator writes: enqueue by kind, cancel and retry (one job, many, or by kind).

A base class of ``drover.Inspector``, apart from its reads (stats, queues,
listing, throughput, workers, workflows, limits, the doctor) because these
methods are a family of their own: each validates an operator's raw input
(JSON args, ids, reasons, durations) before anything is written, then makes
one state-conditioned write through the Inspector's ``Store``. The store and
the optional ``Workers`` registry are set by ``Inspector.__init__``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import timedelta

import pydantic

from drover._db.store import Store
from drover._durations import Duration, to_seconds
from drover._insert.encode import DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE, encode_insert
from drover._insert.funnel import Prepared, prepare_params, through
from drover._records import JobInsertParams
from drover.errors import InvalidArgument, InvalidInsertOpts, InvalidJobArgs
from drover.insert_middleware import InsertMiddleware
from drover.job import (
    DEFAULT_PRIORITY,
    MAX_KIND_LENGTH,
    InsertOpts,
    JobArgs,
    JobRow,
    _check_name,
    check_job_id,
)
from drover.progress import encode_meta
from drover.queues import check_queue_name
from drover.worker import Workers

__all__ = ["OperatorWrites"]

MAX_BULK_IDS = 1000
MAX_ENQUEUE_ARGS_BYTES = 1 << 20
MAX_CANCEL_REASON = 1000
"""A cancel's reason travels in a notification, whose payload PostgreSQL caps at 8000 bytes."""
DEFAULT_CANCEL_GRACE = timedelta(seconds=10)


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


def _bulk_ids(ids: object) -> list[int]:
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
        raise InvalidArgument(f"ids must be an iterable of job ids, not {type(ids).__name__}")
    checked = sorted({check_job_id(i) for i in ids})
    if len(checked) > MAX_BULK_IDS:
        raise InvalidArgument(f"at most {MAX_BULK_IDS} job ids at once, not {len(checked)}")
    return checked


class OperatorWrites:
    """``validate_enqueue``, ``enqueue``, ``cancel_job``, ``cancel_jobs``, ``retry_job``,
    ``retry_jobs`` and ``retry_dead`` over an Inspector's ``Store``.

    Only ``drover.Inspector`` derives from it, and its ``__init__`` sets the
    attributes declared here. Thread-safe: each call borrows one pool
    connection for its statement, and every write is conditioned on the
    job's state, so a worker finishing the same job at the same moment
    either wins or is refused.
    """

    _store: Store
    _workers: Workers | None
    _insert_chain: tuple[InsertMiddleware, ...]

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
        ``throttle`` is refused (``drover.InvalidInsertOpts``). The job goes
        through the Inspector's insert middleware (``operation``
        ``enqueue``).
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
        # Through the insert funnel (ADR 0047): the Inspector's insert
        # middleware, then one statement that wakes listeners at its commit.
        prepared = prepare_params(params, "enqueue")
        return through(self._insert_chain, prepared, self._write_enqueued)[0]

    def _write_enqueued(self, prepared: Prepared) -> list[JobRow]:
        return [self._store.insert(prepared.payload, notify=True)]

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


def _meta_json(meta: object) -> str:
    # Checked when the InsertOpts was built; again here, as the dict may have changed.
    try:
        return encode_meta(meta, "InsertOpts.meta")
    except (TypeError, ValueError) as exc:
        raise InvalidInsertOpts(str(exc)) from None
