"""A pool connection that one busy loop keeps between its rounds, and what it runs there.

The fetcher and the completer each make a round trip every few jobs while the
queue drains. Borrowing from the pool for every round (checkout, the pool's
state checks, the commit on return) cost about as much client CPU as the
round trip's own query handling (ADR 0016), so each keeps its connection
while it stays busy and returns it as soon as it goes idle, fails, or has
held it for a while (so the pool's ``max_lifetime`` and health checks still
see it).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any, NamedTuple

from drover._db import Connection
from drover._db.claims import job_claim_limited, job_record_outcomes
from drover._db.errors import naming_role, translate
from drover._db.ledger import LedgerNote, job_ledger_append
from drover._db.namespace import DEFAULT, Namespace
from drover._db.pool import ConnectionPool, borrow_connection
from drover._db.progress import ProgressReport, job_report_progress
from drover._records import Outcome, Recorded
from drover.job import JobRow

__all__ = ["Claimed", "HeldConnection", "HeldSession"]

# Long enough to cover a drain's rounds, short enough that the pool recycles
# the connection on its usual schedule.
_MAX_HOLD = 30.0


class HeldConnection:
    """``with held as conn:`` yields the connection kept from the last round, or a new one.

    Not thread-safe: one loop thread owns it. Leaving the block with an
    exception returns the connection to the pool, which rolls back or
    discards it; ``release`` returns it when the loop goes idle. On a
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
            self._return(conn)
            return
        if not conn.autocommit:
            with translate(self._action):
                try:
                    conn.commit()
                except BaseException:
                    self._return(conn)
                    raise
        if time.monotonic() - self._since > _MAX_HOLD:
            self._return(conn)

    def release(self) -> None:
        """Return the connection to the pool, if one is held."""
        if self._conn is not None:
            self._return(self._conn)

    def _return(self, conn: Connection) -> None:
        self._conn = None
        self._pool.putconn(conn)

    @property
    def holding(self) -> bool:
        """True while a connection is kept (for tests)."""
        return self._conn is not None


_RECHECK_LIMITS = 10.0
"""Seconds a claim goes straight to the limited claim after finding limits."""


class Claimed(NamedTuple):
    """A claim round's rows, and when its statement was sent (``time.monotonic()``)."""

    rows: list[JobRow]
    sent: float
    """Taken once the connection was in hand, just before the claim was sent: the
    database's lease runs from a later instant, so ``sent + lease`` never outlives it."""
    limited: frozenset[int] = frozenset()
    """Ids claimed under a cluster-wide concurrency limit: their outcomes free capacity."""


class HeldSession:
    """The statements a busy loop runs on its held connection: claims, or outcome batches.

    Not thread-safe: one loop thread owns it. A failed statement returns the
    connection to the pool (the next round borrows another); ``release``
    returns it when the loop goes idle.
    """

    def __init__(self, pool: ConnectionPool[Any], action: str, ns: Namespace = DEFAULT) -> None:
        self._held = HeldConnection(pool, action)
        self._ns = ns
        # Queue -> time.monotonic() its claim last found limits: claims go
        # straight to the limited claim for a while, saving a round trip, and
        # try the plain claim again now and then to notice limits removed.
        self._limited_since: dict[str, float] = {}

    def claim(self, queue: str, limit: int, lease_seconds: float, holder: str) -> Claimed:
        """Claim up to ``limit`` due jobs of ``queue`` (sorted by id) for ``holder``."""
        with self._held as conn, naming_role(conn):
            sent = time.monotonic()
            seen = self._limited_since.get(queue)
            expect = seen is not None and sent - seen < _RECHECK_LIMITS
            rows, limited, through = job_claim_limited(
                conn, queue, limit, lease_seconds, holder, expect_limits=expect, ns=self._ns
            )
            if not through:
                self._limited_since.pop(queue, None)
            elif not expect:
                self._limited_since[queue] = sent
            return Claimed(rows, sent, limited)

    def record_outcomes(self, outcomes: Sequence[Outcome]) -> list[Recorded]:
        """Write a batch of outcomes, each fenced on its claim; one result per outcome."""
        with self._held as conn, naming_role(conn):
            return job_record_outcomes(conn, outcomes, ns=self._ns)

    def report_progress(self, reports: Sequence[ProgressReport]) -> set[int]:
        """Write progress reports, each fenced on its execution; the ids written (ADR 0032)."""
        with self._held as conn, naming_role(conn):
            return job_report_progress(conn, reports, ns=self._ns)

    def append_ledger(self, notes: Sequence[LedgerNote]) -> set[int]:
        """Append entries to jobs' duplicate ledgers (ADR 0037); the ids written."""
        with self._held as conn, naming_role(conn):
            return job_ledger_append(conn, notes)

    def release(self) -> None:
        """Return the connection to the pool, if one is held."""
        self._held.release()

    @property
    def holding(self) -> bool:
        """True while a connection is kept (for tests)."""
        return self._held.holding
