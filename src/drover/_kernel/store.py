"""What the kernel needs from a store: the operations of at-least-once delivery, and nothing else.

The kernel (``drover._kernel``) claims, dispatches, completes, renews leases,
rescues and hands back. It reaches the jobs only through a ``KernelStore``:
PostgreSQL's (``drover._db.kernel.PgKernelStore``, the statements of
``sql/queries/kernel.sql``) or the in-memory one (``drover._kernel.memory``),
which implements the same rules for tests and for running the engine's logic
without a server. The conformance suite (``tests/kernel/``) runs the same
behaviours against both.

The rules every implementation keeps (ADR 0002, ADR 0045):

- **Claim.** ``claim`` takes up to ``limit`` due jobs (state ``available``,
  ``scheduled`` or ``retryable`` with ``scheduled_at`` at or before the
  store's clock) of one queue that is not paused: the highest priority first,
  then the oldest ``scheduled_at``, then the lowest id. Each claimed job
  becomes ``running`` with ``attempt + 1``, ``attempted_at`` and
  ``leased_until = now + lease`` on the store's clock, and ``leased_by`` the
  holder. Rows come back sorted by id. Two concurrent claims never return
  the same job.
- **Insert.** ``insert`` stores the job ``available`` with ``scheduled_at``
  now, or ``scheduled`` when its ``scheduled_at`` is later than the store's
  clock (a past time means now); attempt 0, no errors, ``{}`` metadata,
  ``created_at`` now. A ``unique_key`` held by an active job of the same
  queue and kind raises ``drover.DuplicateJob`` and inserts nothing.
- **Fence.** Every write made for a claim (``record``, ``extend_leases``,
  ``hand_back``, ``complete_in_tx``) applies only while the job is
  ``running`` with the claim's attempt; otherwise it changes nothing and
  reports why (``WriteResult``: not found, not running, lease lost; the
  state is checked before the attempt). A batch's fences are all judged
  before any of it is written: of a stale and a current claim of one job in
  one batch, only the current one applies. A refusal reports the row's
  state and attempt as they were when the write began (its snapshot, taken
  before any wait for a row lock), except a batch of plain completions
  (no error, time or refund), which reports them as they are after it
  (PostgreSQL's completion statement reads them in a second statement),
  and a claim the snapshot still saw current (the write waited for another
  transaction), which PostgreSQL writes again through the features'
  statement in a new snapshot: it reports the row as it is after the wait.
  The two readings differ only for a stale and a current claim of one job
  in one batch, or a write that waited for another transaction (see Row
  locks).
- **Outcomes.** ``completed``, ``cancelled`` and ``dead`` are terminal
  (``finalized_at = now``); ``retryable`` and ``scheduled`` wait until their
  ``scheduled_at`` (``None``: now). An outcome's ``error`` is appended to the
  job's ``errors``; ``refund_attempt`` gives the claim's attempt back
  (a snooze, never below 0). ``leased_until`` is cleared. A completion
  stores its ``result`` (``None``: none). Results come back one per
  outcome, in input order.
- **Renewal.** ``extend_leases`` moves ``leased_until`` to now + lease for
  the claims still current and reports, per claim, the new expiry (``None``:
  not renewed this time) and whether the claim is still current. A row
  another transaction holds locked is skipped for that beat (reported
  current, not renewed).
- **Rescue.** ``rescue`` takes ``running`` jobs whose lease has passed
  (oldest expiry first, at most ``limit``, skipping rows another
  transaction holds locked), re-leases them so no other sweep takes them,
  and records ``decide(row)`` for each, fenced on the row's attempt (a
  rescue never spends an attempt). ``decide`` sees the re-leased row; if it
  raises, nothing has changed.
- **Hand-back.** ``hand_back`` records shutdown's outcomes, fenced like any
  other, for claims whose handler may still be running.
- **Completion in the caller's transaction.** ``complete_in_tx`` writes the
  completion in the caller's open transaction, visible to nobody else until
  it commits and gone if it rolls back; its ``finalized_at`` is the
  transaction's ``now()`` (when it began). A refused claim raises
  ``drover.LeaseLost`` and leaves the transaction usable. Until the
  transaction ends the row is locked: a claim or rescue skips it, a renewal
  does not renew it, and ``record``, ``hand_back`` or another transaction's
  ``complete_in_tx`` of the job waits for it to end and then finds what it
  did (a transaction left open holds them as long).

Times are the store's clock (PostgreSQL's ``now()``); the kernel sends
durations, never instants, except the ``scheduled_at`` of a retry or snooze,
which the client computes.

Sessions: the fetcher and the completer each keep a session between their
rounds (``claim_session``, ``outcome_session``): a held connection in
PostgreSQL. A session is used by one thread; ``release`` gives up what it
holds when its loop goes idle. Everything else is one call, thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol

from drover._records import JobInsertParams, Outcome, Recorded, Renewal, WriteResult
from drover.job import JobRow, JobState

__all__ = [
    "ClaimSession",
    "Claimed",
    "KernelStore",
    "OutcomeSession",
    "is_plain_completion",
    "refusal",
]


def refusal(state: JobState | str | None) -> WriteResult:
    """Why a fenced write was refused, from the row's state (``None``: no row).

    The state is checked before the attempt: a handed-back or finished job is
    "not running" even if it was also re-claimed since. Every store reports so.
    """
    if state is None:
        return WriteResult.NOT_FOUND
    if state != JobState.RUNNING and state != JobState.RUNNING.value:
        return WriteResult.NOT_RUNNING
    return WriteResult.LEASE_LOST


def is_plain_completion(o: Outcome) -> bool:
    """A completion without an error, a wake time or a refund (a result may ride along):
    what a store may write with its leaner completion."""
    return (
        o.state is JobState.COMPLETED
        and o.error is None
        and o.scheduled_at is None
        and not o.refund_attempt
    )


class Claimed(NamedTuple):
    """A claim round's rows, and when its statement was sent (``time.monotonic()``)."""

    rows: list[JobRow]
    sent: float
    """Taken just before the claim was sent: the store's lease runs from a later
    instant, so ``sent + lease`` (the local deadline) never outlives it."""
    wakes: frozenset[int] = frozenset()
    """Ids whose outcome frees capacity shared with other clients (a cluster-wide
    concurrency limit): once written, fetchers are woken."""


