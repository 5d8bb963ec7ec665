"""Writing the duplicate ledger from the engine's rare paths (ADR 0037).

The kernel's completer and heartbeat report the writes the fence refused
through their ``stale`` hook (ADR 0045), which ``stale_writes_hook`` makes;
the progress writer records its own here. An entry is worth less than the
work around it: a failure to write one is logged and never retried, and
never stops the service that noticed it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from drover._db.ledger import LedgerNote, stale_write_note
from drover._kernel.kit import StaleWrite
from drover.errors import DroverError

__all__ = ["record_notes", "stale_writes_hook"]


def record_notes(
    log: logging.Logger,
    append: Callable[[Sequence[LedgerNote]], set[int]],
    notes: Sequence[LedgerNote],
) -> None:
    """Append ``notes`` with ``append``; log (WARNING) whatever could not be recorded.

    An entry is not recorded when its job is gone, or when another
    transaction held the job's row locked at that instant (the append skips
    it rather than wait), or when the statement failed.
    """
    if not notes:
        return
    try:
        written = append(notes)
    except DroverError:
        log.warning(
            "recording %d entr%s in the duplicate ledger failed",
            len(notes),
            "y" if len(notes) == 1 else "ies",
            extra={"event": "ledger_not_recorded", "jobs": [n.job_id for n in notes]},
            exc_info=True,
        )
        return
    for note in notes:
        if note.job_id not in written:
            log.warning(
                "job %d: duplicate ledger entry not recorded (the job is gone or its row was "
                "locked): %s",
                note.job_id,
                note.entry,
                extra={"event": "ledger_not_recorded", "job_id": note.job_id, "entry": note.entry},
            )


def stale_writes_hook(
    log: logging.Logger,
    append: Callable[[Sequence[LedgerNote]], set[int]],
    worker: str,
) -> Callable[[Sequence[StaleWrite]], None]:
    """The kernel's ``stale`` hook that writes each refused write in its job's ledger.

    ``worker`` names this client in the entries.
    """

    def record(stale: Sequence[StaleWrite]) -> None:
        notes = [
            stale_write_note(
                s.job_id,
                s.attempt,
                worker=worker,
                write=s.write,
                refused=s.refused,
                state=s.state,
                state_attempt=s.state_attempt,
            )
            for s in stale
        ]
        record_notes(log, append, notes)

    return record
