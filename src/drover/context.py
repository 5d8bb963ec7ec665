"""The per-execution context a handler sees: cancellation, deadline and values.

A ``JobContext`` is created for every execution. Shutdown escalation
cancels it; a timeout derives a child whose cancellation also fires at a
deadline. Python cannot interrupt a running thread, so cancellation is
cooperative: a handler polls ``JobContext.cancelled`` or blocks in
``JobContext.wait`` instead of ``time.sleep``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from drover._durations import Duration, to_seconds

__all__ = ["JobContext", "Lease"]


class Lease:
    """The fence of one execution, read-only: which claim it holds and until when.

    Every write drover makes for this execution is accepted only while the
    job is still ``running`` with this ``attempt``. ``leased_until``
    is the database's expiry time, renewed by the heartbeat (``None`` outside
    a worker). ``lost`` is set, once and for good, when this client learns
    it no longer holds the job: the heartbeat found the claim gone (rescued,
    re-claimed, cancelled), the lease ran out locally without a renewal (the
    database could not be reached for a whole lease), or shutdown handed the
    job back. At the same time the job's context is cancelled. A long handler
    should check ``job.lease_lost.is_set()`` (or wait on the context) and
    stop: whatever it writes through drover afterwards is refused, and
    another execution may already be running.

    Thread safety: drover's threads change it (the heartbeat, shutdown), the
    handler's thread reads it; ``lost`` is a ``threading.Event``.
    """

    __slots__ = ("_attempt", "_job_id", "_leased_until", "_lock", "_lost", "_lost_reason")

    def __init__(
        self, job_id: int | None, attempt: int, leased_until: datetime | None = None
    ) -> None:
        self._job_id = job_id
        self._attempt = attempt
        self._leased_until = leased_until
        self._lock = threading.Lock()
        self._lost_reason: str | None = None
        # Made on first use: most executions never look at it, and an Event
        # (a Condition and two locks) per claim is work for nothing (ADR 0016).
        self._lost: threading.Event | None = None

    @property
    def job_id(self) -> int | None:
        """The job's id; ``None`` for a lease not made by a worker (a hand-built Job)."""
        return self._job_id

    @property
    def attempt(self) -> int:
        """The attempt this execution holds (1 on the first run)."""
        return self._attempt

    @property
    def lost(self) -> threading.Event:
        """Set once this execution has lost the job (the same Event every time)."""
        event = self._lost
        if event is None:
            with self._lock:
                event = self._lost
                if event is None:
                    event = self._lost = threading.Event()
                    if self._lost_reason is not None:
                        event.set()
        return event

    @property
    def leased_until(self) -> datetime | None:
        """When the database lets the lease lapse unless renewed (its clock)."""
        return self._leased_until

    @property
    def lost_reason(self) -> str | None:
        """Why ``lost`` was set, or ``None``."""
        return self._lost_reason

    # Called by drover's engine only (the claim that owns this lease).

    def _renew(self, leased_until: datetime) -> bool:
        with self._lock:
            if self._lost_reason is not None:
                return False
            self._leased_until = leased_until
            return True

    def _lose(self, reason: str) -> bool:
        with self._lock:
            if self._lost_reason is not None:
                return False
            self._lost_reason = reason
            event = self._lost
        # An Event made after the lock was released is set by its maker.
        if event is not None:
            event.set()
        return True

    def __repr__(self) -> str:
        state = f"lost ({self._lost_reason})" if self._lost_reason else "held"
        return f"<Lease job={self._job_id} attempt={self._attempt} {state}>"


class Execution:
    """What drover keeps of one execution beside its context's cancellation (internal).

    One per execution, shared by its root context and every child (a worker
    timeout's), so the dispatcher, the handler's calls on ``Job`` and the
    engine see the same state whichever context they hold. The engine gives
    a claimed job's: the completion in the caller's transaction
    (``complete_tx``), the reader of its dependencies' results
    (``read_parents``), where its first progress report goes
    (``progress_sink``) and the claimed row's metadata (``meta``). A hand-built
    context gets an empty one. The engine's dispatcher sets ``max_bytes``; the
    dispatcher and ``Job.complete_tx`` set the result; ``Job.set_progress``
    and ``Job.update_meta`` make ``progress`` on first use.

    Thread safety: written by the handler's thread and read by the engine
    after the handler returned, except ``progress``, made under a lock.
    """

    __slots__ = (
        "complete_tx",
        "in_tx",
        "max_bytes",
        "meta",
        "progress",
        "progress_sink",
        "read_parents",
        "text",
    )

    def __init__(
        self,
        *,
        complete_tx: Callable[[object, str | None], None] | None = None,
        read_parents: Callable[[int], Sequence[tuple[int, str, Any]]] | None = None,
        progress_sink: Callable[[Any], None] | None = None,
        meta: Any = None,
    ) -> None:
        self.complete_tx = complete_tx
        """What ``Job.complete_tx`` calls (``None``: a hand-built job)."""
        self.read_parents = read_parents
        """What ``Job.parent_results`` reads with (``None``: a hand-built job)."""
        self.progress_sink = progress_sink
        """Told of the progress slot when the first report makes it (the client's writer)."""
        self.meta = meta
        """The claimed row's metadata: the base ``Job.update_meta`` checks the size against."""
        self.progress: Any = None
        """The execution's ``drover.progress.ProgressSlot``, made by its first report."""
        self.text: str | None = None
        """The handler's result as JSON text (``None``: none)."""
        self.in_tx = False
        """``Job.complete_tx`` completed the job: a returned value is not stored."""
        self.max_bytes: int | None = None
        """``Config.max_result_bytes`` of the client running the job (None: hand-built)."""


