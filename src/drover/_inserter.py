"""Single-row inserts that share a round trip when several threads insert at once."""

from __future__ import annotations

import copy
import threading
from typing import Any

from drover._db import store
from drover._db.connections import ConnectionPool, borrow
from drover._db.store import JobInsertParams
from drover.errors import DatabaseError, DuplicateJob
from drover.job import JobRow

__all__ = ["Combiner"]


class _Request:
    __slots__ = ("error", "event", "lead", "params", "row")

    def __init__(self, params: JobInsertParams) -> None:
        self.params = params
        self.row: JobRow | None = None
        self.error: BaseException | None = None
        # Created only for a caller that has to wait (see Combiner.insert).
        self.event: threading.Event | None = None
        self.lead = False

    def outcome(self) -> JobRow:
        if self.error is not None:
            raise self.error
        assert self.row is not None
        return self.row


class Combiner:
    """Runs ``Client.insert`` calls, combining the ones that arrive together.

    A caller that finds no insert in flight runs its own, exactly as a lone
    insert (one statement, autocommit). Callers that arrive while one is in
    flight queue up; when it finishes, the first of them runs the whole queue
    as one statement in one transaction (``job_insert_rows``) and hands the
    rows out. So under concurrency the database sees a handful of round
    trips and commits where it would have seen one per job, and every caller
    still returns only after its own job has committed.

    What sharing means for a caller: its job commits in the same transaction
    as the others of its group (same ``created_at``); a unique-key collision
    fails only the caller whose key collided (the earlier of two equal keys
    in one group wins); a database failure fails every caller in the group,
    each with its own copy of the error. A caller waits at most for the
    insert in flight plus its own group's; there is no timer and no thread.
    """

    def __init__(
        self,
        pool: ConnectionPool[Any],
        max_in_flight: int = 2,
    ) -> None:
        self._pool = pool
        self._lock = threading.Lock()
        self._queue: list[_Request] = []
        self._max_in_flight = max_in_flight
        self._in_flight = 0
        self.groups = 0  # statements that carried more than one job, for tests

    def insert(self, params: JobInsertParams) -> JobRow:
        """Insert one job; returns its row once committed, or raises its error."""
        request = _Request(params)
        with self._lock:
            self._queue.append(request)
            if self._in_flight >= self._max_in_flight:
                # Created under the lock, so the leader that will serve this
                # request always finds the event to set.
                request.event = threading.Event()
            else:
                self._in_flight += 1
                request.lead = True
        if not request.lead:
            assert request.event is not None
            request.event.wait()
        if request.lead:
            self._lead()
        return request.outcome()

    def _lead(self) -> None:
        with self._lock:
            group, self._queue = self._queue, []
        try:
            self._run(group)
        except BaseException as exc:
            # Not re-raised here: every caller, this one included, raises its
            # outcome on its own thread.
            for request in group:
                if request.row is None and request.error is None:
                    request.error = exc if request.lead else _for_waiter(exc)
        finally:
            for request in group:
                if not request.lead:
                    assert request.event is not None
                    request.event.set()
            with self._lock:
                if self._queue:
                    # Hand over to the first caller that queued meanwhile; it
                    # waits on its event like the others.
                    successor = self._queue[0]
                    successor.lead = True
                    assert successor.event is not None
                    successor.event.set()
                else:
                    self._in_flight -= 1

    def _run(self, group: list[_Request]) -> None:
        with borrow(self._pool, "insert job") as conn:
            if len(group) == 1:
                request = group[0]
                try:
                    request.row = store.job_insert(conn, request.params, notify=False)
                except DuplicateJob as exc:
                    request.error = exc
                return
            rows = store.job_insert_rows(conn, [r.params for r in group])
        self.groups += 1
        for request, row in zip(group, rows, strict=True):
            if row is None:
                request.error = store.duplicate_error(request.params)
            else:
                request.row = row


def _for_waiter(exc: BaseException) -> BaseException:
    # Each waiting caller raises its own instance: one exception object raised
    # in several threads would collect all their tracebacks.
    if not isinstance(exc, Exception):
        # KeyboardInterrupt and the like belong to the leader's thread only.
        clone: BaseException = DatabaseError(
            f"insert job: interrupted ({type(exc).__name__}) in the thread that was inserting "
            "this job together with others; it may or may not have been committed"
        )
        clone.__cause__ = exc
        return clone
    try:
        clone = copy.copy(exc)
    except Exception:
        clone = DatabaseError(str(exc))
    clone.__cause__ = exc.__cause__
    return clone
