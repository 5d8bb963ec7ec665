"""Test helpers: see what a test enqueued and work those jobs in the test's own thread.

On a real database, like the rest of drover:

    def test_sign_up_sends_a_welcome(drover_client, drover_jobs):   # the pytest plugin
        sign_up(drover_client, "ada@example.com")
        drover_jobs.assert_enqueued(kind="send_email", args={"to": "ada@example.com"})
        [worked] = drover_jobs.drain()
        assert worked.state is drover.JobState.COMPLETED

Outside pytest, ``with drover.testing.inline(client) as jobs:`` gives the same
helper. A ``Jobs`` sees only jobs inserted after it was made (ids above
its watermark), so tests sharing a database do not see, or run, each other's
jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from drover._kernel import disposition
from drover._kernel.claims import Claim
from drover._records import Outcome
from drover.client import Client
from drover.errors import InvalidArgument
from drover.job import JobArgs, JobRow, JobState
from drover.log import job_scope

__all__ = ["Jobs", "Worked", "inline"]

_LEASE_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class Worked:
    """One attempt ``Jobs.drain`` ran: the job as claimed, and where it went."""

    job: JobRow
    """The row as claimed (``attempt`` is this attempt's number)."""
    state: JobState
    """``completed``, ``retryable``, ``scheduled`` (snoozed), ``cancelled`` or ``dead``."""
    error: str | None
    """The recorded error of a failed attempt, else ``None``."""


def _matches(row: JobRow, kind: str | None, queue: str | None, args: object) -> bool:
    if kind is not None and row.kind != kind:
        return False
    if queue is not None and row.queue != queue:
        return False
    if args is None:
        return True
    if isinstance(args, JobArgs):
        return bool(row.args == json.loads(args.model_dump_json()))
    if isinstance(args, Mapping):
        return isinstance(row.args, Mapping) and all(
            k in row.args and row.args[k] == v for k, v in args.items()
        )
    raise InvalidArgument(f"args must be a JobArgs instance or a mapping, not {args!r}")


class Jobs:
    """The jobs a test inserted, with assertions, and a way to run them synchronously.

    ``client`` is the ``drover.Client`` under test (it need not be
    started; ``drain`` uses its workers, middleware and retry policy).
    Everything reads the database, so jobs inserted with ``insert_tx`` count
    once their transaction has committed.
    """

    def __init__(self, client: Client, *, after: int | None = None) -> None:
        if not isinstance(client, Client):
            raise InvalidArgument(f"Jobs needs a drover.Client, not {type(client).__name__}")
        self.client = client
        self._store = client._store
        if after is None:
            after = self._store.max_job_id()
        self.after = after
        """Only jobs with a larger id are this helper's."""

    def enqueued(
        self,
        *,
        kind: str | None = None,
        queue: str | None = None,
        args: JobArgs | Mapping[str, Any] | None = None,
        state: JobState | str | None = None,
    ) -> list[JobRow]:
        """This test's jobs, oldest first, filtered by whatever is given.

        ``args`` is a ``JobArgs`` (equal once encoded) or a mapping (these keys
        have these values; other keys may exist).
        """
        rows = self._store.jobs_after(self.after)
        wanted = None if state is None else JobState(state)
        return [
            r
            for r in rows
            if _matches(r, kind, queue, args) and (wanted is None or r.state is wanted)
        ]

    def assert_enqueued(
        self,
        *,
        kind: str | None = None,
        queue: str | None = None,
        args: JobArgs | Mapping[str, Any] | None = None,
        count: int | None = None,
    ) -> list[JobRow]:
        """Fail unless a matching job was inserted (exactly ``count`` of them if given).

        Returns the matching rows. The failure message lists what was inserted.
        """
        found = self.enqueued(kind=kind, queue=queue, args=args)
        if (count is None and not found) or (count is not None and len(found) != count):
            wanted = {"kind": kind, "queue": queue, "args": args, "count": count}
            raise AssertionError(
                f"expected jobs matching {_describe(wanted)}, found {len(found)}; "
                f"this test inserted: {self._summary()}"
            )
        return found

    def assert_not_enqueued(
        self,
        *,
        kind: str | None = None,
        queue: str | None = None,
        args: JobArgs | Mapping[str, Any] | None = None,
    ) -> None:
        """Fail if a matching job was inserted."""
        found = self.enqueued(kind=kind, queue=queue, args=args)
        if found:
            wanted = {"kind": kind, "queue": queue, "args": args}
            raise AssertionError(
                f"expected no job matching {_describe(wanted)}, found {len(found)}: "
                f"{[(r.id, r.kind, r.args) for r in found]}"
            )

    def drain(self, *, queues: Sequence[str] | None = None, limit: int = 1000) -> list[Worked]:
        """Run this test's due jobs now, in this thread, until none is left; return each attempt.

        An ``async def`` worker's job runs to its end on a fresh event loop
        in this thread (``asyncio.run``), so call ``drain`` from sync code:
        inside a running event loop it raises ``drover.InvalidArgument``
        before claiming anything.

        Each job goes through the client's middleware and workers as in a
        started client, and its outcome is written with the same fenced
        statement. Jobs the handlers insert are run too. A retry or a snooze
        is due later, so it is not run again here (insert with
        ``InsertOpts(max_attempts=1)`` to see a failure end ``dead``). At most
        ``limit`` attempts; ``queues`` restricts which queues are worked.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidArgument(f"limit must be a positive int, not {limit!r}")
        config = self.client.config
        chain = self.client._chain
        async_chain = self.client._async_chain
        is_async = config.workers.is_async
        if async_chain is not None and _loop_running():
            raise InvalidArgument(
                "Jobs.drain runs async jobs to their end with asyncio.run, which cannot run "
                "inside a running event loop: call drain() from sync code (a plain test "
                "function), or await asyncio.to_thread(jobs.drain)"
            )
        worked: list[Worked] = []
        while len(worked) < limit:
            rows = self._store.claim_after(
                self.after, queues, min(100, limit - len(worked)), _LEASE_SECONDS
            )
            if not rows:
                break
            for row in sorted(rows, key=lambda r: (-r.priority, r.scheduled_at, r.id)):
                claim = Claim(
                    row,
                    store=self._store.kernel,
                    context_args={"read_parents": self._store.parent_results},
                )
                error: BaseException | None = None
                try:
                    with job_scope(row):
                        if async_chain is not None and is_async(row.kind):
                            # On a fresh event loop in this thread, until it returns.
                            asyncio.run(async_chain(claim.context, row))  # type: ignore[arg-type]
                        else:
                            chain(claim.context, row)
                except BaseException as exc:  # as the runner: any exception is an outcome
                    error = exc
                decision = disposition.decide(row, claim, error, policy=config.retry_policy)
                disposition.report(config.logger, row, decision)
                outcome = decision.outcome
                if outcome is not None:
                    self._store.record_outcomes([outcome], "record job outcome")
                worked.append(Worked(row, *self._result(row, outcome)))
        return worked

    def _result(self, row: JobRow, outcome: Outcome | None) -> tuple[JobState, str | None]:
        """What the job's row says now: a complete_tx outcome is settled in the database."""
        if outcome is not None and not outcome.settles_tx:
            error = outcome.error.get("error") if outcome.error else None
            return outcome.state, error
        current = self._store.operator.get_job(row.id)
        errors = current.errors if current is not None else ()
        state = current.state if current is not None else JobState.RUNNING
        error = errors[-1].get("error") if errors and state is not JobState.COMPLETED else None
        return state, error

    def _summary(self) -> str:
        rows = self._store.jobs_after(self.after)
        if not rows:
            return "nothing"
        return ", ".join(f"{r.kind} on {r.queue} {json.dumps(r.args)}" for r in rows[:20])


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _describe(wanted: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in wanted.items() if v is not None) or "anything"


@contextlib.contextmanager
def inline(client: Client) -> Iterator[Jobs]:
    """A ``Jobs`` for the block: it sees what the block inserts and runs it on ``drain()``.

    Nothing runs on its own: call ``jobs.drain()`` where the test wants the
    work done, then assert on the database.
    """
    yield Jobs(client)
