"""Wake-ups for the jobs an ``AsyncClient`` committed itself: sent after the commit, coalesced.

The asyncio counterpart of ``drover._runtime.notifier.Notifier``, for the
same reason (ADR 0034): a NOTIFY inside the inserting transaction makes
PostgreSQL hold its global notification lock across that commit's WAL
flush, so concurrent notifying inserts would commit one at a time. Here the
inserts commit without it, and one task sends one NOTIFY per queue per
round, in a transaction of its own with ``synchronous_commit`` off.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Collection
from typing import Any

from psycopg_pool import AsyncConnectionPool

from drover._db.aio import aio_borrow, aio_notify_now
from drover._db.namespace import DEFAULT, Namespace

__all__ = ["AsyncNotifier"]

# As the thread notifier: rounds at least 10 ms apart, so a stream of inserts
# shares a NOTIFY per queue; a wake-up is only a hint, so a round waits at
# most 2 s for a connection and is then dropped.
_GAP = 0.010
_BORROW_TIMEOUT = 2.0


class AsyncNotifier:
    """One task on the event loop of the first ``committed`` call, sending pending wake-ups.

    Guarantee: each ``committed`` call is followed by a NOTIFY for each of
    its queues that starts after the call, so a listener woken by it sees the
    committed rows. A failed round is logged at ERROR and its queues are
    dropped (workers still find the jobs by polling); the task goes on. The
    task ends when ``stop`` is awaited, after sending what is pending; a call
    after ``stop`` sends inline. Not thread-safe: use it from one event loop.
    """

    def __init__(
        self,
        pool: Callable[[], AsyncConnectionPool[Any]],
        logger: logging.Logger,
        ns: Namespace = DEFAULT,
    ) -> None:
        # A function: the client replaces a pool of its own that failed to open.
        self._pool = pool
        self._ns = ns
        self._log = logger
        self._pending: set[str] = set()
        self._changed: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.rounds = 0

    async def committed(self, queues: Collection[str]) -> None:
        """Ask for a wake-up on ``queues``, whose new jobs have committed."""
        if self._stopping:
            await self._send(sorted(set(queues)))
            return
        self._pending.update(queues)
        if self._task is None:
            self._changed = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(
                self._loop(), name="drover-async-notifier"
            )
        assert self._changed is not None
        self._changed.set()

    async def run_once(self) -> list[str]:
        """Send one round for everything pending now; returns the queues it named."""
        batch = sorted(self._pending)
        self._pending.clear()
        if batch:
            await self._send(batch)
        return batch

    async def _send(self, queues: list[str]) -> None:
        if not queues:
            return
        try:
            async with aio_borrow(
                self._pool(), "notify listeners of insert", timeout=_BORROW_TIMEOUT
            ) as conn:
                await aio_notify_now(conn, queues, ns=self._ns)
            self.rounds += 1
        except Exception:
            self._log.error(
                "notify listeners of insert failed (queues %s); "
                "workers will find the jobs by polling",
                ",".join(queues),
                extra={"queues": queues},
                exc_info=True,
            )

    async def _loop(self) -> None:
        changed = self._changed
        assert changed is not None
        while True:
            await changed.wait()
            changed.clear()
            await self.run_once()
            if self._stopping:
                return
            # Coalesce: inserts of the next 10 ms share the next round.
            await asyncio.sleep(_GAP)

    async def stop(self) -> None:
        """Send what is pending and end the task; idempotent."""
        self._stopping = True
        task, self._task = self._task, None
        if task is None:
            await self.run_once()
            return
        assert self._changed is not None
        self._changed.set()
        try:
            await task
        except Exception:
            self._log.error("the async notifier's task failed", exc_info=True)
        with contextlib.suppress(Exception):
            await self.run_once()
