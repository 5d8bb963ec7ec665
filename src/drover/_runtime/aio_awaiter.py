"""Waits for jobs to end on behalf of ``AsyncClient.result``: one LISTEN task per client.

The asyncio twin of ``drover._runtime.awaiter.Awaiter``. The decisions are
that module's (``next_look``) and the statements are the same plans
(``drover._db.results``); only the I/O differs: the reads borrow a
connection of the client's async pool, and one task keeps a dedicated
``AsyncConnection`` listening on ``drover_done``, started by the first
waiter and cancelled by ``close``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from drover._db.aio import arun
from drover._db.namespace import Namespace
from drover._db.queries import query
from drover._db.results import StoredResult, mark_awaited_plan, result_plan
from drover._runtime.awaiter import FIRST_RETRY, LISTEN_GRACE, listen_failed, next_look

__all__ = ["AsyncAwaiter"]


class AsyncAwaiter:
    """Tells waiting tasks when the jobs they wait for reach a terminal state.

    A waiter flags its job (``awaited``), so the statement that writes its
    terminal state notifies ``drover_done`` with the job's id; the
    notification only wakes the waiter early: each reads the job's state
    again at least every ``poll`` seconds (a quarter second while nothing
    listens), so a lost notification costs at most that. ``listen_to``
    gives the conninfo and connection arguments of a session to LISTEN on
    (``Config.session_url``'s or the pool's), or is ``None`` behind a
    transaction pooler without one: then the waiters only poll. Used from
    one event loop (the client's callers').
    """

    def __init__(
        self,
        ready: Callable[[str], Awaitable[AsyncConnectionPool[Any]]],
        *,
        listen_to: Callable[[], Awaitable[tuple[str, dict[str, Any]]]] | None,
        ns: Namespace,
        logger: logging.Logger,
        poll: float = 1.0,
    ) -> None:
        self._ready = ready
        self._listen_to = listen_to
        self._ns = ns
        self._log = logger
        self._poll = poll
        self._waiters: dict[int, list[asyncio.Event]] = {}
        self._task: asyncio.Task[None] | None = None
        self.listening = asyncio.Event()

    async def wait(self, job_id: int, timeout: float | None) -> StoredResult:
        """Until job ``job_id`` is terminal; its state, result and last error.

        ``timeout`` in seconds (``None``: no limit). Any number of tasks may
        wait at once. Raises ``drover.NotFound`` and ``drover.ResultTimeout``
        as ``Client.result`` does; the job is never changed beyond its
        ``awaited`` flag. Cancelling the calling task ends the wait.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._listen_to is not None and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._listen())
        if self._task is not None and not self.listening.is_set():
            grace = LISTEN_GRACE if timeout is None else min(LISTEN_GRACE, timeout)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.listening.wait(), grace)
        event = asyncio.Event()
        self._waiters.setdefault(job_id, []).append(event)
        try:
            await self._run(mark_awaited_plan(job_id, ns=self._ns), f"wait for job {job_id}")
            while True:
                found = await self._run(
                    result_plan(job_id, ns=self._ns), f"read the result of job {job_id}"
                )
                step = next_look(
                    job_id, found, deadline, timeout, listening=self.listening.is_set(),
                    poll=self._poll,
                )  # fmt: skip
                if isinstance(step, StoredResult):
                    return step
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), step)
                event.clear()
        finally:
            events = self._waiters.get(job_id, [])
            if event in events:
                events.remove(event)
            if not events:
                self._waiters.pop(job_id, None)

    async def _run(self, plan: Any, action: str) -> Any:
        pool = await self._ready(action)
        async with pool.connection() as conn:
            return await arun(conn, plan, action)

    def _wake(self, job_ids: list[int] | None = None) -> None:
        chosen = self._waiters.values() if job_ids is None else (
            self._waiters.get(i, []) for i in job_ids
        )  # fmt: skip
        for events in chosen:
            for event in events:
                event.set()

    async def _listen(self) -> None:
        assert self._listen_to is not None
        retry, failures, delay = FIRST_RETRY, 0, FIRST_RETRY
        while True:
            try:
                conninfo, kwargs = await self._listen_to()
                conn = await psycopg.AsyncConnection.connect(
                    conninfo, **{**kwargs, "autocommit": True}
                )
                async with conn:
                    await conn.execute(query("notify_listen_done", self._ns))
                    self.listening.set()
                    if failures:
                        self._log.info("listening for job results again")
                        self._wake()  # what was notified meanwhile is lost: look once
                    retry, failures = FIRST_RETRY, 0
                    async for notice in conn.notifies():
                        with contextlib.suppress(ValueError):
                            self._wake([int(notice.payload)])
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                delay, retry = listen_failed(self._log, exc, failures, retry)
            finally:
                self.listening.clear()
            await asyncio.sleep(delay if failures else FIRST_RETRY)

    async def close(self) -> None:
        """Stop listening (the waiters still running poll until they end or time out)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
