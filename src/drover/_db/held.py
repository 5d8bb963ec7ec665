"""What a busy loop runs on the pool connection it keeps between its rounds.

The fetcher and the completer each make a round trip every few jobs while the
queue drains. Borrowing from the pool for every round (checkout, the pool's
state checks, the commit on return) cost about as much client CPU as the
round trip's own query handling (ADR 0016), so each keeps its connection
while it stays busy and returns it as soon as it goes idle, fails, or has
held it for a while (so the pool's ``max_lifetime`` and health checks still
see it): ``drover._db.pool.HeldConnection``. Claims and outcomes are the
kernel's (``drover._db.kernel``), with drover's features plugged in.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, NamedTuple

from drover._db import kernel
from drover._db.errors import naming_role
from drover._db.features import FEATURES
from drover._db.kernel import GatesSeen
from drover._db.ledger import LedgerNote, job_ledger_append
from drover._db.namespace import DEFAULT, Namespace
from drover._db.pool import ConnectionPool, HeldConnection
from drover._db.progress import ProgressReport, job_report_progress
from drover._records import Outcome, Recorded
from drover.job import JobRow

__all__ = ["Claimed", "HeldConnection", "HeldSession"]


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
        self._gates = GatesSeen()

    def claim(self, queue: str, limit: int, lease_seconds: float, holder: str) -> Claimed:
        """Claim up to ``limit`` due jobs of ``queue`` (sorted by id) for ``holder``."""
        with self._held as conn, naming_role(conn):
            sent = time.monotonic()
            via = self._gates.via(queue, sent)
            rows, limited, through = kernel.claim(
                conn,
                queue,
                limit,
                lease_seconds,
                holder,
                gates=FEATURES.gates,
                via=via,
                ns=self._ns,
            )
            self._gates.saw(queue, via, through, sent)
            return Claimed(rows, sent, limited)

    def record_outcomes(self, outcomes: Sequence[Outcome]) -> list[Recorded]:
        """Write a batch of outcomes, each fenced on its claim; one result per outcome."""
        with self._held as conn, naming_role(conn):
            return kernel.record_outcomes(conn, outcomes, doors=FEATURES, ns=self._ns)

    def report_progress(self, reports: Sequence[ProgressReport]) -> set[int]:
        """Write progress reports, each fenced on its execution; the ids written (ADR 0032)."""
        with self._held as conn, naming_role(conn):
            return job_report_progress(conn, reports, ns=self._ns)

    def append_ledger(self, notes: Sequence[LedgerNote]) -> set[int]:
        """Append entries to jobs' duplicate ledgers (ADR 0037); the ids written."""
        with self._held as conn, naming_role(conn):
            return job_ledger_append(conn, notes, ns=self._ns)

    def release(self) -> None:
        """Return the connection to the pool, if one is held."""
        self._held.release()

    @property
    def holding(self) -> bool:
        """True while a connection is kept (for tests)."""
        return self._held.holding
