"""Rate limits that count handler starts (``Limit(counts="starts")``, ADR 0052).

A layer of the handler chains, the innermost before the dispatcher, added
only when this client's code declares such a limit (on a kind it runs or a
queue it works): other clients' chains, and other kinds' jobs, pass
through untouched. For a job under one, just before its handler is called,
the layer takes its start from the database (``Store.take_start``: under
the limit's lock, on the database clock, exact across every process). While
the window is full it waits in the job's slot for the time the database
says, then asks again; the wait ends at once when the client stops (the job
goes back to the queue, its attempt refunded, as a snooze does) or the
job's context is cancelled. A wait longer than ``HOLD_AT_MOST`` is not
spent in the slot: the job is snoozed until then.

The start's time (the database's) is put in the context's values as
``STARTED_AT`` for the handler and its middleware.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Collection
from datetime import datetime

from drover.context import JobContext
from drover.errors import Snooze
from drover.job import JobRow
from drover.limits import Limit, LimitKey
from drover.middleware import AsyncHandler, AsyncMiddleware, Handler, Middleware

__all__ = ["HOLD_AT_MOST", "STARTED_AT", "StartGate", "start_gate_of"]

HOLD_AT_MOST = 5.0
"""The longest a job waits for its start in its slot; a longer wait snoozes it."""

STARTED_AT = "drover.started_at"
"""The key of ``JobContext.values`` holding the start's database time."""

_SLICE = 0.05
"""How often a waiting job looks at the stop signal and its context."""

TakeStart = Callable[[int, int], tuple[datetime | None, float | None]]


class _Stopped(Exception):
    pass


class StartGate:
    """Takes the start of every job of ``kinds`` or ``queues`` before its handler runs."""

    def __init__(
        self,
        *,
        kinds: Collection[str],
        queues: Collection[str],
        take: TakeStart,
        stopping: threading.Event,
    ) -> None:
        self._kinds = frozenset(kinds)
        self._queues = frozenset(queues)
        self._take = take
        self._stopping = stopping

    def applies(self, row: JobRow) -> bool:
        return row.kind in self._kinds or row.queue in self._queues

    def _ask(self, ctx: JobContext, row: JobRow) -> float | None:
        """One try: ``None`` once the start is taken, else the seconds to wait."""
        started, wait = self._take(row.id, row.attempt)
        if started is not None:
            ctx.values[STARTED_AT] = started
            return None
        assert wait is not None  # the function answers one or the other
        if wait > HOLD_AT_MOST:
            # Not worth a slot: back to the queue until the window has room.
            raise Snooze(wait)
        return max(wait, 0.0)

    def _interrupted(self, ctx: JobContext) -> bool:
        return self._stopping.is_set() or ctx.cancelled

    def middleware(self, next_handler: Handler) -> Handler:
        def handle(ctx: JobContext, row: JobRow) -> None:
            if self.applies(row):
                while (wait := self._ask(ctx, row)) is not None:
                    end = time.monotonic() + wait
                    while (left := end - time.monotonic()) > 0:
                        if self._interrupted(ctx):
                            raise Snooze(0) from _Stopped("the client stopped or the job ended")
                        self._stopping.wait(min(left, _SLICE))
            next_handler(ctx, row)

        return handle

    def async_middleware(self, next_handler: AsyncHandler) -> AsyncHandler:
        async def handle(ctx: JobContext, row: JobRow) -> None:
            if self.applies(row):
                while (wait := await asyncio.to_thread(self._ask, ctx, row)) is not None:
                    end = time.monotonic() + wait
                    while (left := end - time.monotonic()) > 0:
                        if self._interrupted(ctx):
                            raise Snooze(0) from _Stopped("the client stopped or the job ended")
                        await asyncio.sleep(min(left, _SLICE))
            await next_handler(ctx, row)

        return handle


def start_gate_of(
    declared: Collection[tuple[LimitKey, Limit]], take: TakeStart, stopping: threading.Event
) -> tuple[Middleware, AsyncMiddleware] | None:
    """The layers for the limits among ``declared`` that count starts; ``None`` without one."""
    kinds = {k.target for k, lim in declared if lim.counts == "starts" and k.scope == "kind"}
    queues = {k.target for k, lim in declared if lim.counts == "starts" and k.scope == "queue"}
    if not kinds and not queues:
        return None
    gate = StartGate(kinds=kinds, queues=queues, take=take, stopping=stopping)
    return gate.middleware, gate.async_middleware
