"""Runs one claimed job on a pool thread and turns what happened into an outcome."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import pydantic

from drover._db.runtime import Outcome
from drover._runtime import disposition
from drover._runtime.inflight import InFlight, Running, Slots
from drover.context import JobContext
from drover.errors import ArgsDecodeError, UnknownJobKind
from drover.job import Job, JobRow
from drover.log import JOB, Logging, enter_job, job_args, job_fields, leave_job
from drover.middleware import Handler, Middleware, compose
from drover.retry import RetryPolicy
from drover.worker import Workers

__all__ = ["Runner", "build_chain"]


def _dispatcher(workers: Workers) -> Handler:
    """The innermost handler: registry lookup, typed decode, the worker's own timeout."""

    def dispatch(ctx: JobContext, row: JobRow) -> None:
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
        worker.work(
            Job(
                id=row.id,
                kind=row.kind,
                queue=row.queue,
                attempt=row.attempt,
                max_attempts=row.max_attempts,
                created_at=row.created_at,
                args=args,
                context=ctx,
            )
        )

    return dispatch


def build_chain(
    workers: Workers,
    middleware: Sequence[Middleware],
    logger: logging.Logger,
    metrics: Middleware,
) -> Handler:
    """Compose the chain once: Logging, metrics, ``middleware`` (outermost first), dispatch.

    The built-in layers are not part of ``Config.middleware``, so
    configuration cannot remove them.
    """
    return Logging(logger)(metrics(compose(middleware, _dispatcher(workers))))


class Runner:
    """Executes jobs: the middleware chain around the registry dispatch, then disposition.

    ``run`` is what the executor calls. It never raises: whatever the handler
    or middleware raises, ``BaseException`` included, becomes a failed attempt,
    so a pool thread always survives to take the next job.
    """

    def __init__(
        self,
        *,
        chain: Handler,
        retry_policy: RetryPolicy,
        slots: Slots,
        inflight: InFlight,
        submit: Callable[[Outcome], None],
        logger: logging.Logger,
    ) -> None:
        self._policy = retry_policy
        self._slots = slots
        self._inflight = inflight
        self._submit = submit
        self._log = logger
        self._chain = chain

    def run(self, running: Running) -> None:
        row = running.row
        outcome: Outcome | None = None
        try:
            error: BaseException | None = None
            token = enter_job(row)
            try:
                self._chain(running.context, row)
            except BaseException as exc:
                error = exc
            finally:
                leave_job(token)
            outcome = disposition.decide(
                row, running.context.lease, error, policy=self._policy, log=self._log
            )
        except BaseException:
            self._log.critical(
                "could not decide the outcome of " + JOB + "; the rescuer will retry it",
                *job_args(row),
                extra=job_fields(row, "outcome_undecided"),
                exc_info=True,
            )
        finally:
            running.finished = True
            self._slots.give_back()
        if outcome is not None:
            self._submit(outcome)
        else:
            self._inflight.remove(row.id, row.attempt)
