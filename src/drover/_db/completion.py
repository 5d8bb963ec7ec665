"""The features' completion: the Python side of ``sql/queries/completion.sql`` (ADR 0045).

``record_watched`` is the watch's door (``drover._db.doors.Doors.watched``)
of the shipped features: it writes outcomes with every branch the kernel's
completion leaves out (an operator's cancel request, a result, a waiter's
notification, dependents), fenced on the claim as the kernel's are. The
kernel's runners (``drover._db.kernel``) send it what their statements
refused while the row still ran with the claim's attempt, and every outcome
carrying a result; with no feature in use it never runs.

Each call is one round trip (two when a plain completion is refused, to
read why), on a connection the caller holds.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from psycopg.rows import tuple_row

from drover._db import Connection
from drover._db.doors import int_array, is_plain_completion, refusal
from drover._db.errors import translate
from drover._db.namespace import DEFAULT, Namespace
from drover._db.queries import query
from drover._records import Outcome, Recorded, WriteResult

__all__ = ["record_watched"]


def record_watched(
    conn: Connection, outcomes: Sequence[Outcome], *, ns: Namespace = DEFAULT
) -> list[Recorded]:
    """Write ``outcomes`` with every feature's branch; one result per outcome, in input order.

    A batch of plain completions takes ``job_complete_many`` (and a second
    round trip only if some claim was refused), any other batch
    ``job_record_outcomes``.
    """
    if not outcomes:
        return []
    if all(is_plain_completion(o) for o in outcomes):
        return _complete_many(conn, outcomes, ns=ns)
    params = {
        "ids": [o.id for o in outcomes],
        "attempts": [o.attempt for o in outcomes],
        "states": [o.state.value for o in outcomes],
        "scheduled_at": [o.scheduled_at for o in outcomes],
        "errors": [None if o.error is None else json.dumps(o.error) for o in outcomes],
        "refund_attempt": [o.refund_attempt for o in outcomes],
        "results": _results(outcomes),
    }
    with (
        translate(f"record {len(outcomes)} job outcomes"),
        conn.cursor(row_factory=tuple_row) as cur,
    ):
        cur.execute(query("job_record_outcomes", ns), params)
        rows = cur.fetchall()
    by_claim = {
        (id_, attempt): (
            WriteResult.APPLIED if applied else refusal(state),
            state,
            current_attempt,
            cancelled,
        )
        for id_, attempt, applied, state, current_attempt, cancelled in rows
    }
    recorded = []
    for o in outcomes:
        result, state, current_attempt, cancelled = by_claim[(o.id, o.attempt)]
        recorded.append(Recorded(o, result, state, current_attempt, cancelled))
    return recorded


def _results(outcomes: Sequence[Outcome]) -> list[str | None] | str:
    # unnest() pads a shorter array with NULLs, so a batch without results
    # sends an empty array instead of a NULL per job.
    if all(o.result is None for o in outcomes):
        return "{}"
    return [o.result for o in outcomes]


def _complete_many(
    conn: Connection, outcomes: Sequence[Outcome], *, ns: Namespace = DEFAULT
) -> list[Recorded]:
    with (
        translate(f"record {len(outcomes)} job outcomes"),
        conn.cursor(row_factory=tuple_row) as cur,
    ):
        cur.execute(
            query("job_complete_many", ns),
            {
                "ids": int_array([o.id for o in outcomes]),
                "attempts": int_array([o.attempt for o in outcomes]),
                "results": _results(outcomes),
            },
        )
        refused: set[tuple[int, int]] = set()
        cancelled: set[tuple[int, int]] = set()
        for id_, attempt, on_request in cur.fetchall():
            (cancelled if on_request else refused).add((id_, attempt))
        current: dict[int, tuple[str, int]] = {}
        if refused:
            cur.execute(query("job_current_states", ns), ([i for i, _ in refused],))
            current = {id_: (state, attempt) for id_, state, attempt in cur.fetchall()}
    recorded = []
    for o in outcomes:
        if (o.id, o.attempt) not in refused:
            on_request = bool(cancelled) and (o.id, o.attempt) in cancelled
            recorded.append(Recorded(o, WriteResult.APPLIED, None, None, on_request))
        else:
            state, attempt = current.get(o.id, (None, None))
            recorded.append(Recorded(o, refusal(state), state, attempt))
    return recorded