class JobContext:
    """Cancellation signal, optional deadline and a values dict for one execution.

    Thread safety: ``cancel`` may be called from any thread (drover calls it
    from the thread running ``Client.stop``); ``cancelled`` and ``wait``
    may be used from the handler's thread at the same time. ``values`` is a
    plain dict meant to be filled by middleware before the worker runs; it is not
    synchronised.

    A child made with ``with_timeout`` is cancelled when its parent is, or
    when its own deadline passes, whichever comes first; cancelling a child
    never cancels its parent.
    """

    def __init__(
        self,
        *,
        deadline: float | None = None,
        values: dict[str, Any] | None = None,
        lease: Lease | None = None,
        _parent: JobContext | None = None,
        _execution: Execution | None = None,
    ) -> None:
        # The Event a wait() blocks on is made by the first wait(): most
        # handlers never wait, and a context is created for every execution.
        self._event: threading.Event | None = None
        self._is_cancelled = False
        self._lock = threading.Lock()
        self._children: list[JobContext] = []
        self._reason: str | None = None
        self._deadline = deadline
        self._parent = _parent
        self.values: dict[str, Any] = {} if values is None else values
        """Values middleware hands to the worker (shared with child contexts)."""
        if lease is None:
            lease = _parent.lease if _parent is not None else Lease(None, 0)
        self.lease: Lease = lease
        """The execution's fence (shared with child contexts)."""
        if _execution is None:
            _execution = _parent._execution if _parent is not None else Execution()
        self._execution: Execution = _execution
        """The execution's state beside cancellation (shared with child contexts)."""
        # Called once, with the reason, when this context is cancelled (set by
        # the engine for an async job: it cancels the job's task).
        self._on_cancel: Callable[[str], None] | None = None

    @property
    def deadline(self) -> float | None:
        """The ``time.monotonic()`` instant at which this context cancels, if any."""
        return self._deadline

    @property
    def cancelled(self) -> bool:
        """True once cancelled explicitly, through a parent, or by the deadline."""
        if self._is_cancelled:
            return True
        if self._deadline is not None and time.monotonic() >= self._deadline:
            self._cancel("deadline exceeded")
            return True
        return False

    @property
    def reason(self) -> str | None:
        """Why the context was cancelled (``None`` while it is not)."""
        return self._reason if self.cancelled else None

    def remaining(self) -> float | None:
        """Seconds until the deadline (never negative), or ``None`` without one."""
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - time.monotonic())

    def wait(self, timeout: Duration | None = None) -> bool:
        """Block until cancelled or ``timeout`` elapses; return ``cancelled``.

        Use it in place of ``time.sleep`` so shutdown and deadlines interrupt the
        wait. ``None`` waits until cancellation (or the deadline, if any).
        """
        limit = None if timeout is None else max(0.0, to_seconds(timeout, "timeout"))
        remaining = self.remaining()
        if remaining is not None:
            limit = remaining if limit is None else min(limit, remaining)
        with self._lock:
            if self._event is None:
                self._event = threading.Event()
                if self._is_cancelled:
                    self._event.set()
            event = self._event
        event.wait(limit)
        return self.cancelled

    def cancel(self, reason: str = "cancelled") -> None:
        """Cancel this context and every child derived from it. Idempotent."""
        self._cancel(reason)

    def with_timeout(self, timeout: Duration) -> JobContext:
        """Derive a child whose cancellation also fires ``timeout`` from now.

        A ``timeout`` of zero or less means no deadline of its own: the child
        only follows its parent. The child shares ``values``.
        """
        seconds = to_seconds(timeout, "timeout")
        deadline = time.monotonic() + seconds if seconds > 0 else None
        if self._deadline is not None and (deadline is None or self._deadline < deadline):
            deadline = self._deadline
        child = JobContext(deadline=deadline, values=self.values, _parent=self)
        with self._lock:
            self._children.append(child)
            already = self._is_cancelled
        if already:
            child._cancel(self._reason or "cancelled")
        return child

    def _cancel(self, reason: str) -> None:
        with self._lock:
            if self._is_cancelled:
                return
            self._reason = reason
            self._is_cancelled = True
            if self._event is not None:
                self._event.set()
            children = list(self._children)
            hook = self._on_cancel
        for child in children:
            child._cancel(reason)
        if hook is not None:
            hook(reason)

    def _watch(self, hook: Callable[[str], None]) -> None:
        """Call ``hook(reason)`` when this context is cancelled (at once if it is already)."""
        with self._lock:
            self._on_cancel = hook
            already = self._is_cancelled
            reason = self._reason
        if already:
            hook(reason or "cancelled")

    def __repr__(self) -> str:
        state = f"cancelled ({self._reason})" if self._is_cancelled else "active"
        return f"<JobContext {state}>"
