"""Writing the duplicate ledger from the engine's rare paths (ADR 0037).

The completer, the heartbeat and the progress writer each learn of a stale
write of their own; they record it here. An entry is worth less than the
work around it: a failure to write one is logged and never retried, and
never stops the service that noticed it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from drover._db.ledger import LedgerNote
from drover.errors import DroverError

__all__ = ["record_notes"]


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
