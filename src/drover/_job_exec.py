"""``Job``: what a worker hands a handler, with the calls a handler makes on it.

Separate from ``drover.job`` because it is the execution side: the lease,
``parent_results``, progress, metadata and ``complete_tx``, which reach the
engine through the job's context, where the rest of ``drover.job`` is the
stored and inserted data. Re-exported by ``drover.job``, the path callers
import from.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, Generic, TypeVar, overload

from drover._job_args import JobArgs
from drover.context import JobContext, Lease
from drover.errors import InvalidArgument
from drover.progress import MAX_PROGRESS_MESSAGE, ProgressSlot, check_progress
from drover.results import DEFAULT_MAX_RESULT_BYTES, decode_result, encode_result

__all__ = ["Job"]

ArgsT = TypeVar("ArgsT", bound=JobArgs, covariant=True)
_NO_META: Mapping[str, Any] = MappingProxyType({})
T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class Job(Generic[ArgsT]):
    """What a worker receives: the claimed row's identity and its decoded, typed args.

    ``attempt`` counts executions including this one (1 on the first run).
    ``context`` carries cancellation (shutdown escalation, timeouts), the
    deadline if any, and values set by middleware. ``priority``,
    ``scheduled_at``, ``tags`` and ``meta`` are the row's as claimed:
    ``update_meta`` writes are not reflected in ``meta``. Immutable, so safe to
    read from any thread the handler starts.
    """

    id: int
    kind: str
    queue: str
    attempt: int
    max_attempts: int
    created_at: datetime
    args: ArgsT
    context: JobContext = field(default_factory=JobContext, compare=False)
    priority: int = 0
    """-100 to 100, higher first (``InsertOpts.priority``)."""
    scheduled_at: datetime | None = None
    """When this run was due: the insert's time, or a retry's or a snooze's (``None`` for a
    ``Job`` built by hand without one)."""
    tags: tuple[str, ...] = ()
    """The labels given at insert (``InsertOpts.tags``)."""
    meta: Mapping[str, Any] = field(default_factory=lambda: _NO_META, compare=False)
    """The job's metadata when it was claimed (``InsertOpts.meta``, earlier runs'
    ``update_meta``); read-only."""

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
        read = self.context._execution.read_parents
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
        slot = self.context._execution.progress
        if slot is None:
            slot = _progress_slot(self.context)
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
            _progress_slot(self.context).merge(values)
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
        execution = self.context._execution
        complete = execution.complete_tx
        if complete is None:
            raise InvalidArgument(
                "complete_tx needs a job claimed by a drover worker; this Job was built by hand"
            )
        text = encode_result(
            result, kind=self.kind, max_bytes=execution.max_bytes or DEFAULT_MAX_RESULT_BYTES
        )
        complete(conn, text)
        execution.in_tx = True


_SLOT_LOCK = threading.Lock()
"""Serialises the making of progress slots (an execution's first report, rare)."""


def _progress_slot(context: JobContext) -> ProgressSlot:
    """The execution's progress slot, made by its first report and handed to its sink."""
    execution = context._execution
    slot: ProgressSlot | None = execution.progress
    if slot is None:
        with _SLOT_LOCK:
            slot = execution.progress
            if slot is None:
                lease = context.lease
                slot = execution.progress = ProgressSlot(
                    lease.job_id, lease.attempt, execution.meta
                )
                sink = execution.progress_sink
                if sink is not None:
                    sink(slot)
    return slot
