"""The duplicate ledger: why a job ran more than once, recorded on the job itself (ADR 0037).

Delivery is at-least-once, so a job can run twice. When it does, drover
writes an entry on the job (``JobRow.ledger``, from ``Inspector.get_job``)
saying why, on the database clock:

- ``rescued``: the lease of attempt *n* expired while its worker (``worker``,
  the lease holder) held it, and a client's rescuer (``by``) moved the job on
  (``to``: ``retryable`` runs attempt *n+1*, ``dead`` or ``cancelled`` ends it).
  If that worker was alive after all, its handler ran on beside the re-run.
- ``handed_back``: shutdown ran out of time while attempt *n* still ran, and
  the worker returned the job to the queue (``to``): it runs again.
- ``stale_write``: a worker whose claim had moved on tried to write anyway
  (``write``: ``complete``, ``fail``, ``snooze``, ``cancel``, ``heartbeat``
  or ``progress``) and the fence refused it (``refused``: ``lease lost`` or
  ``not running``); ``state`` and ``state_attempt`` are the job as the
  refusal found it. The evidence of a duplicate execution, from the
  duplicate itself.

Only these rare paths write entries; a job that ran once has none. The
ledger keeps the last 50 entries.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = [
    "HANDED_BACK",
    "LEDGER_EVENTS",
    "LEDGER_MAX_ENTRIES",
    "RESCUED",
    "STALE_WRITE",
    "LedgerEntry",
    "parse_ledger",
]

RESCUED = "rescued"
HANDED_BACK = "handed_back"
STALE_WRITE = "stale_write"
LEDGER_EVENTS = (RESCUED, HANDED_BACK, STALE_WRITE)
LEDGER_MAX_ENTRIES = 50
"""How many entries a job keeps (migration 0016's ``drover_ledger_push``): the newest."""

# The states after which a job runs again: a rescue or hand-back to one of
# these is a re-run of the job.
_RERUN_STATES = frozenset({"available", "scheduled", "retryable"})


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One entry of a job's duplicate ledger (see the module docstring for the events).

    A value read from the database: it does not change when the job does.
    Fields an event does not use are ``None``.
    """

    event: str
    """``rescued``, ``handed_back`` or ``stale_write``."""
    at: datetime | None
    """When the database recorded it (its ``now()``)."""
    attempt: int
    """The attempt the entry is about: the one rescued, handed back, or fenced out."""
    worker: str | None = None
    """The worker the attempt belonged to, ``"<client id> (pid <pid> on <host>)"``."""
    by: str | None = None
    """``rescued``: the client whose rescuer moved the job on."""
    to: str | None = None
    """``rescued``/``handed_back``: the state the job moved to."""
    write: str | None = None
    """``stale_write``: what the fenced-out worker tried to write."""
    refused: str | None = None
    """``stale_write``: why the fence refused it (``lease lost``, ``not running``)."""
    state: str | None = None
    """``stale_write``: the job's state when the write was refused, if known."""
    state_attempt: int | None = None
    """``stale_write``: the job's attempt when the write was refused, if known."""

    @property
    def rerun(self) -> bool:
        """True when this entry sent the job to run again (a rescue or hand-back to a waiting
        state)."""
        return self.event in (RESCUED, HANDED_BACK) and self.to in _RERUN_STATES

    def describe(self) -> str:
        """One line for people: what happened, to which attempt, from which worker."""
        worker = self.worker or "an unknown worker"
        if self.event == RESCUED:
            by = f" by {self.by}" if self.by else ""
            return (
                f"attempt {self.attempt}: lease expired, rescued{by} from worker {worker}; "
                f"now {self.to}" + (" (a re-run of the job)" if self.rerun else "")
            )
        if self.event == HANDED_BACK:
            return (
                f"attempt {self.attempt}: handed back to the queue by worker {worker} at "
                f"shutdown; now {self.to}" + (" (a re-run of the job)" if self.rerun else "")
            )
        if self.event == STALE_WRITE:
            found = ""
            if self.state is not None:
                found = f"; the job was {self.state}"
                if self.state_attempt is not None:
                    found += f", attempt {self.state_attempt}"
            return (
                f"attempt {self.attempt}: stale {self.write} write from worker {worker} "
                f"refused ({self.refused}){found}"
            )
        return f"attempt {self.attempt}: {self.event}"

    def as_dict(self) -> dict[str, Any]:
        """The entry as JSON-ready values (``at`` in ISO 8601), for ``--json`` and the like."""
        return {
            "event": self.event,
            "at": None if self.at is None else self.at.isoformat(),
            "attempt": self.attempt,
            "worker": self.worker,
            "by": self.by,
            "to": self.to,
            "write": self.write,
            "refused": self.refused,
            "state": self.state,
            "state_attempt": self.state_attempt,
            "description": self.describe(),
        }


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _at(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def parse_ledger(text: str | None) -> tuple[LedgerEntry, ...]:
    """The entries of a stored ledger (its JSON text, ``None`` for none), oldest first.

    Lenient: a key it does not know is ignored and a malformed value reads
    as ``None``, so a ledger written by a newer drover still reads.
    """
    if not text:
        return ()
    raw = json.loads(text)
    if not isinstance(raw, list):
        return ()
    entries = []
    for item in raw:
        if not isinstance(item, dict):
            continue
        entries.append(
            LedgerEntry(
                event=str(item.get("event", "")),
                at=_at(item.get("at")),
                attempt=_int_or_none(item.get("attempt")) or 0,
                worker=_str_or_none(item.get("worker")),
                by=_str_or_none(item.get("by")),
                to=_str_or_none(item.get("to")),
                write=_str_or_none(item.get("write")),
                refused=_str_or_none(item.get("refused")),
                state=_str_or_none(item.get("state")),
                state_attempt=_int_or_none(item.get("state_attempt")),
            )
        )
    return tuple(entries)
