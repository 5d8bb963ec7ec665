"""The one contract every background loop follows."""

from __future__ import annotations

import abc
import logging
import threading
from collections.abc import Callable

from drover._kernel.outage import Backoff, Trouble

__all__ = ["IntervalService", "ThreadService"]

# After a transient failure an interval service tries again in 1 s, doubling,
# and never later than its own interval.
_RETRY = Backoff(1.0, 3600.0)


class ThreadService(abc.ABC):
    """One named daemon thread, a stop event it sleeps on, and a join on stop.

    ``start`` and ``stop`` are idempotent; ``stop`` tolerates a service that was
    never started. Subclasses implement ``_loop``, which must return soon
    after ``self._stopping`` is set, and must never let an exception escape.
    If one does (or the loop returns before it was asked to stop), the base
    class logs it at CRITICAL, records it in ``died`` and calls the
    ``on_death`` hook, so the client can report it (``/readyz``, a metric)
    instead of running on without the loop.
    """

    name: str = "service"
    """The service's name: in its thread's name, logs, ``/readyz`` and
    ``drover_service_deaths_total{service}``."""
    intake: bool = False
    """True for services that bring work in (the fetcher, the listener): the
    engine stops them before it drains, the others after."""

    def __init__(self, *, client_id: str, logger: logging.Logger) -> None:
        self._client_id = client_id
        self._log = logger
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.died: str | None = None
        """Why the loop ended on its own (an exception's description), else None."""
        self.on_death: Callable[[str], None] | None = None
        """Called once with the service's name, on the dying thread, after ``died`` is set."""
        self._retry = threading.Event()
        self.trouble: Trouble | None = None
        """Where the loop reports its database calls' ends (the engine sets it): transient
        failures are logged there once per episode and make the client not ready."""

    def retry_now(self) -> None:
        """Cut a backoff after a failure short (another loop just reached the database)."""
        self._retry.set()

    def _pause(self, delay: float) -> None:
        """Wait ``delay`` seconds, or less when stopped or told to retry now."""
        self._retry.wait(delay)
        if not self._stopping.is_set():  # once stopped, every later pause is cut short too
            self._retry.clear()

    def _failed(self, exc: BaseException) -> bool:
        """Report a failure to ``trouble``; True when it was transient (and is logged there)."""
        trouble = self.trouble
        return trouble is not None and trouble.failed(self.name, exc)

    def _ok(self) -> None:
        trouble = self.trouble
        if trouble is not None:
            trouble.ok(self.name)

    @property
    def thread_name(self) -> str:
        return f"drover-{self.name}-{self._client_id}"

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the thread; a no-op if it was started before or ``stop`` was called."""
        with self._lock:
            if self._thread is not None or self._stopping.is_set():
                return
            self._thread = threading.Thread(target=self._main, name=self.thread_name, daemon=True)
            self._thread.start()

    def join_timeout(self, budget: float | None) -> float | None:
        """How long the engine waits for this thread at stop, given the drain budget."""
        return 10.0

    def stop(self, timeout: float | None = 10.0) -> bool:
        """Ask the loop to stop and wait up to ``timeout`` seconds; True once it ended."""
        self._stopping.set()
        self._retry.set()
        self._wake()
        with self._lock:
            # Read under start()'s lock: a start() racing this stop either
            # finished (and is joined here) or sees the stop and starts nothing.
            thread = self._thread
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(timeout)
        if thread.is_alive():
            self._log.warning(
                "background thread %s did not stop within %ss",
                thread.name,
                timeout,
                extra={"thread_name": thread.name, "timeout": timeout},
            )
            return False
        return True

    def _wake(self) -> None:  # noqa: B027 - optional hook, most loops wait on the stop event
        """Interrupt whatever the loop is blocked on (the stop event wakes waits)."""

    def _main(self) -> None:
        try:
            self._loop()
        except BaseException as exc:
            self._log.critical(
                "background thread %s died; its service (%s) no longer runs",
                self.thread_name,
                self.name,
                extra={"thread_name": self.thread_name, "service": self.name},
                exc_info=True,
            )
            self._died(f"{type(exc).__qualname__}: {exc}" if str(exc) else type(exc).__qualname__)
        else:
            if not self._stopping.is_set():
                self._log.critical(
                    "background thread %s ended before it was stopped; "
                    "its service (%s) no longer runs",
                    self.thread_name,
                    self.name,
                    extra={"thread_name": self.thread_name, "service": self.name},
                )
                self._died("its loop returned before stop")

    def _died(self, reason: str) -> None:
        self.died = reason
        hook = self.on_death
        if hook is not None:
            try:
                hook(self.name)
            except Exception:
                self._log.exception("reporting the death of %s failed", self.thread_name)

    @abc.abstractmethod
    def _loop(self) -> None: ...


class IntervalService(ThreadService):
    """Runs ``run_once`` every ``interval`` seconds until stopped.

    An exception from ``run_once`` is logged and the next interval tries again:
    a transient database failure (no connection, the server's statement or
    lock timeout) once per episode through ``trouble``, anything else every
    time at ``failure_level``. After a transient failure the next try
    comes sooner than the interval (1 s, doubling, at most the interval), so
    the loop (and readiness) notices a recovery quickly; never more than once
    a second, so an outage does not turn it into a busy loop.
    """

    action: str = "run"
    failure_level: int = logging.ERROR

    def __init__(self, *, interval: float, client_id: str, logger: logging.Logger) -> None:
        super().__init__(client_id=client_id, logger=logger)
        self._interval = interval

    def _loop(self) -> None:
        delay, failures = self._interval, 0
        while True:
            self._pause(delay)
            if self._stopping.is_set():
                break
            try:
                self.run_once()
            except Exception as exc:
                if self._failed(exc):
                    # Sooner than the interval (a stats refresh waits 15 s), so readiness returns
                    # soon after the database does; never busier than once a second, doubling.
                    failures += 1
                    delay = min(self._interval, _RETRY.delay(failures))
                    continue
                delay = self._interval
                self._log.log(
                    self.failure_level,
                    "%s failed; trying again in %ss",
                    self.action,
                    self._interval,
                    extra={"thread_name": self.thread_name, "action": self.action},
                    exc_info=True,
                )
            else:
                delay, failures = self._interval, 0
                self._ok()

    @abc.abstractmethod
    def run_once(self) -> object:
        """One unit of work; returns a small result for tests."""
