"""Jobs handed back at shutdown kept from other workers until this process ends (ADR 0053).

``drover worker`` ends its process once the drain budget ran out and the
unfinished jobs were handed back: a handler that ignores cancellation cannot
be stopped any other way. Between the hand-back's commit and the process's
end, another worker could claim a handed-back job while the old thread still
runs it. ``HandBackHold`` closes that window: just before the hand-back it
locks the jobs' rows ``FOR KEY SHARE`` on a session of its own, in a
transaction it never ends. The hand-back's UPDATE is compatible with that
lock and every claim skips rows locked so (``FOR UPDATE SKIP LOCKED``), so the
jobs become claimable when the session ends: when the process exits.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg

from drover._db.errors import translate
from drover._db.namespace import DEFAULT, Namespace
from drover._db.queries import query
from drover.errors import DroverError

__all__ = ["HandBackHold"]


_CONNECT_WAIT = 2.0
"""How long the hand-back waits for the hold's connection before it goes on unheld."""


class HandBackHold:
    """A session that, once given the ids about to be handed back, keeps them locked.

    ``connect(action, role)`` opens a session outside the pool
    (``Store._session_connect``): closing the client's pool leaves it open.
    ``open`` starts connecting on a thread of its own (at the drain's start,
    so the deadline pays one statement, and an unreachable server never
    delays the drain); ``__call__`` (the kernel's ``before_hand_back`` hook)
    waits at most ``_CONNECT_WAIT`` seconds for that connection, locks the
    rows and returns without committing. Failures are logged, never raised:
    without the lock the jobs are claimable from the hand-back's commit, as
    for a library's ``Client.stop``. Thread-safe.
    """

    def __init__(
        self,
        connect: Callable[[str, str], psycopg.Connection[Any]],
        logger: logging.Logger,
        ns: Namespace = DEFAULT,
    ) -> None:
        self._connect = connect
        self._log = logger
        self._ns = ns
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self._opener: threading.Thread | None = None
        self._opened = threading.Event()
        self._closed = False
        self.held: list[int] = []
        """The ids locked so far (for logs and tests)."""

    def open(self) -> None:
        """Start connecting, unless already started; returns at once."""
        with self._lock:
            if self._opener is not None or self._closed:
                return
            self._opener = threading.Thread(
                target=self._open, name="drover-hand-back-hold", daemon=True
            )
            self._opener.start()

    def ready(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the connection; True once it is open."""
        self._opened.wait(timeout)
        return self._conn is not None

    def _open(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        try:
            conn = self._connect("connect to hold handed-back jobs", "shutdown")
        except Exception as exc:  # any failure: the hand-back goes on unheld
            self._failed(f"no session to hold them ({exc})", [])
        with self._lock:
            if conn is not None and not self._closed:
                self._conn, conn = conn, None
        self._opened.set()
        if conn is not None:
            conn.close()

    def _failed(self, why: str, ids: list[int]) -> None:
        self._log.warning(
            "could not keep %s from other workers until this process exits: %s; they are "
            "claimable from the hand-back",
            "jobs " + ", ".join(map(str, ids)) if ids else "handed-back jobs",
            why,
            extra={"event": "hand_back_hold_failed", "jobs": ids},
        )

    def __call__(self, ids: list[int]) -> None:
        """Lock ``ids`` ``FOR KEY SHARE`` in a transaction left open."""
        if not ids:
            return
        self.open()
        if not self._opened.wait(_CONNECT_WAIT):
            self._failed(f"not connected within {_CONNECT_WAIT:g}s", ids)
            return
        with self._lock:
            conn = self._conn
            if conn is None:
                self._failed("no session", ids)
                return
            try:
                with translate("lock the jobs about to be handed back"):
                    if conn.autocommit:
                        conn.autocommit = False  # the transaction stays open from here on
                    # A server's idle_in_transaction_session_timeout must not end
                    # the hold before the process does.
                    conn.execute(
                        "SET LOCAL lock_timeout = '2s'; "
                        "SET LOCAL idle_in_transaction_session_timeout = 0"
                    )
                    conn.execute(query("job_hold_handed_back", self._ns), {"ids": ids})
            except DroverError as exc:
                self._failed(str(exc), ids)
                self._close()
                return
            self.held.extend(ids)

    def close(self) -> None:
        """End the session (and its locks); the process's exit does the same."""
        with self._lock:
            self._closed = True
            self._close()

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()
