"""Runs one claimed job on a pool thread and turns what happened into an outcome."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import pydantic

from drover._runtime import disposition
from drover._runtime.disposition import Decision
from drover._runtime.inflight import Claim, InFlight, Slots
from drover.context import JobContext
from drover.errors import ArgsDecodeError, UnknownJobKind
from drover.job import Job, JobRow
from drover.log import JOB, Logging, enter_job, leave_job, log_job
from drover.middleware import Handler, Middleware, compose
from drover.results import DEFAULT_MAX_RESULT_BYTES, encode_result
from drover.retry import RetryPolicy
from drover.worker import Worker, Workers

__all__ = ["Runner", "build_chain", "keep_result", "prepare_execution"]


def prepare_execution(
    workers: Workers, ctx: JobContext, row: JobRow, max_result_bytes: int
) -> tuple[Worker[Any], Job[Any]]:
    """What both dispatchers do before calling the worker: registry lookup,
    typed decode, the worker's own timeout on the context, and the result
    slot's size limit. Raises ``UnknownJobKind`` or ``ArgsDecodeError``."""
    entry = workers.get(row.kind)
    if entry is None:
        raise UnknownJobKind(f'no worker registered for kind "{row.kind}"')
    args_type, worker = entry
    try:
        args = args_type.model_validate(row.args)
    except pydantic.ValidationError as exc:
        raise ArgsDecodeError(f'decode args for job {row.id} (kind "{row.kind}"): {exc}') from None
    if worker.timeout is not None:
        ctx = ctx.with_timeout(worker.timeout)
    ctx._result_slot.max_bytes = max_result_bytes
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
    return worker, job


def keep_result(job: Job[Any], value: object, max_result_bytes: int) -> None:
    """Encode what the worker returned into its context's result slot.

    Encoded here, so a result that cannot be stored fails the attempt through
    the middleware like any handler error. After a ``complete_tx`` the
    completion is written: a returned value has nowhere to go.
    """
    slot = job.context._result_slot
    if value is not None and not slot.in_tx:
        slot.text = encode_result(value, kind=job.kind, max_bytes=max_result_bytes)


def _dispatcher(workers: Workers, max_result_bytes: int) -> Handler:
    """The innermost handler: ``prepare_execution``, the worker's ``work``,
    then ``keep_result``."""

    def dispatch(ctx: JobContext, row: JobRow) -> None:
        worker, job = prepare_execution(workers, ctx, row, max_result_bytes)
        keep_result(job, worker.work(job), max_result_bytes)

    return dispatch


def build_chain(
    workers: Workers,
    middleware: Sequence[Middleware],
    logger: logging.Logger,
    metrics: Middleware,
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
) -> Handler:
    """Compose the chain once: Logging, metrics, ``middleware`` (outermost first), dispatch.

    The built-in layers are not part of ``Config.middleware``, so
    configuration cannot remove them.
    """
    dispatch = _dispatcher(workers, max_result_bytes)
    return Logging(logger)(metrics(compose(middleware, dispatch)))


class Runner:
    """Executes jobs: the middleware chain around the registry dispatch, then disposition.

    ``run`` is what a pool thread calls. It never raises: whatever the handler
    or middleware raises, ``BaseException`` included, becomes a failed attempt,
    so a pool thread always survives to take the next job. Every claim it runs
    is passed to ``settle`` with its decision, written or not (the completer
    untracks it there).
    """

    def __init__(
        self,
        *,
        chain: Handler,
        retry_policy: RetryPolicy,
        slots: Slots,
        inflight: InFlight,
        settle: Callable[[Claim, Decision], None],
        logger: logging.Logger,
    ) -> None:
        self._policy = retry_policy
        self._slots = slots
        self._inflight = inflight
        self._settle = settle
        self._log = logger
        self._chain = chain

    def run(self, claim: Claim) -> None:
        row = claim.row
        decision = _UNDECIDED
        try:
            error: BaseException | None = None
            token = enter_job(row)
            try:
                self._chain(claim.context, row)
            except BaseException as exc:
                error = exc
            finally:
                leave_job(token)
            decision = disposition.decide(row, claim, error, policy=self._policy)
            disposition.report(self._log, row, decision)
        except BaseException:
            log_job(
                self._log,
                logging.CRITICAL,
                row,
                "outcome_undecided",
                "could not decide the outcome of " + JOB + "; the rescuer will retry it",
                exc_info=True,
            )
        finally:
            # Its queue's count first, then the slot: a fetcher woken by the
            # free slot must already see the queue's room under its max_workers.
            self._inflight.finished(claim)
            self._slots.free()
        self._settle(claim, decision)


# Nothing to write: the rescuer recovers the row after its lease.
_UNDECIDED = Decision(None)