class ClaimSession(Protocol):
    """The fetcher's session: claim rounds on one kept connection. One thread uses it."""

    def claim(
        self,
        queue: str,
        limit: int,
        lease_seconds: float,
        holder: str,
        *,
        completions: Sequence[Outcome] = (),
        landed: Callable[[list[Recorded]], None] | None = None,
    ) -> Claimed:
        """Claim up to ``limit`` due jobs of ``queue`` for ``holder`` (see the module rules).

        ``completions`` (plain completions without a result; a busy fetcher's
        finished jobs) are written first, each fenced as ``record`` writes it,
        in the claim's own statement where the store can (ADR 0058). The
        final results of those it settled go to ``landed`` (required with
        them), in input order, before the claim returns or raises; one it
        leaves out (PostgreSQL's claim leaves out every claim it refused) is
        the caller's to write with ``record``. If the call raises before
        ``landed`` was called, none of them was written.
        """
        ...

    def release(self) -> None:
        """Give up the kept connection (the loop is going idle)."""
        ...


class OutcomeSession(Protocol):
    """The completer's session: outcome batches on one kept connection. One thread uses it."""

    def record(self, outcomes: Sequence[Outcome]) -> list[Recorded]:
        """Write ``outcomes`` (one statement in PostgreSQL), each fenced; one result each,
        in input order."""
        ...

    def release(self) -> None:
        """Give up the kept connection (the loop is going idle)."""
        ...


class KernelStore(Protocol):
    """The kernel's operations on the jobs (see the module docstring for the rules)."""

    def claim_session(self) -> ClaimSession:
        """A new session for one fetcher."""
        ...

    def outcome_session(self) -> OutcomeSession:
        """A new session for one completer."""
        ...

    def extend_leases(
        self, held: Sequence[tuple[int, int]], lease_seconds: float, *, deadline: float
    ) -> tuple[float, list[Renewal]]:
        """Renew the ``(id, attempt)`` claims still current; ``(time.monotonic() when sent,
        one renewal per claim)``. A call longer than ``deadline`` seconds fails."""
        ...

    def rescue(
        self, limit: int, lease_seconds: float, decide: Callable[[JobRow], Outcome], *, by: str
    ) -> tuple[int, list[Recorded]]:
        """Re-lease up to ``limit`` expired claims and record ``decide(row)`` for each;
        ``(rows found, the writes' results)``. ``by`` names the rescuing client."""
        ...

    def hand_back(self, outcomes: Sequence[Outcome], *, worker: str) -> list[Recorded]:
        """Record shutdown's hand-back outcomes (``worker``: this client); their results."""
        ...

    def complete_in_tx(self, conn: object, job_id: int, attempt: int, result: str | None) -> object:
        """Complete the claim in the caller's open transaction on ``conn``, fenced;
        raise ``drover.LeaseLost`` when the claim is no longer current. Returns the
        transaction's handle, which ``transaction_open`` takes."""
        ...

    def transaction_open(self, conn: object) -> bool:
        """True while ``conn`` (a handle ``complete_in_tx`` returned) is inside a transaction."""
        ...

    def insert(self, params: JobInsertParams) -> JobRow:
        """Insert one job, committed on return (the kernel's one insert)."""
        ...

    def get(self, job_id: int) -> JobRow | None:
        """The job as stored now, or ``None``."""
        ...
