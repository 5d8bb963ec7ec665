"""The async handler chain: Logging, metrics, the middleware's async forms, async dispatch.

The same layers as the sync chain (``runner.build_chain``), in the same
order, for ``async def`` workers; built once by the client when it has any.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

import pydantic

from drover.context import JobContext
from drover.errors import ArgsDecodeError, Snooze, UnknownJobKind, describe_failure
from drover.job import Job, JobRow
from drover.log import JOB, job_args, job_fields
from drover.middleware import AsyncHandler, AsyncMiddleware, Middleware, compose_async
from drover.results import DEFAULT_MAX_RESULT_BYTES, encode_result
from drover.worker import Workers

__all__ = ["AsyncLogging", "build_async_chain"]


def _async_dispatcher(workers: Workers, max_result_bytes: int) -> AsyncHandler:
    """The innermost async handler: as the sync dispatcher, awaiting the worker."""

    async def dispatch(ctx: JobContext, row: JobRow) -> None:
        entry = workers.get(row.kind)
        if entry is None:
            raise UnknownJobKind(f'no worker registered for kind "{row.kind}"')
        args_type, worker = entry
        try:
            args = args_type.model_validate(row.args)
        except pydantic.ValidationError as exc:
            raise ArgsDecodeError(
                f'decode args for job {row.id} (kind "{row.kind}"): {exc}'
            ) from None
        if worker.timeout is not None:
            ctx = ctx.with_timeout(worker.timeout)
        slot = ctx._result_slot
        slot.max_bytes = max_result_bytes
        job = Job(
            id=row.id,
            kind=row.kind,
            queue=row.queue,
            attempt=row.attempt,
            max_attempts=row.max_attempts,
            created_at=row.created_at,
            args=args,
            context=ctx,
        )
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
        if value is not None and not slot.in_tx:
            slot.text = encode_result(value, kind=row.kind, max_bytes=max_result_bytes)

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
                snoozed = isinstance(exc, Snooze)
                level = logging.INFO if snoozed else logging.WARNING
                if log.isEnabledFor(level):
                    duration = round((time.perf_counter() - started) * 1000, 3)
                    error = describe_failure(exc)
                    log.log(
                        level,
                        JOB
                        + (" snoozed after %s ms: %s" if snoozed else " failed after %s ms: %s"),
                        *job_args(row),
                        duration,
                        error,
                        extra={
                            **job_fields(row, "job_finished" if snoozed else "job_failed"),
                            "duration_ms": duration,
                            "error": error,
                        },
                    )
                raise
            if verbose:
                duration = round((time.perf_counter() - started) * 1000, 3)
                log.info(
                    JOB + " finished in %s ms",
                    *job_args(row),
                    duration,
                    extra={**job_fields(row, "job_finished"), "duration_ms": duration},
                )

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
