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


class HandBackHold:
    """A session that, once given the ids about to be handed back, keeps them locked.

    ``connect(action, role)`` opens a session outside the pool
    (``Store._session_connect``): closing the client's pool leaves it open.
    ``open`` connects ahead of time (the drain's start), so the deadline pays
    one statement; ``__call__`` (the kernel's ``before_hand_back`` hook) locks
    and returns without committing. Failures are logged, never raised: without
    the lock the jobs are claimable from the hand-back's commit, as for a
    library's ``Client.stop``. Thread-safe.
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
        self.held: list[int] = []
        """The ids locked so far (for logs and tests)."""

    def open(self) -> bool:
        """Connect now, if not yet connected; False (logged) when it cannot."""
        with self._lock:
            return self._open()

    def _open(self) -> bool:
        if self._conn is not None:
            return True
        try:
            self._conn = self._connect("connect to hold handed-back jobs", "shutdown")
        except DroverError as exc:
            self._log.warning(
                "could not open a session to keep handed-back jobs from other workers until "
                "this process exits (%s); they are claimable from the hand-back",
                exc,
                extra={"event": "hand_back_hold_failed"},
            )
            return False
        return True

    def __call__(self, ids: list[int]) -> None:
        """Lock ``ids`` ``FOR KEY SHARE`` in a transaction left open."""
        if not ids:
            return
        with self._lock:
            if not self._open():
                return
            conn = self._conn
            assert conn is not None
            try:
                with translate("lock the jobs about to be handed back"):
                    if conn.autocommit:
                        conn.autocommit = False  # the transaction stays open from here on
                    conn.execute("SET LOCAL lock_timeout = '2s'")
                    conn.execute(query("job_hold_handed_back", self._ns), {"ids": ids})
            except DroverError as exc:
                self._log.warning(
                    "could not keep jobs %s from other workers until this process exits (%s); "
                    "they are claimable from the hand-back",
                    ", ".join(map(str, ids)),
                    exc,
                    extra={"event": "hand_back_hold_failed", "jobs": ids},
                )
                self._close()
                return
            self.held.extend(ids)

    def close(self) -> None:
        """End the session (and its locks); the process's exit does the same."""
        with self._lock:
            self._close()

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()
