"""Single-row inserts that share a round trip when several threads insert at once."""

from __future__ import annotations

import copy
import threading

from drover._db.insert import duplicate_error
from drover._db.store import Store
from drover._records import JobInsertParams
from drover.errors import DatabaseError, DuplicateJob
from drover.job import JobRow

__all__ = ["Combiner"]


class _Request:
    __slots__ = ("error", "gate", "group", "params", "row")

    def __init__(self, params: JobInsertParams) -> None:
        self.params = params
        self.row: JobRow | None = None
        self.error: BaseException | None = None
        # A held lock the caller blocks on until a leader releases it; made
        # only for a caller that has to wait. A bare lock, not an Event: it
        # is several times cheaper to make, wait on and release.
        self.gate: threading.Lock | None = None
        # Set when this caller is to lead: the requests it runs, itself first.
        self.group: list[_Request] | None = None

    def outcome(self) -> JobRow:
        if self.error is not None:
            raise self.error
        assert self.row is not None
        return self.row


class Combiner:
    """Runs ``Client.insert`` calls, combining the ones that arrive together.

    A caller that finds fewer than ``max_in_flight`` (2) inserts in flight
    runs its own, exactly as a lone insert (one statement, autocommit).
    Callers that arrive while all are busy queue up; when one finishes, the
    first of them runs the whole queue as one statement in one transaction
    (``job_insert_rows``) and hands the rows out. So under concurrency the
    database sees a handful of round trips and commits where it would have
    seen one per job, and every caller still returns only after its own job
    has committed.

    What sharing means for a caller: its job commits in the same transaction
    as the others of its group (same ``created_at``); a unique-key collision
    fails only the caller whose key collided (the earlier of two equal keys
    in one group wins); a database failure fails every caller in the group,
    each with its own copy of the error. A caller waits at most for the
    insert in flight plus its own group's; there is no timer and no thread.
    """

    def __init__(self, store: Store, max_in_flight: int = 2) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._queue: list[_Request] = []
        self._max_in_flight = max_in_flight
        self._in_flight = 0
        self.groups = 0  # statements that carried more than one job, for tests

    def insert(self, params: JobInsertParams) -> JobRow:
        """Insert one job; returns its row once committed, or raises its error."""
        request = _Request(params)
        with self._lock:
            if self._in_flight < self._max_in_flight:
                # Lead now. Nobody can be waiting: callers queue only while
                # every slot is taken, and a leader that finds the queue
                # non-empty hands it over instead of giving its slot back.
                self._in_flight += 1
                request.group = [request]
            else:
                # Made under the lock, so the leader that will serve or
                # promote this request always finds the gate to open.
                request.gate = threading.Lock()
                request.gate.acquire()
                self._queue.append(request)
        if request.group is None:
            assert request.gate is not None
            try:
                request.gate.acquire()  # until served, or promoted to lead
            except BaseException:
                # Interrupted (KeyboardInterrupt in the main thread). Still
                # queued: leave, nothing was inserted. Already taken into a
                # group: see it through first, so that if we were handed a
                # group to lead, its callers are not left waiting forever.
                if self._withdraw(request):
                    raise
                request.gate.acquire()
                if request.group is not None:
                    self._lead(request.group)
                raise
        if request.group is not None:
            self._lead(request.group)
        return request.outcome()

    def _withdraw(self, request: _Request) -> bool:
        with self._lock:
            if request in self._queue:
                self._queue.remove(request)
                return True
            return False

    def _lead(self, group: list[_Request]) -> None:
        leader = group[0]
        try:
            self._run(group)
        except BaseException as exc:
            # Not re-raised here: every caller, this one included, raises its
            # outcome on its own thread.
            for request in group:
                if request.row is None and request.error is None:
                    request.error = exc if request is leader else _for_waiter(exc)
        finally:
            for request in group[1:]:
                assert request.gate is not None
                request.gate.release()
            with self._lock:
                if self._queue:
                    # Hand the callers that queued meanwhile, as one group, to
                    # the first of them. Taken out of the queue here, so no
                    # other leader can serve or promote them as well.
                    successor = self._queue[0]
                    successor.group, self._queue = self._queue, []
                    assert successor.gate is not None
                    successor.gate.release()
                else:
                    self._in_flight -= 1

    def _run(self, group: list[_Request]) -> None:
        if len(group) == 1:
            request = group[0]
            try:
                request.row = self._store.insert(request.params, notify=False)
            except DuplicateJob as exc:
                request.error = exc
            return
        rows = self._store.insert_rows([r.params for r in group])
        self.groups += 1
        for request, row in zip(group, rows, strict=True):
            if row is None:
                request.error = duplicate_error(request.params)
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
