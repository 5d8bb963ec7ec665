"""Wakes the fetcher when another process inserts into one of this client's queues."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

from drover._db.notify import CANCEL_CHANNEL, Listening, kind_payload
from drover._kernel.service import ThreadService
from drover._runtime.wiring import Wiring

__all__ = ["Listener"]

_WAIT = 0.1  # how long one wait may block before the loop checks for stop (no traffic)
_FIRST_RETRY = 0.1
_MAX_RETRY = 5.0
_PING_EVERY = 5.0
_PING_DEADLINE = 5.0


class Listener(ThreadService):
    """Holds one dedicated LISTEN connection and wakes the fetcher on a matching notification.

    Notifications only shorten the poll sleep; polling remains the source of
    truth, so a lost notification costs at most one poll interval.

    When the connection breaks (the backend was terminated, the server
    restarted, the network cut it) the listener reconnects after a short
    back-off (0.1 s, doubling to 5 s with jitter, independent of the poll
    interval), issues LISTEN again and then wakes the fetcher once, because
    notifications sent while it was away are lost. A connection that goes
    quiet is checked every ``ping_every`` seconds with a round trip that must
    answer within ``ping_deadline``; a half-open connection, which never
    fails on its own, is broken by that deadline and replaced. The first
    failure of a run is logged at ERROR with its traceback, later consecutive
    ones at WARNING, and the recovery at INFO, so an outage logs a bounded
    number of lines. ``listening`` is set while LISTEN is active (a NOTIFY
    sent before that is not delivered); ``reconnects`` counts recoveries.
    ``on_listening`` runs after every LISTEN, first and later ones: the
    catch-up of what was announced before it (an operator's cancel of a held
    job, ADR 0030).
    """

    name = "listener"
    intake = True

    def __init__(
        self,
        wiring: Wiring,
        *,
        wake: Callable[[], None],
        on_cancel: Callable[[str], object] | None = None,
        on_listening: Callable[[], object] | None = None,
        first_retry: float | None = None,
        max_retry: float | None = None,
        ping_every: float | None = None,
        ping_deadline: float | None = None,
    ) -> None:
        super().__init__(client_id=wiring.client_id, logger=wiring.log)
        self._store = wiring.store
        # What wakes the fetcher: a queue it claims from, or a kind it runs
        # whose concurrency limit freed capacity (a kind limit spans queues).
        self._queues = frozenset(wiring.config.queues) | frozenset(
            kind_payload(k) for k in wiring.config.workers.kinds()
        )
        self._wake_fetcher = wake
        self._on_cancel = on_cancel
        self._on_listening = on_listening
        # The module constants are read here, not bound as defaults, so a test
        # can shorten them for the clients it builds.
        self._first_retry = _FIRST_RETRY if first_retry is None else first_retry
        self._max_retry = max(self._first_retry, _MAX_RETRY if max_retry is None else max_retry)
        self._ping_every = _PING_EVERY if ping_every is None else ping_every
        self._ping_deadline = _PING_DEADLINE if ping_deadline is None else ping_deadline
        self._on_reconnect = wiring.metrics.listener_reconnected
        self.listening = threading.Event()
        self.reconnects = 0
        self._conn: Listening | None = None
        self._quiet_since = time.monotonic()

    def _loop(self) -> None:
        retry = self._first_retry
        failures = 0
        first = True
        while not self._stopping.is_set():
            try:
                self._conn = self._store.listen(cancels=self._on_cancel is not None)
                self._quiet_since = time.monotonic()
                self.listening.set()
                if not first:
                    self.reconnects += 1
                    self._on_reconnect()
                    self._log.info(
                        "listening for job notifications again after %d failed attempt(s)",
                        failures,
                        extra={"attempts": failures},
                    )
                    # Whatever was notified while we were away is lost: look once.
                    self._wake_fetcher()
                first = False
                failures = 0
                retry = self._first_retry
                self._ok()
                if self._on_listening is not None:
                    # What was announced before this LISTEN (at start, or while
                    # away) is read once, now that nothing more can be missed.
                    self._on_listening()
                while not self._stopping.is_set():
                    self.run_once()
            except Exception as exc:
                # The connection is gone: say so before backing off, not after.
                self.listening.clear()
                self._close()
                if self._stopping.is_set():
                    break
                first = False
                failures += 1
                delay = retry * random.uniform(0.8, 1.2)  # noqa: S311 - jitter, not a secret
                if self._failed(exc):
                    pass  # transient: logged once per episode by ``trouble``
                elif failures == 1:
                    self._log.error(
                        "listen for job notifications failed; reconnecting in %.2fs",
                        delay,
                        extra={"retry_in": delay},
                        exc_info=True,
                    )
                else:
                    self._log.warning(
                        "listen for job notifications: attempt %d failed (%s); "
                        "reconnecting in %.2fs",
                        failures,
                        exc,
                        delay,
                        extra={"retry_in": delay, "attempts": failures},
                    )
                self._pause(delay)
                retry = min(retry * 2, self._max_retry)
            finally:
                self.listening.clear()
                self._close()

    def run_once(self) -> int:
        """Wait briefly for notifications; wake the fetcher if one names our queues.

        The payload ``*`` (a limit changed) names every queue; a kind's payload
        (``drover._db.notify.kind_payload``: a job of a kind this client runs
        freed capacity of a concurrency limit) names them too. A notification
        on ``drover_cancel`` (an operator cancelled a running job, ADR 0030)
        goes to ``on_cancel``.

        After ``ping_every`` seconds without a notification, check the
        connection with a bounded round trip (raises if it is broken).
        """
        conn = self._conn
        if conn is None:
            return 0
        received = conn.wait_channels(_WAIT)
        now = time.monotonic()
        if received:
            self._quiet_since = now
        elif now - self._quiet_since >= self._ping_every:
            conn.ping(self._ping_deadline)
            self._quiet_since = time.monotonic()
        payloads = []
        for channel, payload in received:
            if channel == CANCEL_CHANNEL:
                if self._on_cancel is not None:
                    self._on_cancel(payload)
            else:
                payloads.append(payload)
        relevant = sum(1 for p in payloads if p in self._queues or p == "*")
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
