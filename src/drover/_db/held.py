"""A pool connection that one busy loop keeps between its rounds.

The fetcher and the completer each make a round trip every few jobs while the
queue drains. Borrowing from the pool for every round (checkout, the pool's
state checks, the commit on return) cost about as much client CPU as the
round trip's own query handling, so each keeps its connection while it stays
busy and gives it back as soon as it goes idle, fails, or has held it for a
while (so the pool's ``max_lifetime`` and health checks still see it).
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any

from drover._db.connections import Connection, ConnectionPool, borrow_connection
from drover._db.errors import translate

__all__ = ["HeldConnection"]

# Long enough to cover a drain's rounds, short enough that the pool recycles
# the connection on its usual schedule.
_MAX_HOLD = 30.0


class HeldConnection:
    """``with held as conn:`` yields the connection kept from the last round, or a new one.

    Not thread-safe: one loop thread owns it. Leaving the block with an
    exception gives the connection back to the pool, which rolls back or
    discards it; :meth:`release` gives it back when the loop goes idle. On a
    pool that does not autocommit (a caller's own pool), each round is
    committed as it ends, as a plain borrow would.
    """

    def __init__(self, pool: ConnectionPool[Any], action: str) -> None:
        self._pool = pool
        self._action = action
        self._conn: Connection | None = None
        self._since = 0.0

    def __enter__(self) -> Connection:
        conn = self._conn
        if conn is None:
            with translate(self._action):
                conn = borrow_connection(self._pool, self._action)
            self._conn = conn
            self._since = time.monotonic()
        return conn

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        conn = self._conn
        if conn is None:
            return
        if exc_type is not None:
            self._give_back(conn)
            return
        if not conn.autocommit:
            with translate(self._action):
                try:
                    conn.commit()
                except BaseException:
                    self._give_back(conn)
                    raise
        if time.monotonic() - self._since > _MAX_HOLD:
            self._give_back(conn)

    def release(self) -> None:
        """Give the connection back to the pool, if one is held."""
        if self._conn is not None:
            self._give_back(self._conn)

    def _give_back(self, conn: Connection) -> None:
        self._conn = None
        self._pool.putconn(conn)

    @property
    def holding(self) -> bool:
        """True while a connection is kept (for tests)."""
        return self._conn is not None
