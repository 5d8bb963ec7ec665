"""The one contract every background loop follows."""

from __future__ import annotations

import abc
import logging
import threading

__all__ = ["PeriodicService", "ThreadService"]


class ThreadService(abc.ABC):
    """One named daemon thread, a stop event it sleeps on, and a join on stop.

    ``start`` and ``stop`` are idempotent; ``stop`` tolerates a service that was
    never started. Subclasses implement :meth:`_loop`, which must return soon
    after ``self._stopping`` is set, and must never let an exception escape: the
    base class logs one that does and the thread ends, which ``alive`` reports.
    """

    kind: str = "service"

    def __init__(self, *, client_id: str, logger: logging.Logger) -> None:
        self._client_id = client_id
        self._log = logger
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def thread_name(self) -> str:
        return f"drover-{self.kind}-{self._client_id}"

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the thread; a no-op if it was started before or :meth:`stop` was called."""
        with self._lock:
            if self._thread is not None or self._stopping.is_set():
                return
            self._thread = threading.Thread(target=self._main, name=self.thread_name, daemon=True)
            self._thread.start()

    def stop(self, timeout: float | None = 10.0) -> bool:
        """Ask the loop to stop and wait up to ``timeout`` seconds; True once it ended."""
        self._stopping.set()
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
                "drover: background thread did not stop in time",
                extra={"thread_name": thread.name, "timeout": timeout},
            )
            return False
        return True

    def _wake(self) -> None:  # noqa: B027 - optional hook, most loops wait on the stop event
        """Interrupt whatever the loop is blocked on (the stop event wakes waits)."""

    def _main(self) -> None:
        try:
            self._loop()
        except BaseException:
            self._log.critical(
                "drover: background thread died",
                extra={"thread_name": self.thread_name},
                exc_info=True,
            )

    @abc.abstractmethod
    def _loop(self) -> None: ...


class PeriodicService(ThreadService):
    """Runs :meth:`run_once` every ``interval`` seconds until stopped.

    An exception from ``run_once`` is logged and the next interval tries again.
    """

    action: str = "run"
    failure_level: int = logging.ERROR

    def __init__(self, *, interval: float, client_id: str, logger: logging.Logger) -> None:
        super().__init__(client_id=client_id, logger=logger)
        self._interval = interval

    def _loop(self) -> None:
        while not self._stopping.wait(self._interval):
            try:
                self.run_once()
            except Exception:
                self._log.log(
                    self.failure_level,
                    f"drover: {self.action} failed; trying again next interval",
                    extra={"thread_name": self.thread_name, "action": self.action},
                    exc_info=True,
                )

    @abc.abstractmethod
    def run_once(self) -> object:
        """One unit of work; returns a small result for tests."""
