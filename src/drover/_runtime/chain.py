"""The handler chains a client runs its jobs through: one builder for sync and async.

Both chains have the same layers in the same order: ``Logging``, the
metrics, ``Config.middleware`` (outermost first; for async handlers each
entry's async form), then the dispatcher, which looks the worker up,
validates the args, applies the worker's timeout, calls ``work`` and keeps
its result. The dispatcher's steps around the call are shared
(``prepare_execution``, ``keep_result``); only the call differs (awaited,
with the worker's deadline cancelling the task).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import pydantic

from drover._hints import did_you_mean
from drover.context import JobContext
from drover.errors import ArgsDecodeError, UnknownJobKind
from drover.job import Job, JobRow
from drover.log import JOB, Logging, job_args, job_fields, log_execution_end
from drover.middleware import (
    AsyncHandler,
    AsyncMiddleware,
    Handler,
    Middleware,
    compose,
    compose_async,
)
from drover.results import DEFAULT_MAX_RESULT_BYTES, encode_result
from drover.worker import Worker, Workers

__all__ = ["AsyncLogging", "Chains", "build_chains", "keep_result", "prepare_execution"]


def prepare_execution(
    workers: Workers, ctx: JobContext, row: JobRow, max_result_bytes: int
) -> tuple[Worker[Any], Job[Any]]:
    """What both dispatchers do before calling the worker: registry lookup,
    typed decode, the worker's own timeout on the context, and the result
    slot's size limit. Raises ``UnknownJobKind`` or ``ArgsDecodeError``."""
    entry = workers.get(row.kind)
    if entry is None:
        raise UnknownJobKind(
            f'no worker registered for kind "{row.kind}"{did_you_mean(row.kind, workers.kinds())}'
        )
    args_type, worker = entry
    try:
        args = args_type.model_validate(row.args)
    except pydantic.ValidationError as exc:
        raise ArgsDecodeError(f'decode args for job {row.id} (kind "{row.kind}"): {exc}') from None
    if worker.timeout is not None:
        ctx = ctx.with_timeout(worker.timeout)
    ctx._execution.max_bytes = max_result_bytes
    job = Job(
        id=row.id,
        kind=row.kind,
        queue=row.queue,
        attempt=row.attempt,
        max_attempts=row.max_attempts,
        created_at=row.created_at,
        args=args,
        context=ctx,
        priority=row.priority,
        scheduled_at=row.scheduled_at,
        tags=row.tags,
        meta=row.meta,
    )
    return worker, job


def keep_result(job: Job[Any], value: object, max_result_bytes: int) -> None:
    """Encode what the worker returned into its context's result slot.

    Encoded here, so a result that cannot be stored fails the attempt through
    the middleware like any handler error. After a ``complete_tx`` the
    completion is written: a returned value has nowhere to go.
    """
    execution = job.context._execution
    if value is not None and not execution.in_tx:
        execution.text = encode_result(value, kind=job.kind, max_bytes=max_result_bytes)


def _dispatcher(workers: Workers, max_result_bytes: int) -> Handler:
    def dispatch(ctx: JobContext, row: JobRow) -> None:
        worker, job = prepare_execution(workers, ctx, row, max_result_bytes)
        keep_result(job, worker.work(job), max_result_bytes)

    return dispatch


def _async_dispatcher(workers: Workers, max_result_bytes: int) -> AsyncHandler:
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
            if not log.isEnabledFor(logging.INFO):
                await next_handler(ctx, row)
                return
            log.info(JOB + " started", *job_args(row), extra=job_fields(row, "job_started"))
            started = time.perf_counter()
            await next_handler(ctx, row)
            log_execution_end(log, row, started, ctx)

        return handle

    return middleware


class Chains(NamedTuple):
    """A client's two chains: ``sync`` for plain workers, ``async_`` (``None`` when no
    worker is ``async def``) for the event loop."""

    sync: Handler
    async_: AsyncHandler | None


def build_chains(
    workers: Workers,
    middleware: Sequence[Middleware],
    logger: logging.Logger,
    metrics: Middleware,
    async_metrics: AsyncMiddleware,
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    starts: tuple[Middleware, AsyncMiddleware] | None = None,
) -> Chains:
    """Compose both chains once: Logging, metrics, ``middleware`` (outermost first), dispatch.

    ``starts`` (``drover._runtime.starts``: only when the code declares a rate
    limit that counts starts) goes right before the dispatcher, so a start is
    taken just before the handler runs. The built-in layers are not part of
    ``Config.middleware``, so configuration cannot remove them. Raises
    ``ConfigError`` when the client has async workers and a
    ``Config.middleware`` entry has no async form.
    """
    dispatch = _dispatcher(workers, max_result_bytes)
    if starts is not None:
        dispatch = starts[0](dispatch)
    sync = Logging(logger)(metrics(compose(middleware, dispatch)))
    if not workers.async_kinds():
        return Chains(sync, None)
    async_dispatch = _async_dispatcher(workers, max_result_bytes)
    if starts is not None:
        async_dispatch = starts[1](async_dispatch)
    inner = compose_async(middleware, async_dispatch)
    return Chains(sync, AsyncLogging(logger)(async_metrics(inner)))
