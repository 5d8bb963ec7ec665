"""The Inspector's operator writes: enqueue by kind, cancel and retry (one job, many, or by kind).

``OperatorWrites`` is an object ``drover.Inspector`` holds and delegates
these methods to, apart from its reads (stats, queues, listing, throughput,
workers, workflows, limits, the doctor) because they are a family of their
own: each validates an operator's raw input (JSON args, ids, reasons,
durations) before anything is written, then makes one state-conditioned
write through the Inspector's ``Store``. The public docstrings are the
Inspector's.
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


def validate_enqueue(kind: object, args_json: object) -> tuple[str, str]:
    """``(kind, canonical_json)`` as ``enqueue`` checks them, without a database
    (see ``Inspector.validate_enqueue``)."""
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
        canonical = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        canonical.encode("utf-8")  # a lone surrogate (from "\\ud800") cannot be stored
    except (ValueError, UnicodeEncodeError) as exc:
        raise InvalidJobArgs(f"args must be valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidJobArgs("args must be valid JSON: nested too deeply") from None
    if "\x00" in canonical or "\\u0000" in canonical:
        raise InvalidJobArgs("args must not contain NUL characters")
    return checked_kind, canonical


class OperatorWrites:
    """``enqueue``, ``cancel_job``, ``cancel_jobs``, ``retry_job``, ``retry_jobs`` and
    ``retry_dead`` over an Inspector's ``Store``, with its optional ``Workers``.

    ``drover.Inspector`` holds one and delegates to it. Thread-safe: each
    call borrows one pool connection for its statement, and every write is
    conditioned on the job's state, so a worker finishing the same job at
    the same moment either wins or is refused.
    """

    def __init__(
        self,
        store: Store,
        workers: Workers | None,
        insert_chain: tuple[InsertMiddleware, ...] = (),
    ) -> None:
        self._store = store
        self._workers = workers
        self._insert_chain = insert_chain

    def enqueue(self, kind: str, args_json: str, opts: InsertOpts | None = None) -> JobRow:
        """Validate, then insert a job by kind through the Inspector's insert middleware
        (see ``Inspector.enqueue``)."""
        checked_kind, canonical = validate_enqueue(kind, args_json)
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
        """Check the request, then cancel the job (see ``Inspector.cancel_job``)."""
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
        row, _ = self._store.operator.cancel_or_request(
            checked, reason=reason or None, hard=hard, grace=seconds
        )
        return row

    def retry_job(self, job_id: int) -> JobRow:
        """Send a dead or cancelled job back to ``available`` (see ``Inspector.retry_job``)."""
        return self._store.operator.retry_job(check_job_id(job_id))

    def retry_jobs(self, ids: Iterable[int]) -> list[int]:
        """Redrive the listed jobs; the ids redriven (see ``Inspector.retry_jobs``)."""
        checked = _bulk_ids(ids)
        return self._store.operator.retry_jobs(checked) if checked else []

    def cancel_jobs(self, ids: Iterable[int]) -> list[int]:
        """Cancel the listed jobs; the ids cancelled (see ``Inspector.cancel_jobs``)."""
        checked = _bulk_ids(ids)
        return self._store.operator.cancel_jobs(checked) if checked else []

    def retry_dead(self, kind: str, queue: str | None = None) -> int:
        """Redrive the dead jobs of ``kind``; how many (see ``Inspector.retry_dead``)."""
        return self._store.operator.retry_dead(*_kind_and_queue(kind, queue))

    def count_dead(self, kind: str, queue: str | None = None) -> int:
        """How many dead jobs of ``kind`` there are (see ``Inspector.count_dead``)."""
        return self._store.operator.count_dead(*_kind_and_queue(kind, queue))


def _kind_and_queue(kind: str, queue: str | None) -> tuple[str, str | None]:
    try:
        checked_kind = _check_name(kind, "kind", MAX_KIND_LENGTH)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(str(exc)) from None
    if queue is not None:
        check_queue_name(queue)
    return checked_kind, queue


def _meta_json(meta: object) -> str:
    # Checked when the InsertOpts was built; again here, as the dict may have changed.
    try:
        return encode_meta(meta, "InsertOpts.meta")
    except (TypeError, ValueError) as exc:
        raise InvalidInsertOpts(str(exc)) from None
