"""An operator's request to cancel a running job, as stored on the job (ADR 0030).

``Inspector.cancel_job`` (``drover cancel``, the status page's Cancel) on a
running job does not change its state: it stores the request on the row
and tells the job's worker, and whatever write ends the attempt ends it
``cancelled``. Until then ``JobRow.cancel_request`` (read by
``Inspector.get_job`` and ``Client.get_job``) says that a cancel is
pending, why, and whether the worker process is to be replaced.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

__all__ = ["CancelRequested", "parse_cancel_request"]


@dataclass(frozen=True, slots=True)
class CancelRequested:
    """A pending request to cancel a running job: a value read with the row.

    ``reason`` is the operator's (or ``None``); ``hard`` asks the worker
    process to be replaced if the handler has not returned ``grace`` after
    the request; ``requested_at`` is the database's clock at the request.
    The request stays on the row after the attempt ends (the errors entry of
    the cancelled attempt names it); a redrive of the job clears it.
    """

    reason: str | None
    hard: bool
    grace: timedelta
    requested_at: datetime | None

    def describe(self) -> str:
        """One line for people: when, why, and how hard."""
        when = f" at {self.requested_at.isoformat()}" if self.requested_at else ""
        why = f": {self.reason}" if self.reason else ""
        how = (
            f" (hard: the worker process is replaced after {self.grace.total_seconds():g} s)"
            if self.hard
            else ""
        )
        return f"cancel requested{when}{why}{how}"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready values (``requested_at`` in ISO 8601, ``grace`` in seconds)."""
        return {
            "reason": self.reason,
            "hard": self.hard,
            "grace": self.grace.total_seconds(),
            "requested_at": None if self.requested_at is None else self.requested_at.isoformat(),
        }


def parse_cancel_request(text: str | None) -> CancelRequested | None:
    """The request stored on a row (its JSON text; ``None``: none), leniently.

    A malformed value reads as ``None`` fields rather than failing a read of
    the job: the column is written by drover's own statement only.
    """
    if not text:
        return None
    raw = json.loads(text)
    if not isinstance(raw, dict):
        return None
    reason = raw.get("reason")
    grace = raw.get("grace")
    at = raw.get("requested_at")
    requested_at = None
    if isinstance(at, str):
        try:
            requested_at = datetime.fromisoformat(at)
        except ValueError:
            requested_at = None
    return CancelRequested(
        reason=reason if isinstance(reason, str) else None,
        hard=raw.get("hard") is True,
        grace=timedelta(seconds=float(grace))
        if isinstance(grace, int | float) and not isinstance(grace, bool)
        else timedelta(0),
        requested_at=requested_at,
    )
