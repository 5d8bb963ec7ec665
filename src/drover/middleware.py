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

Async handlers (``async def work``) run on the client's event loop through
an ``AsyncMiddleware`` chain instead: ``async def`` handlers wrapped by
functions of the same shape. A ``Config.middleware`` entry applies to async
handlers through its async form, given with ``with_async_form``; a client
with async workers refuses an entry that has none (see docs/async.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeAlias

from drover._durations import Duration, to_seconds
from drover.context import JobContext
from drover.errors import ConfigError
from drover.job import JobRow

__all__ = [
    "AsyncHandler",
    "AsyncMiddleware",
    "Handler",
    "Middleware",
    "Timeout",
    "async_form_of",
    "compose",
    "compose_async",
    "execution_chain",
    "run_with_deadline",
    "with_async_form",
]

Handler: TypeAlias = Callable[[JobContext, JobRow], None]
"""Runs one execution: return to succeed, raise to fail."""

Middleware: TypeAlias = Callable[[Handler], Handler]
"""Wraps a handler in another."""

AsyncHandler: TypeAlias = Callable[[JobContext, JobRow], Awaitable[None]]
"""Runs one execution of an async job on the client's event loop."""

AsyncMiddleware: TypeAlias = Callable[[AsyncHandler], AsyncHandler]
"""Wraps an async handler in another (the async form of a middleware)."""

_ASYNC_FORM = "drover_async_form"


def with_async_form(middleware: Middleware, async_form: AsyncMiddleware) -> Middleware:
    """Give ``middleware`` (for sync handlers) the ``async_form`` that wraps async handlers.

    Returns ``middleware`` itself, marked: put it in ``Config.middleware`` as
    usual. Sync handlers run through ``middleware``; async handlers, on the
    client's event loop, through ``async_form``. The two should do the same
    thing; a ``ConfigError`` is raised when ``async_form`` is not callable.
    """
    if not callable(middleware) or not callable(async_form):
        raise ConfigError(
            f"with_async_form needs two middleware functions, not {middleware!r} and {async_form!r}"
        )
    setattr(middleware, _ASYNC_FORM, async_form)
    return middleware


def async_form_of(middleware: Middleware) -> AsyncMiddleware | None:
    """The async form ``with_async_form`` gave ``middleware``, or ``None``."""
    form = getattr(middleware, _ASYNC_FORM, None)
    return form if callable(form) else None


def compose_async(middleware: Sequence[Middleware], innermost: AsyncHandler) -> AsyncHandler:
    """The async chain: each entry's async form, ``middleware[0]`` outermost.

    Raises ``ConfigError`` naming the first entry with no async form.
    """
    handler = innermost
    for index in range(len(middleware) - 1, -1, -1):
        form = async_form_of(middleware[index])
        if form is None:
            raise ConfigError(
                f"Config.middleware[{index}] ({middleware[index]!r}) has no async form, and "
                "this client has async workers: give it one with "
                "drover.with_async_form(middleware, async_middleware)"
            )
        handler = form(handler)
        if not callable(handler):
            raise ConfigError(
                f"the async form of Config.middleware[{index}] returned {handler!r} "
                "instead of a handler function"
            )
    return handler


def execution_chain(middleware: Sequence[object]) -> tuple[Middleware, ...]:
    """The execution middleware among ``Config.middleware``'s entries: the callables, in
    order (an entry that is only an insert middleware, ``drover.InsertMiddleware``, is not
    one)."""
    return tuple(entry for entry in middleware if callable(entry))


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

    Its async form (applied to ``async def`` handlers) cancels the handler's
    task at the deadline: the handler sees ``asyncio.CancelledError`` at its
    current ``await``, and the attempt fails with ``TimeoutError`` unless the
    handler swallowed the cancellation and returned.
    """
    seconds = to_seconds(timeout, "Timeout")

    def middleware(next_handler: Handler) -> Handler:
        if seconds <= 0:
            return next_handler

        def handle(ctx: JobContext, row: JobRow) -> None:
            next_handler(ctx.with_timeout(seconds), row)

        return handle

    def async_middleware(next_handler: AsyncHandler) -> AsyncHandler:
        if seconds <= 0:
            return next_handler

        async def handle(ctx: JobContext, row: JobRow) -> None:
            await run_with_deadline(next_handler, ctx.with_timeout(seconds), row)

        return handle

    return with_async_form(middleware, async_middleware)


async def run_with_deadline(handler: AsyncHandler, ctx: JobContext, row: JobRow) -> None:
    """Await ``handler`` and cancel it when ``ctx``'s deadline passes (no deadline: just await).

    A handler cancelled by the deadline that lets ``CancelledError`` out
    fails with ``TimeoutError`` naming the job; one that swallowed the
    cancellation and returned succeeded, as a sync handler that overran.
    """
    remaining = ctx.remaining()
    if remaining is None:
        await handler(ctx, row)
        return
    try:
        async with asyncio.timeout(remaining) as scope:
            await handler(ctx, row)
    except TimeoutError:
        if not scope.expired():
            raise
        ctx.cancel("deadline exceeded")
        raise TimeoutError(f"job {row.id} ({row.kind}) was cancelled at its deadline") from None
