"""Middleware: functions that wrap every execution, whatever the job kind.

A :data:`Handler` takes the job's context and its raw row (args still JSON) and
returns on success or raises on failure. A :data:`Middleware` takes the next
handler and returns a handler that wraps it::

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

from drover.context import JobContext
from drover.errors import ConfigError
from drover.job import JobRow

__all__ = ["Handler", "Middleware", "compose"]

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
