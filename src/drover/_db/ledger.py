"""The duplicate ledger's statements: the Python side of ``sql/queries/ledger.sql`` (ADR 0037).

Only the rare paths call ``job_ledger_append`` (a rescue, a hand-back, a
refused stale write); the normal claim and completion never do. The rescue's
and the hand-back's entries are written by hooks the kernel's store calls in
those operations' transactions (``note_rescues``, ``note_hand_backs``:
``drover._db.doors.Doors``). The entries
are built here from what the caller knows, so every writer spells them alike.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NamedTuple

from psycopg.rows import tuple_row

from drover._db import Connection
from drover._db.errors import translate
from drover._db.namespace import DEFAULT, Namespace
from drover._db.plans import ONE, Execute, Plan, run
from drover._db.queries import query
from drover._db.rows import row_from_db
from drover._records import Outcome, Recorded, WriteResult
from drover.cancel_request import CancelRequested, parse_cancel_request
from drover.job import JobRow, JobState
from drover.ledger import HANDED_BACK, RESCUED, STALE_WRITE, LedgerEntry, parse_ledger

__all__ = [
    "LedgerNote",
    "LedgeredRow",
    "handed_back_note",
    "job_get_with_ledger",
    "job_ledger_append",
    "note_hand_backs",
    "note_rescues",
    "rescued_note",
    "stale_write_note",
    "write_label",
]


class LedgeredRow(JobRow):
    """A ``JobRow`` read with its ledger (``Inspector.get_job``).

    Equal to a ``JobRow`` with the same fields: the ledger is not a field
    (claims and listings never read it), it rides in the instance's
    dictionary, so ``_replace`` gives a row without it.
    """

    # No __slots__: a tuple subclass cannot have non-empty slots, and the
    # ledger needs somewhere to live.

    @property
    def ledger(self) -> tuple[LedgerEntry, ...]:
        """The job's duplicate ledger, oldest first, as read with the row."""
        found: tuple[LedgerEntry, ...] = self.__dict__.get("_ledger", ())
        return found

    @property
    def cancel_request(self) -> CancelRequested | None:
        """An operator's request to cancel the job while it ran, as read with the row."""
        found: CancelRequested | None = self.__dict__.get("_cancel_request")
        return found


class LedgerNote(NamedTuple):
    """One entry to append to one job's ledger (the database adds ``at``)."""

    job_id: int
    entry: dict[str, Any]


def write_label(outcome: Outcome) -> str:
    """What a refused outcome tried to write: complete, fail, snooze or cancel."""
    if outcome.refund_attempt:
        return "snooze"
    if outcome.state is JobState.COMPLETED:
        return "complete"
    if outcome.state is JobState.CANCELLED:
        return "cancel"
    return "fail"


def rescued_note(row: JobRow, *, by: str, to: str) -> LedgerNote:
    """A rescue of ``row``'s attempt (its lease holder is still ``leased_by``)."""
    return LedgerNote(row.id, {"event": RESCUED, "attempt": row.attempt, "by": by, "to": to})


def handed_back_note(job_id: int, attempt: int, *, worker: str, to: str) -> LedgerNote:
    """An attempt returned to the queue at shutdown while its handler still ran."""
    return LedgerNote(
        job_id, {"event": HANDED_BACK, "attempt": attempt, "worker": worker, "to": to}
    )


def stale_write_note(
    job_id: int,
    attempt: int,
    *,
    worker: str,
    write: str,
    refused: str,
    state: str | None = None,
    state_attempt: int | None = None,
) -> LedgerNote:
    """A write of a claim that moved on, refused by the fence."""
    entry: dict[str, Any] = {
        "event": STALE_WRITE,
        "attempt": attempt,
        "worker": worker,
        "write": write,
        "refused": refused,
    }
    if state is not None:
        entry["state"] = state
    if state_attempt is not None:
        entry["state_attempt"] = state_attempt
    return LedgerNote(job_id, entry)


def job_ledger_append(
    conn: Connection, notes: Sequence[LedgerNote], *, ns: Namespace = DEFAULT
) -> set[int]:
    """Append every note to its job's ledger in one statement; the ids written.

    A job that no longer exists, or whose row another transaction holds
    locked, is not written (see ``job_ledger_append`` in ledger.sql).
    A rescue entry's worker is the row's ``leased_by``, read by the statement.
    """
    if not notes:
        return set()
    grouped: dict[int, list[dict[str, Any]]] = {}
    for note in notes:
        grouped.setdefault(note.job_id, []).append(note.entry)
    with (
        translate(f"record {len(notes)} duplicate ledger entries"),
        conn.cursor(row_factory=tuple_row) as cur,
    ):
        cur.execute(
            query("job_ledger_append", ns),
            {
                "ids": list(grouped),
                "entries": [json.dumps(entries) for entries in grouped.values()],
            },
        )
        return {id_ for (id_,) in cur.fetchall()}


def job_get_with_ledger(
    conn: Connection, job_id: int, *, ns: Namespace = DEFAULT
) -> LedgeredRow | None:
    """The job with ``job_id`` and its ledger, or ``None``."""
    return run(conn, get_with_ledger_plan(job_id, ns=ns), f"get job {job_id}")


def get_with_ledger_plan(job_id: int, *, ns: Namespace = DEFAULT) -> Plan[LedgeredRow | None]:
    """``job_get_with_ledger`` as a plan (the asyncio client runs it too)."""
    found = yield Execute(query("job_get_with_ledger", ns), {"id": job_id}, ONE)
    if found is None:
        return None
    row = LedgeredRow._make(row_from_db(found[:-2]))
    row.__dict__["_ledger"] = parse_ledger(found[-2])
    row.__dict__["_cancel_request"] = parse_cancel_request(found[-1])
    return row


def _moved_to(recorded: Recorded) -> str:
    return "cancelled" if recorded.cancelled else recorded.outcome.state.value


def note_rescues(
    conn: Connection,
    rows: Sequence[JobRow],
    results: Sequence[Recorded],
    *,
    by: str,
    ns: Namespace = DEFAULT,
) -> None:
    """The rescue's hook (``Doors.on_rescue``): a ledger entry for each rescue applied,
    in the rescue's transaction, while its rows are still locked."""
    by_id = {row.id: row for row in rows}
    applied = [r for r in results if r.result is WriteResult.APPLIED]
    job_ledger_append(
        conn,
        [rescued_note(by_id[r.outcome.id], by=by, to=_moved_to(r)) for r in applied],
        ns=ns,
    )


def note_hand_backs(
    conn: Connection, results: Sequence[Recorded], *, worker: str, ns: Namespace = DEFAULT
) -> None:
    """The hand-back's hook (``Doors.on_hand_back``): a ledger entry for each hand-back
    applied, in the hand-back's transaction."""
    applied = [r for r in results if r.result is WriteResult.APPLIED]
    job_ledger_append(
        conn,
        [
            handed_back_note(r.outcome.id, r.outcome.attempt, worker=worker, to=_moved_to(r))
            for r in applied
        ],
        ns=ns,
    )
