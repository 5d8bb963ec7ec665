"""Waits for jobs to end on behalf of ``Client.result``: one LISTEN connection per client."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterable
from typing import Any

from drover._db.notify import Listening
from drover._db.results import StoredResult
from drover._db.store import Store
from drover._durations import Duration, to_seconds
from drover._kernel.service import ThreadService
from drover.errors import InvalidArgument, JobCancelled, JobFailed, NotFound, ResultTimeout
from drover.job import TERMINAL_STATES, JobRow, JobState, check_job_id
from drover.results import decode_result

__all__ = [
    "FIRST_RETRY",
    "LISTEN_GRACE",
    "Awaiter",
    "awaited",
    "ended",
    "listen_failed",
    "next_look",
]

_TERMINAL = frozenset(s.value for s in TERMINAL_STATES)
_WAIT = 0.2  # one LISTEN wait, so a stop is noticed
FIRST_RETRY = 0.1
_MAX_RETRY = 5.0
LISTEN_GRACE = 1.0  # how long a first waiter waits for the LISTEN before polling alone


def next_look(
    job_id: int,
    found: StoredResult | None,
    deadline: float | None,
    timeout: float | None,
    *,
    listening: bool,
    poll: float,
) -> StoredResult | float:
    """A waiter's decision after reading its job: the result, when the job has ended, else
    how long to wait for a notification before reading it again (``poll`` while the
    listener runs, a quarter second at most without one, never past ``deadline``, a
    ``time.monotonic()`` reading). Shared by ``Client.result`` and ``AsyncClient.result``.

    Raises ``drover.NotFound`` (no such job) and ``drover.ResultTimeout`` (past ``deadline``).
    """
    if found is None:
        raise NotFound(f"no job with id {job_id}")
    if found.state in _TERMINAL:
        return found
    pause = poll if listening else min(poll, 0.25)
    if deadline is not None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ResultTimeout(job_id, found.state, timeout or 0.0)
        pause = min(pause, remaining)
    return pause


def awaited(job: JobRow | int, timeout: Duration | None) -> tuple[int, float | None]:
    """``result``'s arguments checked: the job's id and the timeout in seconds (``None``: none).

    Raises ``drover.InvalidArgument`` for a bad id or a negative timeout.
    """
    job_id = job.id if isinstance(job, JobRow) else check_job_id(job)
    seconds = None if timeout is None else to_seconds(timeout, "timeout")
    if seconds is not None and seconds < 0:
        raise InvalidArgument(f"timeout must not be negative, not {timeout!r}")
    return job_id, seconds


def ended(found: StoredResult, job_id: int, as_type: type[Any] | None) -> Any:
    """What ``result`` returns for an ended job: its decoded result, or the error its end is.

    Raises ``drover.JobCancelled`` (ended cancelled), ``drover.JobFailed`` (dead) and
    ``drover.InvalidResult`` (the result does not validate as ``as_type``).
    """
    if found.state == JobState.CANCELLED.value:
        raise JobCancelled(job_id, found.state, found.error)
    if found.state != JobState.COMPLETED.value:
        raise JobFailed(job_id, found.state, found.error)
    return decode_result(found.result, as_type, job_id)


def listen_failed(
    log: logging.Logger, exc: BaseException, failures: int, retry: float
) -> tuple[float, float]:
    """Log a failed LISTEN for results (ERROR with the traceback the first time in a row,
    WARNING after); the jittered wait before reconnecting, and the next retry (doubled,
    capped). Shared by ``Awaiter`` and ``AsyncAwaiter``."""
    delay = retry * random.uniform(0.8, 1.2)  # noqa: S311 - jitter, not a secret
    log.log(
        logging.ERROR if failures == 1 else logging.WARNING,
        "listen for job results failed (%s); waiters poll meanwhile, reconnecting in %.2fs",
        exc,
        delay,
        extra={"retry_in": delay, "attempts": failures},
        exc_info=exc if failures == 1 else None,
    )
    return delay, min(retry * 2, _MAX_RETRY)


class Awaiter(ThreadService):
    """Tells waiting callers when the jobs they wait for reach a terminal state.

    Started by the first ``Client.result``; one thread and one dedicated
    connection listening on ``drover_done``, shared by every waiter of the
    client. A waiter flags its job (``awaited``), so the statement that
    writes the job's terminal state notifies; the payload is the job id. A
    notification only wakes the waiter early: each waiter reads the job's
    state again at least every ``poll`` seconds, so a lost notification (a
    broken connection, a terminal state written by something that does not
    notify) costs at most that. While the connection is down the waiters
    poll; after a reconnect every waiter looks once. Behind a transaction
    pooler with no ``Config.session_url`` nothing listens and no thread
    starts: waiters poll every quarter second (ADR 0040).
    """

    name = "awaiter"

    def __init__(
        self, store: Store, *, client_id: str, logger: logging.Logger, poll: float = 1.0
    ) -> None:
        super().__init__(client_id=client_id, logger=logger)
        self._store = store
        self._poll = poll
        self._waiters: dict[int, list[threading.Event]] = {}
        self._waiters_lock = threading.Lock()
        self._conn: Listening | None = None
        self._listens: bool | None = None
        self.listening = threading.Event()

    def wait(self, job_id: int, timeout: float | None) -> StoredResult:
        """Block until job ``job_id`` is terminal; return its state, result and last error.

        ``timeout`` in seconds (``None``: no limit). Safe from any number of
        threads at once. Raises ``drover.NotFound`` for a job that does not
        exist (or was deleted meanwhile) and ``drover.ResultTimeout`` when
        the time runs out; the job itself is never changed, beyond its
        ``awaited`` flag.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        # Behind a transaction pooler with no session_url there is no session
        # to LISTEN on (ADR 0040): the waiters poll, and no thread starts.
        if self._listens is None:
            self._listens = self._store.has_sessions()
        if self._listens:
            self.start()
        if self._listens and not self.listening.is_set():
            self.listening.wait(LISTEN_GRACE if timeout is None else min(LISTEN_GRACE, timeout))
        event = threading.Event()
        with self._waiters_lock:
            self._waiters.setdefault(job_id, []).append(event)
        try:
            self._store.operator.mark_awaited(job_id)
            while True:
                found = self._store.operator.job_result(job_id)
                step = next_look(
                    job_id, found, deadline, timeout, listening=self.listening.is_set(),
                    poll=self._poll,
                )  # fmt: skip
                if isinstance(step, StoredResult):
                    return step
                event.wait(step)
                event.clear()
        finally:
            with self._waiters_lock:
                events = self._waiters.get(job_id, [])
                if event in events:
                    events.remove(event)
                if not events:
                    self._waiters.pop(job_id, None)

    def _wake(self) -> None:
        self._wake_all()

    def _wake_all(self) -> None:
        with self._waiters_lock:
            events = [e for waiting in self._waiters.values() for e in waiting]
        for event in events:
            event.set()

    def _notify(self, payloads: Iterable[str]) -> int:
        woken = 0
        with self._waiters_lock:
            for payload in payloads:
                try:
                    job_id = int(payload)
                except ValueError:
                    continue
                for event in self._waiters.get(job_id, ()):
                    event.set()
                    woken += 1
        return woken

    def run_once(self) -> int:
        """Wait briefly for notifications; wake the waiters of the jobs named. Returns how many."""
        conn = self._conn
        if conn is None:
            return 0
        return self._notify(conn.wait(_WAIT))

    def _loop(self) -> None:
        retry = FIRST_RETRY
        failures = 0
        while not self._stopping.is_set():
            try:
                self._conn = self._store.listen_done()
                self.listening.set()
                if failures:
                    self._log.info("listening for job results again")
                    self._wake_all()  # what was notified meanwhile is lost: look once
                failures = 0
                retry = FIRST_RETRY
                while not self._stopping.is_set():
                    self.run_once()
            except Exception as exc:
                self.listening.clear()
                self._close()
                if self._stopping.is_set():
                    break
                failures += 1
                delay, retry = listen_failed(self._log, exc, failures, retry)
                self._stopping.wait(delay)
            finally:
                self.listening.clear()
                self._close()

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # closing a broken connection: nothing to save
                self._log.debug("closing the results connection failed", exc_info=True)
