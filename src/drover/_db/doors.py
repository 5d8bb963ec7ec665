"""What a feature plugs into the kernel's statements: the claim's gates, the completion's watch.

The kernel's statements (``sql/queries/kernel.sql``, run by
``drover._db.kernel``) never name a feature (ADR 0045). A feature that must
change a claim or a completion does it through one of these doors, set up
when a ``PgKernelStore`` is made (``Doors``; the shipped features' are
``drover._db.features.FEATURES``):

- **A gate** (``Doors.gates``): a queue with a row in ``drover_gates`` whose
  ``via`` names the gate is refused by the kernel's claim, and claimed by the
  gate's own claim (limits: ``drover._db.limits.job_claim_limited``).
- **The watch** (``Doors.watched``): a job for which ``drover_watched(j)``
  holds (migration 0018) is refused by the kernel's completion; the claims
  it refused while still running with their attempt, and every outcome that
  carries a result, are written by this door's statement instead
  (``drover._db.completion.record_watched``), whose answer is final.
- **In-transaction hooks** (``Doors.on_rescue``, ``Doors.on_hand_back``):
  called on the rescue's and the hand-back's connection, in their
  transaction, after the outcomes were written (the duplicate ledger).

Also the fence's helpers the kernel's and the features' runners share.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from drover._db import Connection
from drover._db.namespace import Namespace
from drover._kernel.store import is_plain_completion, refusal
from drover._records import Outcome, Recorded
from drover.job import JobRow

__all__ = [
    "Doors",
    "GateClaim",
    "HandBackHook",
    "RescueHook",
    "WatchedWrite",
    "int_array",
    "is_plain_completion",
    "refusal",
]


class GateClaim(Protocol):
    """A gate's claim of a queue the kernel's claim refused: the rows claimed (any
    order) and the ids whose outcome frees capacity shared with other clients."""

    def __call__(
        self,
        conn: Connection,
        queue: str,
        limit: int,
        lease_seconds: float,
        holder: str | None,
        *,
        ns: Namespace,
    ) -> tuple[list[JobRow], frozenset[int]]: ...


class WatchedWrite(Protocol):
    """Write outcomes with every feature's branch; one result per outcome, in input order."""

    def __call__(
        self, conn: Connection, outcomes: Sequence[Outcome], *, ns: Namespace
    ) -> list[Recorded]: ...


class RescueHook(Protocol):
    """Called in the rescue's transaction with the rows it re-leased and the writes' results."""

    def __call__(
        self,
        conn: Connection,
        rows: Sequence[JobRow],
        results: Sequence[Recorded],
        *,
        by: str,
        ns: Namespace,
    ) -> None: ...


class HandBackHook(Protocol):
    """Called in the hand-back's transaction with the writes' results."""

    def __call__(
        self, conn: Connection, results: Sequence[Recorded], *, worker: str, ns: Namespace
    ) -> None: ...


@dataclass(frozen=True)
class Doors:
    """The features plugged into a ``PgKernelStore`` (see the module docstring)."""

    watched: WatchedWrite
    """Writes the outcomes the kernel's completion leaves to the features."""
    gates: Mapping[str, GateClaim] = field(default_factory=dict)
    """The claim of each gate, by its ``via`` in ``drover_gates``."""
    on_rescue: tuple[RescueHook, ...] = ()
    on_hand_back: tuple[HandBackHook, ...] = ()


def int_array(values: Sequence[int]) -> str:
    """An array literal of integers, for a ``%s::bigint[]`` or ``%s::int[]`` parameter.

    psycopg dumps a list element by element in Python; one join of the
    numbers' text is a C loop (ADR 0016).
    """
    return "{" + ",".join(map(str, values)) + "}"
