"""A job's error entries, parsed: which attempt, when, and whether the rescuer wrote it.

Separate from ``checker`` because both the checks (recovery, outcomes) and
the report's per-job timeline read them; ``RESCUE_PREFIX`` is re-exported by
``checker``, where callers import it from.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from drover.faults.harness.history import JobFinal

__all__ = ["RESCUE_PREFIX", "ErrorEntry", "error_entries", "parse_at"]

RESCUE_PREFIX = "drover: lease expired"
"""An error entry whose ``error`` starts with this is the rescuer's, not the handler's."""


def parse_at(value: object) -> float | None:
    """An error entry's ``at`` (ISO-8601) as epoch seconds; naive means UTC; None if unreadable."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


@dataclass(frozen=True)
class ErrorEntry:
    """One error entry of a job, parsed."""

    attempt: int | None
    at: float | None
    error: str

    @property
    def rescue(self) -> bool:
        return self.error.startswith(RESCUE_PREFIX)


def error_entries(job: JobFinal) -> list[ErrorEntry]:
    out = []
    for raw in job.errors:
        attempt = raw.get("attempt")
        error = raw.get("error")
        out.append(
            ErrorEntry(
                attempt=attempt
                if isinstance(attempt, int) and not isinstance(attempt, bool)
                else None,
                at=parse_at(raw.get("at")),
                error=error if isinstance(error, str) else "",
            )
        )
    return out
