"""drover under Flask: every job runs inside the application's context.

A handler runs on a thread of drover's pool, where Flask has pushed no
context: `current_app`, `app.config` through it, and Flask-SQLAlchemy's
`db.session` all refuse to work there ("Working outside of application
context"). `app_context(app)` is a middleware that gives each execution one:

    config = drover.Config(workers=workers, middleware=[app_context(app)])

It imports nothing from Flask, so it costs nothing where Flask is absent.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol

from drover.context import JobContext
from drover.errors import InvalidArgument
from drover.job import JobRow
from drover.middleware import AsyncHandler, Handler, Middleware, with_async_form

__all__ = ["app_context"]


class _App(Protocol):
    def app_context(self) -> AbstractContextManager[Any]: ...


def app_context(app: _App) -> Middleware:
    """A middleware that runs every job inside a fresh `app.app_context()`.

    The context is pushed when the execution starts and popped when the
    handler returns or raises, on the handler's own thread. Popping it runs the
    application's `teardown_appcontext` functions; Flask-SQLAlchemy's removes
    the job's `db.session`: whatever the handler did not commit is rolled
    back and the session's connection goes back to the engine's pool. Jobs
    running at the same time each have their own context, and so their own
    session; nothing is shared between jobs or left behind by one.

    A handler commits its own work (`db.session.commit()`), or commits it
    with the job's completion through `drover.contrib.sqlalchemy.complete`.

    Args:
        app: The Flask application (anything with an `app_context()`
            method returning a context manager).

    Returns:
        A middleware for `drover.Config(middleware=[...])`.

    Raises:
        drover.InvalidArgument: `app` has no `app_context()` method.
    """
    if not callable(getattr(app, "app_context", None)):
        raise InvalidArgument(
            "app_context needs a Flask application (an object with an app_context() method), "
            f"not {type(app).__module__}.{type(app).__qualname__}"
        )

    def middleware(next_handler: Handler) -> Handler:
        def handle(ctx: JobContext, row: JobRow) -> None:
            with app.app_context():
                next_handler(ctx, row)

        return handle

    def async_middleware(next_handler: AsyncHandler) -> AsyncHandler:
        async def handle(ctx: JobContext, row: JobRow) -> None:
            # Flask keeps its contexts in context variables: each task has its own.
            with app.app_context():
                await next_handler(ctx, row)

        return handle

    return with_async_form(middleware, async_middleware)
