"""The two stores the conformance suite runs against, behind one ``Backend``.

A ``Backend`` is a ``KernelStore`` plus what a test needs around it that the
protocol does not offer: the store's clock (read it, let it pass), pausing a
queue, the columns ``JobRow`` does not carry, and a caller's transaction for
``complete_in_tx``. ``MemoryBackend`` moves its store's ``ManualClock``;
``PgBackend`` reads ``now()`` and waits, polling with a deadline, for the
server's clock to pass an instant.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any, Protocol

import psycopg
import pytest

from drover._db.store import Store
from drover._kernel.memory import HiddenColumns, ManualClock, MemoryStore
from drover._kernel.store import KernelStore
from drover._records import JobInsertParams
from drover.job import JobRow

__all__ = ["Backend", "MemoryBackend", "PgBackend", "Tx", "params"]

TICK = timedelta(microseconds=1)


def params(
    queue: str = "default",
    *,
    kind: str = "task",
    args: str = "{}",
    priority: int = 0,
    scheduled_at: datetime | None = None,
    max_attempts: int = 25,
    unique_key: str | None = None,
    tags: tuple[str, ...] = (),
    meta: str | None = None,
) -> JobInsertParams:
    """A job to insert, with the values the tests usually do not care about."""
    return JobInsertParams(
        kind, queue, args, max_attempts, scheduled_at, unique_key, priority, tags, meta
    )


class Tx(Protocol):
    """A caller's open transaction: ``handle`` goes to ``complete_in_tx``."""

    @property
    def handle(self) -> object: ...

    def commit(self) -> None: ...

    def rollback(self) -> None: ...


class Backend(Protocol):
    """A store under test and the test's hands on it."""

    name: str
    store: KernelStore

    def now(self) -> datetime:
        """The store's clock now."""
        ...

    def pass_time(self, instant: datetime) -> None:
        """Return once the store's clock is past ``instant``."""
        ...

    def pause(self, queue: str) -> None: ...

    def resume(self, queue: str) -> None: ...

    def hidden(self, job_id: int) -> HiddenColumns:
        """``leased_by``, ``attempted_at`` and ``result`` as stored (committed)."""
        ...

    def begin(self) -> Tx:
        """A caller's transaction, open (closed by the backend at the test's end if left)."""
        ...

    def lock_waiters(self) -> int:
        """Writes waiting now for a transaction's row lock."""
        ...

    def insert(self, p: JobInsertParams | None = None) -> JobRow:
        """Insert ``p`` (default: a plain job on ``default``)."""
        ...

    def claim_one(self, queue: str = "default", lease: float = 60.0) -> JobRow:
        """Claim exactly one job of ``queue`` for ``"w1"``."""
        ...

    def must_get(self, job_id: int) -> JobRow: ...


class _Common:
    store: KernelStore

    def insert(self, p: JobInsertParams | None = None) -> JobRow:
        return self.store.insert(p or params())

    def claim_one(self, queue: str = "default", lease: float = 60.0) -> JobRow:
        session = self.store.claim_session()
        try:
            rows = session.claim(queue, 1, lease, "w1").rows
        finally:
            session.release()
        assert len(rows) == 1, rows
        return rows[0]

    def must_get(self, job_id: int) -> JobRow:
        row = self.store.get(job_id)
        assert row is not None, job_id
        return row


class MemoryBackend(_Common):
    """``MemoryStore`` on a ``ManualClock``: time passes when a test says so."""

    name = "memory"

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.memory = MemoryStore(self.clock)
        self.store: KernelStore = self.memory
        self._open: list[Any] = []

    def now(self) -> datetime:
        return self.clock()

    def pass_time(self, instant: datetime) -> None:
        now = self.clock()
        if now <= instant:
            self.clock.advance(instant - now + TICK)

    def pause(self, queue: str) -> None:
        self.memory.pause_queue(queue)

    def resume(self, queue: str) -> None:
        self.memory.resume_queue(queue)

    def hidden(self, job_id: int) -> HiddenColumns:
        found = self.memory.hidden(job_id)
        assert found is not None, job_id
        return found

    def lock_waiters(self) -> int:
        return self.memory.lock_waiters

    def begin(self) -> Tx:
        tx = _MemoryTx(self.memory)
        self._open.append(tx)
        return tx

    def close(self) -> None:
        for tx in self._open:
            tx.rollback()


class _MemoryTx:
    def __init__(self, store: MemoryStore) -> None:
        self._tx = store.transaction()

    @property
    def handle(self) -> object:
        return self._tx

    def commit(self) -> None:
        self._tx.commit()

    def rollback(self) -> None:
        self._tx.rollback()


class PgBackend(_Common):
    """``PgKernelStore`` on a fresh migrated database; the server's clock, waited for."""

    name = "postgres"

    def __init__(self, db_url: str) -> None:
        self.db_url = db_url
        self._store = Store.open(db_url, who="test", max_size=4)
        self.store = self._store.kernel
        self._conn = psycopg.connect(db_url, autocommit=True)
        self._open: list[_PgTx] = []

    def now(self) -> datetime:
        row = self._conn.execute("SELECT now()").fetchone()
        assert row is not None
        value: datetime = row[0]
        return value

    def pass_time(self, instant: datetime) -> None:
        deadline = time.monotonic() + 10.0
        while self.now() <= instant:
            if time.monotonic() > deadline:
                pytest.fail(f"the server's clock did not pass {instant} within 10 s")
            time.sleep(0.01)

    def pause(self, queue: str) -> None:
        self._store.operator.pause_queue(queue)

    def resume(self, queue: str) -> None:
        self._store.operator.resume_queue(queue)

    def hidden(self, job_id: int) -> HiddenColumns:
        row = self._conn.execute(
            "SELECT leased_by, attempted_at, result::text FROM drover_jobs WHERE id = %s",
            (job_id,),
        ).fetchone()
        assert row is not None, job_id
        return HiddenColumns(*row)

    def lock_waiters(self) -> int:
        row = self._conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()
        assert row is not None
        return int(row[0])

    def begin(self) -> Tx:
        tx = _PgTx(self.db_url)
        self._open.append(tx)
        return tx

    def close(self) -> None:
        for tx in self._open:
            tx.close()
        self._conn.close()
        self._store.close()


class _PgTx:
    """A connection of the test's own, in a transaction begun at once (so ``now()`` is fixed)."""

    def __init__(self, db_url: str) -> None:
        self._conn = psycopg.connect(db_url)
        self._conn.execute("SELECT 1")

    @property
    def handle(self) -> object:
        return self._conn

    def commit(self) -> None:
        self._conn.commit()

    def rollback(self) -> None:
        self._conn.rollback()

    def close(self) -> None:
        self._conn.close()
