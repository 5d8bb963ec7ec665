"""drover's exception tree.

Every error a caller can catch from drover derives from ``DroverError``;
drover never lets a bare psycopg or pydantic exception escape its public API.
Where an error is also naturally a ``ValueError`` or ``TypeError`` it subclasses
that too, so ``except ValueError`` keeps working:

    DroverError                      never raised directly
    ├── InvalidArgument              (ValueError, TypeError) a bad argument to a drover call
    │   ├── ConfigError              a Config value that is unknown, mistyped or out of range
    │   └── InvalidLimit             a drover.Limit or limit override that cannot be enforced
    ├── InvalidJobArgs               (TypeError)  args that are not a JobArgs or cannot be encoded
    ├── InvalidInsertOpts            (ValueError) a bad queue, time, unique key or attempt count
    ├── UnsupportedConnection        (TypeError)  insert_tx given something it cannot use
    ├── NotInTransaction             insert_tx on an autocommit connection
    ├── DuplicateJob                 a non-terminal job already holds the unique key
    ├── MigrationError               a migration file is malformed or failed to apply
    ├── DatabaseError                the database refused or could not be reached
    │   ├── SchemaMissing            drover's tables are missing or old: run drover.migrate()
    │   └── PermissionDenied         the role lacks a privilege the action needs: see `drover roles`
    │       └── CannotClaim          start(): the client's role may not claim and run jobs
    ├── NotFound                     (LookupError) no job with that id
    ├── InvalidTransition            an operator action the job's state does not allow
    ├── AlreadyStarted               start() on a client that was started before
    ├── NotStarted                   stop() on a client that was never started
    ├── DrainIncomplete              stop() ran out of time; unfinished jobs were handed back
    ├── UnknownJobKind               no worker for a claimed job's kind: the attempt fails, retries
    ├── ArgsDecodeError              a claimed job's stored args do not validate: the job is dead
    ├── LeaseLost                    complete_tx refused: the claim moved on; roll back
    ├── InvalidResult                (TypeError)  a handler's result is not JSON or is too large
    ├── JobFailed                    Client.result: the job ended dead, without a result
    │   └── JobCancelled             Client.result: the job ended cancelled
    ├── ResultTimeout                (TimeoutError) Client.result: the job had not ended in time
    └── JobSignal                    raised by a handler to steer its job, never an error
        ├── Snooze                   run the job again later, without spending an attempt
        └── Cancel                   stop retrying: the job ends cancelled

Validation errors are raised before anything touches the database, so a
rejected call has written nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import timedelta

__all__ = [
    "AlreadyStarted",
    "ArgsDecodeError",
    "Cancel",
    "CannotClaim",
    "ConfigError",
    "DatabaseError",
    "DrainIncomplete",
    "DroverError",
    "DuplicateJob",
    "InvalidArgument",
    "InvalidInsertOpts",
    "InvalidJobArgs",
    "InvalidLimit",
    "InvalidResult",
    "InvalidTransition",
    "JobCancelled",
    "JobFailed",
    "JobSignal",
    "LeaseLost",
    "MigrationError",
    "NotFound",
    "NotInTransaction",
    "NotStarted",
    "PermissionDenied",
    "ResultTimeout",
    "SchemaMissing",
    "Snooze",
    "UnknownJobKind",
    "UnsupportedConnection",
]


class DroverError(Exception):
    """Root of every exception drover raises. Do not raise it directly."""


class InvalidArgument(DroverError, ValueError, TypeError):
    """An argument of the wrong type or out of range (a job id, a limit, a state, a pool).

    It is both a ``ValueError`` and a ``TypeError`` so either ``except`` keeps working.
    """


class ConfigError(InvalidArgument):
    """A configuration value drover refuses: unknown, of the wrong type, or out of range.

    Raised when a ``drover.Config`` (or a ``drover.Workers``
    registry) is built, so a deploy mistake stops the process before it
    runs anything; drover never silently replaces a value it was given.
    """


class InvalidLimit(InvalidArgument):
    """A `drover.Limit` (or an operator's override) that cannot be enforced.

    A limit of 0 or less, a period that is not a positive duration of at most
    a day, a partition field that is not an identifier (or, on a
    `JobArgs` class, not one of its fields). Raised where the limit is
    written, before anything reaches the database.
    """


class InvalidJobArgs(DroverError, TypeError):
    """The job arguments are not a ``drover.JobArgs`` instance or cannot be encoded.

    Raised before anything is written; the message names the kind (and, for a
    batch, the item index).
    """


class InvalidInsertOpts(DroverError, ValueError):
    """An insert option is invalid: an empty queue, a naive datetime, a bad unique key."""


class UnsupportedConnection(DroverError, TypeError):
    """``insert_tx`` was given an object it cannot resolve to a psycopg 3 connection."""


class NotInTransaction(DroverError):
    """``insert_tx`` was called on a connection in autocommit mode.

    The insert would commit on its own, which defeats the point of inserting
    inside the caller's transaction. Open one (``with conn.transaction():``,
    Django's ``transaction.atomic()``, SQLAlchemy's ``session.begin()``) or use
    ``drover.Client.insert``.
    """


class DuplicateJob(DroverError):
    """A job with the same ``(queue, kind, unique_key)`` is still waiting or running.

    The insert wrote nothing. In ``insert_tx`` the caller's transaction is left
    usable: drover detects the conflict without raising inside the database.
    """

    def __init__(self, message: str, *, queue: str, kind: str, unique_key: str) -> None:
        super().__init__(message)
        self.queue = queue
        self.kind = kind
        self.unique_key = unique_key


class MigrationError(DroverError):
    """A migration file is malformed, or applying one failed (it was rolled back)."""


class DatabaseError(DroverError):
    """The database refused a statement or could not be reached.

    The original psycopg exception is chained as ``__cause__``. Messages never
    contain the connection password.
    """


class SchemaMissing(DatabaseError):
    """drover's tables are missing from this database, or older than this drover.

    The message is the `problem` (what was being done, on which database, and
    which schema version was found) followed by the `remedy`, the command that
    fixes it. drover's own remedy names `drover migrate` and `drover.migrate(url)`;
    a framework integration that applies the schema its own way (Django's
    `manage.py migrate`) re-raises the error through `with_remedy`, so the
    message names the command its users run.

    Attributes:
        problem: What is wrong, without the remedy.
        remedy: What to run to fix it.
    """

    DEFAULT_REMEDY = "run `drover migrate` (or drover.migrate(url)) first"
    """The remedy drover names when no integration gives its own."""

    def __init__(self, problem: str, remedy: str = DEFAULT_REMEDY) -> None:
        # Both in args: a pickled error (a process pool, a test runner) comes back whole.
        super().__init__(problem, remedy)
        self.problem = problem
        self.remedy = remedy

    def __str__(self) -> str:
        return f"{self.problem}; {self.remedy}"

    def with_remedy(self, remedy: str) -> SchemaMissing:
        """The same error naming another remedy, with the same `__cause__`.

        Args:
            remedy: The command that fixes it in the caller's setting, e.g.
                "run `python manage.py migrate` first".
        """
        reworded = SchemaMissing(self.problem, remedy)
        reworded.__cause__ = self.__cause__
        return reworded


class PermissionDenied(DatabaseError):
    """The database role drover connected as lacks a privilege the action needs.

    PostgreSQL refused with SQLSTATE 42501 (insufficient_privilege): a producer
    role tried to claim, a reader to retry or cancel, any role but the owner to
    migrate. The message names the action, the role and the object refused, and
    points to `drover roles`, which prints the grants each role gets. Nothing
    the action would have written was committed.

    Attributes:
        action: What drover was doing ("claim jobs", "retry job").
        role: The role the connection authenticated as, when known.
    """

    def __init__(self, message: str, *, action: str = "", role: str | None = None) -> None:
        super().__init__(message)
        self.action = action
        self.role = role


class CannotClaim(PermissionDenied):
    """``Client.start``: the role the client connects as may not claim and run jobs.

    A client with workers checks, once at start, that its role holds what a
    worker writes (the claim's and the outcomes' columns of ``drover_jobs``,
    the clients registry, the queues and gates it reads), and refuses to
    start without it, rather than logging a refused claim on every poll. The
    message names the role, what it lacks and the fix: connect as a login in
    the worker role ``drover roles`` prints. Nothing was started or written.

    Attributes:
        missing: The privileges the role lacks, each as PostgreSQL would grant it.
    """

    def __init__(
        self, message: str, *, role: str | None = None, missing: Sequence[str] = ()
    ) -> None:
        super().__init__(message, action="start workers", role=role)
        self.missing = tuple(missing)


class NotFound(DroverError, LookupError):
    """No job has the requested id."""


class InvalidTransition(DroverError):
    """The job's state does not allow this operator action; nothing changed.

    ``state`` is the state the job was in (a ``drover.JobState``).
    """

    def __init__(self, message: str, *, state: object) -> None:
        super().__init__(message)
        self.state = state


class AlreadyStarted(DroverError):
    """``start()`` was called on a client that is running or has been stopped.

    A client's lifecycle runs once; build a new client to start again.
    """


class NotStarted(DroverError):
    """``stop()`` was called on a client that was never started."""


class DrainIncomplete(DroverError):
    """``stop()`` ran out of time with jobs still running.

    Their contexts were cancelled and the jobs were returned to the queue,
    claimable at once with the attempt they used still counted. Handlers that
    ignore cancellation may still be running when this is raised; whatever they
    write later is refused by the lease fence.

    Attributes:
        count: how many jobs were still running.
        job_ids: their ids, ascending.
    """

    def __init__(self, job_ids: Sequence[int]) -> None:
        self.job_ids: tuple[int, ...] = tuple(sorted(job_ids))
        self.count = len(self.job_ids)
        super().__init__(
            f"shutdown deadline reached: {self.count} job(s) still running, "
            f"returned to the queue: {list(self.job_ids)}"
        )


class UnknownJobKind(DroverError):
    """No worker is registered for a claimed job's kind.

    The attempt fails and the job is retried like any failure, so a rolling
    deploy heals: a worker that knows the kind picks it up on a later attempt.
    """


class ArgsDecodeError(DroverError):
    """A claimed job's stored args do not validate against its registered args class.

    No retry can fix stored args, so the job goes to ``dead`` at once with the
    validation message in its errors, whatever attempts it has left.
    """


class LeaseLost(DroverError):
    """``job.complete_tx`` was refused: this execution no longer holds the job.

    The job's lease lapsed and it was rescued (then perhaps re-claimed, or
    cancelled by an operator once it was waiting), or shutdown handed it
    back, so another execution owns it now, or it is finished. Raised inside
    the caller's transaction, before anything of drover's was written: let it propagate out of the
    ``transaction()`` / ``atomic()`` block so the handler's own writes roll
    back with it. The engine records no outcome for this execution.

    Attributes:
        job_id: the job.
        attempt: the attempt this execution held.
        state: the job's state now (``None`` if it no longer exists).
        current_attempt: the job's attempt now.
    """

    def __init__(
        self, job_id: int, attempt: int, state: str | None, current_attempt: int | None
    ) -> None:
        self.job_id = job_id
        self.attempt = attempt
        self.state = state
        self.current_attempt = current_attempt
        now = (
            "it no longer exists"
            if state is None
            else f"it is now {state}, attempt {current_attempt}"
        )
        super().__init__(
            f"job {job_id} attempt {attempt} is no longer this worker's to complete ({now}); "
            "roll the transaction back"
        )


class InvalidResult(DroverError, TypeError):
    """A handler returned a value drover cannot store as its job's result.

    Not JSON-encodable (a pydantic model, a dataclass, datetimes, UUIDs and
    the JSON types are), or larger than ``Config.max_result_bytes`` once
    encoded. Raised on the worker's thread as the handler returns, so the
    attempt fails like any handler error (and is retried by the policy); the
    message names the job's kind and what was wrong. ``Job.complete_tx``
    raises it before writing anything.
    """


class JobFailed(DroverError):
    """``Client.result``: the job ended without completing, so it has no result.

    Attributes:
        job_id: the job.
        state: ``"dead"`` (attempts exhausted, or a permanent failure) or
            ``"cancelled"`` (``JobCancelled``).
        error: the last recorded error message, or ``None``.
    """

    def __init__(self, job_id: int, state: str, error: str | None) -> None:
        self.job_id = job_id
        self.state = state
        self.error = error
        why = f": {error}" if error else ""
        super().__init__(f"job {job_id} ended {state} without a result{why}")


class JobCancelled(JobFailed):
    """``Client.result``: the job was cancelled (by its handler or an operator)."""


class ResultTimeout(DroverError, TimeoutError):
    """``Client.result``: the job had not ended when the timeout passed.

    The job is untouched: it may still complete later. Attributes: ``job_id``,
    ``state`` (its state when the wait gave up) and ``timeout`` in seconds.
    """

    def __init__(self, job_id: int, state: str, timeout: float) -> None:
        self.job_id = job_id
        self.state = state
        self.timeout = timeout
        super().__init__(f"job {job_id} had not ended after {timeout:g} s (it is {state})")


class JobSignal(DroverError):
    """Base of the exceptions a handler raises to steer its own job. Not an error.

    drover recognises a signal raised directly or chained as the cause of
    another exception (``raise SomeError(...) from drover.Cancel(...)``).
    """


class Snooze(JobSignal):
    """Raise from a handler to run the job again after ``delay``.

    The job goes back to ``scheduled`` with the claim's attempt refunded, so
    snoozing never brings a job closer to ``dead``, and nothing is appended to
    its errors. ``delay`` is a ``timedelta`` or seconds; negative means zero
    (claimable at once).
    """

    def __init__(self, delay: timedelta | float = 0) -> None:
        if isinstance(delay, timedelta):
            seconds = delay.total_seconds()
        elif isinstance(delay, int | float) and not isinstance(delay, bool):
            seconds = float(delay)
        else:
            raise InvalidArgument(
                f"Snooze delay must be a timedelta or seconds, not {type(delay).__name__}"
            )
        if not math.isfinite(seconds):
            raise InvalidArgument(f"Snooze delay must be finite, not {delay!r}")
        self.delay = timedelta(seconds=max(0.0, seconds))
        super().__init__(f"job snoozed for {self.delay}")


class Cancel(JobSignal):
    """Raise from a handler to end the job ``cancelled``: no further attempts.

    The reason is recorded in the job's errors. Cancel wins over Snooze when an
    exception chain carries both.
    """

    def __init__(self, reason: object = None) -> None:
        self.reason = "" if reason is None else str(reason)
        super().__init__(
            f"job cancelled by handler: {self.reason}"
            if self.reason
            else "job cancelled by handler"
        )


def describe_failure(exc: BaseException) -> str:
    """``"ValueError: boom"``: how drover records and logs a failed attempt.

    drover's own errors (unknown kind, undecodable args, Cancel, Snooze)
    already read as a sentence and are given bare; an exception without a
    message is just its class name.
    """
    text = str(exc)
    if isinstance(exc, DroverError) and text:
        return text
    name = type(exc).__qualname__
    return f"{name}: {text}" if text else name
