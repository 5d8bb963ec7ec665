"""Wakes the fetcher when another process inserts into one of this client's queues."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from typing import Any

from drover._db.connections import Connection, ConnectionPool
from drover._db.notify import listen_connect, wait_notifications
from drover._runtime.service import ThreadService

__all__ = ["Listener"]

_WAIT = 0.1  # how long one wait may block before the loop checks for stop (no traffic)
_MAX_BACKOFF = 30.0


class Listener(ThreadService):
    """Holds one dedicated LISTEN connection and wakes the fetcher on a matching notification.

    Notifications only shorten the poll sleep; polling remains the source of
    truth, so a lost notification costs at most one poll interval. When the
    connection breaks the listener logs an ERROR, waits (starting at one poll
    interval, doubling up to 30 s) and reconnects, then wakes the fetcher
    once in case it missed something meanwhile. ``listening`` is set while
    LISTEN is active (a NOTIFY sent before that is not delivered).
    """

    kind = "listener"
    intake = True

    def __init__(
        self,
        *,
        pool: ConnectionPool[Any],
        queues: Collection[str],
        wake: Callable[[], None],
        backoff: float,
        client_id: str,
        logger: logging.Logger,
    ) -> None:
        super().__init__(client_id=client_id, logger=logger)
        self._pool = pool
        self._queues = frozenset(queues)
        self._wake_fetcher = wake
        self._initial_backoff = max(0.05, backoff)
        self.listening = threading.Event()
        self.reconnects = 0
        self._conn: Connection | None = None

    def _loop(self) -> None:
        backoff = self._initial_backoff
        first = True
        while not self._stopping.is_set():
            try:
                self._conn = listen_connect(self._pool)
                self.listening.set()
                if not first:
                    self.reconnects += 1
                    self._wake_fetcher()
                first = False
                backoff = self._initial_backoff
                while not self._stopping.is_set():
                    self.run_once()
            except Exception:
                # The connection is gone: say so before backing off, not after.
                self.listening.clear()
                self._close()
                if self._stopping.is_set():
                    break
                self._log.error(
                    "listen for job notifications failed; reconnecting in %ss",
                    backoff,
                    extra={"retry_in": backoff},
                    exc_info=True,
                )
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF)
            finally:
                self.listening.clear()
                self._close()

    def run_once(self) -> int:
        """Wait briefly for notifications; wake the fetcher if one names our queues."""
        conn = self._conn
        if conn is None:
            return 0
        payloads = wait_notifications(conn, _WAIT)
        relevant = sum(1 for p in payloads if p in self._queues)
        if relevant:
            self._wake_fetcher()
        return relevant

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                self._log.debug("closing the listen connection failed", exc_info=True)
