"""drover's own features, plugged into the kernel's statements (``drover._db.doors``).

``FEATURES`` is what ``Store.kernel`` gives every ``PgKernelStore``: the
limits' gate (``drover_gates`` rows with via ``'limits'``, kept by a trigger
on ``drover_limits``), the features' completion for watched jobs and results
(``completion.sql``), and the duplicate ledger's rescue and hand-back
entries (ADR 0037), written in those operations' transactions.
"""

from __future__ import annotations

from drover._db.completion import record_watched
from drover._db.doors import Doors
from drover._db.ledger import note_hand_backs, note_rescues
from drover._db.limits import job_claim_limited

__all__ = ["FEATURES", "LIMITS_GATE"]

LIMITS_GATE = "limits"
"""The ``via`` of the limits' rows in ``drover_gates`` (migration 0018)."""

FEATURES = Doors(
    watched=record_watched,
    gates={LIMITS_GATE: job_claim_limited},
    on_rescue=(note_rescues,),
    on_hand_back=(note_hand_backs,),
)
