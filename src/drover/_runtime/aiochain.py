"""The async handler chain: Logging, metrics, the middleware's async forms, async dispatch.

The same layers as the sync chain (``runner.build_chain``), in the same
order, for ``async def`` workers; built once by the client when it has any.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from drover._runtime.runner import keep_result, prepare_execution
from drover.context import JobContext
from drover.job import JobRow
from drover.log import JOB, job_args, job_fields, log_execution_end
from drover.middleware import AsyncHandler, AsyncMiddleware, Middleware, compose_async
from drover.results import DEFAULT_MAX_RESULT_BYTES
from drover.worker import Workers

__all__ = ["AsyncLogging", "build_async_chain"]


def _async_dispatcher(workers: Workers, max_result_bytes: int) -> AsyncHandler:
    """The innermost async handler: as the sync dispatcher, awaiting the worker."""

    async def dispatch(ctx: JobContext, row: JobRow) -> None:
        worker, job = prepare_execution(workers, ctx, row, max_result_bytes)
        ctx = job.context
        remaining = None if worker.timeout is None else ctx.remaining()
        if remaining is None:
            value = await worker.work(job)  # type: ignore[misc]  # an async def worker
        else:
            # The worker's own deadline cancels its task, as drover.Timeout's does.
            try:
                async with asyncio.timeout(remaining) as scope:
                    value = await worker.work(job)  # type: ignore[misc]
            except TimeoutError:
                if not scope.expired():
                    raise
                ctx.cancel("deadline exceeded")
                raise TimeoutError(
                    f"job {row.id} ({row.kind}) was cancelled at its deadline"
                ) from None
        keep_result(job, value, max_result_bytes)

    return dispatch


def AsyncLogging(logger: logging.Logger) -> AsyncMiddleware:
    """The async form of ``drover.Logging``: the same start and end records."""
    log = logger

    def middleware(next_handler: AsyncHandler) -> AsyncHandler:
        async def handle(ctx: JobContext, row: JobRow) -> None:
            verbose = log.isEnabledFor(logging.INFO)
            if verbose:
                log.info(JOB + " started", *job_args(row), extra=job_fields(row, "job_started"))
            started = time.perf_counter()
            try:
                await next_handler(ctx, row)
            except BaseException as exc:
                log_execution_end(log, row, started, exc)
                raise
            if verbose:
                log_execution_end(log, row, started)

        return handle

    return middleware


def build_async_chain(
    workers: Workers,
    middleware: Sequence[Middleware],
    logger: logging.Logger,
    metrics: AsyncMiddleware,
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
) -> AsyncHandler | None:
    """The async chain, or ``None`` when no worker is ``async def``.

    Raises ``ConfigError`` when a ``Config.middleware`` entry has no async form.
    """
    if not workers.async_kinds():
        return None
    dispatch = _async_dispatcher(workers, max_result_bytes)
    return AsyncLogging(logger)(metrics(compose_async(middleware, dispatch)))
