"""Queue records shared by :class:`drover.Client` and :class:`drover.Inspector`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

__all__ = ["QueueState"]


@dataclass(frozen=True, slots=True)
class QueueState:
    """A queue an operator has paused at some point (queues need no row to exist).

    ``paused_at`` is when the current pause began (``None`` once resumed);
    ``updated_at`` is the last pause or resume. Both are database-clock times.
    """

    __module__ = "drover"

    name: str
    paused_at: datetime | None
    updated_at: datetime

    @property
    def paused(self) -> bool:
        """True while no client claims from this queue."""
        return self.paused_at is not None
