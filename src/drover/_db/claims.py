"""A running client's statements on its claims: claim, record outcomes, renew leases, rescue.

Each function is one round trip whatever the number of jobs, runs on a
connection the caller borrowed from drover's pool, and commits through that
connection's autocommit or the pool's context manager.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from psycopg.rows import tuple_row

from drover._db import Connection
from drover._db.errors import translate
from drover._db.namespace import DEFAULT, Namespace
from drover._db.queries import query
from drover._db.rows import row_from_db
from drover._records import Outcome, Recorded, Renewal, WriteResult
from drover.job import JobRow, JobState

__all__ = [
    "job_claim",
    "job_claim_expired",
    "job_claim_limited",
    "job_extend_leases",
    "job_record_outcomes",
]


def job_claim(
    conn: Connection,
    queue: str,
    limit: int,
    lease_seconds: float,
    holder: str | None = None,
    *,
    ns: Namespace = DEFAULT,
) -> list[JobRow]:
    """Claim up to ``limit`` due jobs from ``queue``, sorted by id, for ``holder``."""
    return job_claim_limited(conn, queue, limit, lease_seconds, holder, ns=ns)[0]


def job_claim_limited(
    conn: Connection,
    queue: str,
    limit: int,
    lease_seconds: float,
    holder: str | None = None,
    *,
    expect_limits: bool = False,
    ns: Namespace = DEFAULT,
) -> tuple[list[JobRow], frozenset[int], bool]:
    """Claim as ``job_claim`` does; also the ids claimed under a concurrency limit,
    and whether the limited claim ran.

    Without limits for the queue this is one statement. When a limit applies,
    that statement claims nothing and says so (a row of NULLs), and the claim
    goes through the limited one: two round trips (ADR 0025). A caller that
    saw limits on its last claim passes ``expect_limits`` to go straight to
    the limited claim, which is as correct without limits, only slower.
    """
    if not 0 < limit <= 2**31 - 1:
        raise ValueError(f"claim limit must be in 1..2147483647, not {limit}")
    params = {"queue": queue, "limit": limit, "lease_seconds": lease_seconds, "holder": holder}
    limited: frozenset[int] = frozenset()
    with translate(f"claim jobs from queue {queue!r}"), conn.cursor(row_factory=tuple_row) as cur:
        found = []
        if not expect_limits:
            cur.execute(query("job_claim", ns), params)
            found = cur.fetchall()
        through_limits = expect_limits or bool(found and found[-1][0] is None)
        if through_limits:
            cur.execute(query("job_claim_limited", ns), params)
            found = cur.fetchall()
            limited = frozenset(r[0] for r in found if r[-1])
            found = [r[:-1] for r in found]
        rows = [row_from_db(r) for r in found]
    rows.sort(key=lambda r: r.id)
    return rows, limited, through_limits


def _int_array(values: Sequence[int]) -> str:
    """An array literal of integers, for a ``%s::bigint[]`` or ``%s::int[]`` parameter.

    psycopg dumps a list element by element in Python; one join of the
    numbers' text is a C loop (ADR 0016).
    """
    return "{" + ",".join(map(str, values)) + "}"


def _refusal(state: str | None) -> WriteResult:
    if state is None:
        return WriteResult.NOT_FOUND
    if state != JobState.RUNNING.value:
        # State is checked before attempt: a handed-back or finished job is
        # "not running" even if it was also re-claimed since.
        return WriteResult.NOT_RUNNING
    return WriteResult.LEASE_LOST


def _plain_completion(o: Outcome) -> bool:
    return (
        o.state is JobState.COMPLETED
        and o.error is None
        and o.scheduled_at is None
        and not o.refund_attempt
    )


def job_record_outcomes(
    conn: Connection, outcomes: Sequence[Outcome], *, ns: Namespace = DEFAULT
) -> list[Recorded]:
    """Write many outcomes in one statement; report per job whether its fence held.

    A batch of plain completions (the usual case) takes a leaner statement
    and a second round trip only if some claim was refused.
    """
    if not outcomes:
        return []
    if all(_plain_completion(o) for o in outcomes):
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
    # The statement's rows come in the join's order, not the input's: put them back
    # in input order (the KernelStore rule), matched by claim.
    by_claim = {(r[0], r[1]): r[2:] for r in rows}
    recorded = []
    for o in outcomes:
        applied, state, current_attempt, cancelled = by_claim[(o.id, o.attempt)]
        result = WriteResult.APPLIED if applied else _refusal(state)
        recorded.append(Recorded(o, result, state, current_attempt, cancelled))
    return recorded


def _results(outcomes: Sequence[Outcome]) -> list[str | None] | str:
    # unnest() pads a shorter array with NULLs, so a batch without results
    # (the usual one) sends an empty array instead of a NULL per job.
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
                "ids": _int_array([o.id for o in outcomes]),
                "attempts": _int_array([o.attempt for o in outcomes]),
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
            recorded.append(Recorded(o, _refusal(state), state, attempt))
    return recorded


def job_extend_leases(
    conn: Connection,
    held: Sequence[tuple[int, int]],
    lease_seconds: float,
    *,
    ns: Namespace = DEFAULT,
) -> list[Renewal]:
    """Renew the leases of the ``(id, attempt)`` claims still current; one result per claim."""
    if not held:
        return []
    with translate(f"extend {len(held)} job leases"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(
            query("job_extend_leases", ns),
            {
                "ids": [h[0] for h in held],
                "attempts": [h[1] for h in held],
                "lease_seconds": lease_seconds,
            },
        )
        return [
            Renewal(id_, until, bool(current), request)
            for id_, until, current, request in cur.fetchall()
        ]


def job_claim_expired(
    conn: Connection, limit: int, lease_seconds: float, *, ns: Namespace = DEFAULT
) -> list[JobRow]:
    """Re-lease up to ``limit`` running jobs whose lease expired (attempt unchanged)."""
    with translate("claim expired jobs"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(
            query("job_claim_expired", ns), {"limit": limit, "lease_seconds": lease_seconds}
        )
        return [row_from_db(r) for r in cur.fetchall()]
