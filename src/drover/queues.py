"""Queue records shared by ``drover.Client`` and ``drover.Inspector``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from drover.errors import InvalidInsertOpts
from drover.job import InsertOpts

__all__ = ["QueueState", "QueueSummary", "check_queue_name"]


@dataclass(frozen=True, slots=True)
class QueueState:
    """A queue an operator has paused at some point (queues need no row to exist).

    ``paused_at`` is when the current pause began (``None`` once resumed);
    ``updated_at`` is the last pause or resume. Both are database-clock times.
    """

    name: str
    paused_at: datetime | None
    updated_at: datetime

    @property
    def paused(self) -> bool:
        """True while no client claims from this queue."""
        return self.paused_at is not None


@dataclass(frozen=True, slots=True)
class QueueSummary:
    """One queue as an operator sees it: paused or not, its backlog, its oldest wait.

    Listed by ``drover.Inspector.queues`` for every queue that has a
    waiting, running or dead job, or a pause record. ``counts`` has every
    state the depth gauges publish (available, scheduled, retryable,
    running, dead), zeros included; ``oldest_age_seconds`` is the age of the
    oldest job claimable now, ``None`` when none is (or the queue is paused).
    """

    name: str
    paused_at: datetime | None
    counts: Mapping[str, int]
    oldest_age_seconds: float | None

    @property
    def paused(self) -> bool:
        """True while no client claims from this queue."""
        return self.paused_at is not None


def check_queue_name(name: object) -> str:
    """``name`` if it is a valid queue name (the rules of ``InsertOpts.queue``).

    Raises:
        drover.InvalidInsertOpts: not a str, empty, too long, or holding NUL
            or a lone surrogate; the message says "queue name".
    """
    if not isinstance(name, str):
        raise InvalidInsertOpts(f"queue name must be a str, not {type(name).__name__}")
    try:
        InsertOpts(queue=name)
    except InvalidInsertOpts as exc:
        raise InvalidInsertOpts(str(exc).replace("InsertOpts.queue", "queue name")) from None
    return name
