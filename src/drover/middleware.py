"""Middleware: functions that wrap every execution, whatever the job kind.

A ``Handler`` takes the job's context and its raw row (args still JSON) and
returns on success or raises on failure. A ``Middleware`` takes the next
handler and returns a handler that wraps it:

    def audit(next_handler: drover.Handler) -> drover.Handler:
        def handle(ctx: drover.JobContext, row: drover.JobRow) -> None:
            ctx.values["audited"] = True
            next_handler(ctx, row)
        return handle

``Config.middleware`` lists them outermost first. The handler's raised
exception (or its return) is the attempt's verdict: a middleware that swallows
an exception completes the job.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeAlias

from drover._durations import Duration, to_seconds
from drover.context import JobContext
from drover.errors import ConfigError
from drover.job import JobRow

__all__ = ["Handler", "Middleware", "Timeout", "compose"]

Handler: TypeAlias = Callable[[JobContext, JobRow], None]
"""Runs one execution: return to succeed, raise to fail."""

Middleware: TypeAlias = Callable[[Handler], Handler]
"""Wraps a handler in another."""


def compose(middleware: Sequence[Middleware], innermost: Handler) -> Handler:
    """Build the chain once: ``middleware[0]`` outermost, ``innermost`` last."""
    handler = innermost
    for index in range(len(middleware) - 1, -1, -1):
        handler = middleware[index](handler)
        if not callable(handler):
            raise ConfigError(
                f"Config.middleware[{index}] returned {handler!r} instead of a handler function"
            )
    return handler


def Timeout(timeout: Duration) -> Middleware:
    """Middleware giving the rest of the chain a context that cancels after ``timeout``.

    ``timeout`` is a ``timedelta`` or seconds; zero or less means no deadline
    (the middleware passes through). Python cannot interrupt a thread, so the
    handler must notice: ``job.context.cancelled`` turns true and
    ``job.context.wait()`` returns at the deadline. The handler's own result is
    kept either way: a handler that overran and returned succeeded, one that
    overran and raised failed with its own error. The outcome is recorded
    regardless of the deadline.
    """
    seconds = to_seconds(timeout, "Timeout")

    def middleware(next_handler: Handler) -> Handler:
        if seconds <= 0:
            return next_handler

        def handle(ctx: JobContext, row: JobRow) -> None:
            next_handler(ctx.with_timeout(seconds), row)

        return handle

    return middleware
