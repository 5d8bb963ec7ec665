"""Cluster-wide limits: the Python side of ``sql/queries/limits.sql``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

import psycopg
from psycopg.rows import tuple_row

from drover._db import Connection
from drover._db.errors import translate
from drover._db.namespace import DEFAULT, Namespace
from drover._db.queries import query
from drover._db.rows import row_from_db
from drover.errors import DatabaseError, LeaseLost
from drover.job import JobRow
from drover.limits import Limit, LimitKey, LimitState, PartitionUse

__all__ = [
    "limit_clear",
    "limit_declare",
    "limit_delete",
    "limit_list",
    "limit_set",
    "limit_take_start",
]


def _key_params(key: LimitKey) -> dict[str, object]:
    return {"scope": key.scope, "target": key.target, "part": key.partition_by or ""}


def limit_declare(
    conn: Connection, declared: Sequence[tuple[LimitKey, Limit]], *, ns: Namespace = DEFAULT
) -> None:
    """Write what code declares, keeping operators' overrides (one statement)."""
    if not declared:
        return
    with translate(f"declare {len(declared)} limits"), conn.cursor() as cur:
        cur.execute(
            query("limit_declare", ns),
            {
                "scopes": [k.scope for k, _ in declared],
                "targets": [k.target for k, _ in declared],
                "parts": [k.partition_by or "" for k, _ in declared],
                "concs": [lim.concurrency for _, lim in declared],
                "rates": [lim.rate for _, lim in declared],
                "pers": [lim.per.total_seconds() if lim.rate else None for _, lim in declared],
                "starts": [lim.counts == "starts" for _, lim in declared],
            },
        )


def limit_set(
    conn: Connection,
    key: LimitKey,
    concurrency: int | None,
    rate: int | None,
    per: timedelta | None,
    *,
    ns: Namespace = DEFAULT,
) -> LimitState:
    """Override the values given (creating the limit if need be); the limit as written.

    One transaction: the write locks the row, so the read-back sees what this
    write made, whatever another operator does meanwhile (a delete waits for
    the commit). Wakes the fetchers at commit.
    """
    params = _key_params(key) | {
        "conc": concurrency,
        "rate": rate,
        "per": None if per is None else per.total_seconds(),
    }
    with (
        translate(f"set limit {key}"),
        conn.transaction(),
        conn.cursor(row_factory=tuple_row) as cur,
    ):
        cur.execute(query("limit_set", ns), params)
        written = cur.fetchone()
        assert written is not None  # an upsert always yields its row
        states = _list(cur, written[0], ns=ns)
        if not states:
            # Only something inside this transaction (a trigger) could remove it.
            raise DatabaseError(f"set limit {key}: the limit {key} was not found after writing it")
        return states[0]


def limit_clear(
    conn: Connection, key: LimitKey, *, ns: Namespace = DEFAULT
) -> Literal["cleared", "removed"] | None:
    """Drop the override: "cleared" (the declaration applies) or "removed" (none).

    A limit no code declares is removed (whether or not an operator set
    values on it); a declared limit without an override is left as it is
    (None). The row is locked first, then updated or deleted, in one
    transaction. Wakes the fetchers when something changed.
    """
    params = _key_params(key)
    with (
        translate(f"clear limit {key}"),
        conn.transaction(),
        conn.cursor(row_factory=tuple_row) as cur,
    ):
        cur.execute(query("limit_lock", ns), params)
        found = cur.fetchone()
        if found is None:
            return None
        declared, overridden = found
        if not declared:
            cur.execute(query("limit_delete", ns), params)
            return "removed"
        if not overridden:
            return None
        cur.execute(query("limit_clear", ns), params)
        return "cleared"


def limit_delete(conn: Connection, key: LimitKey, *, ns: Namespace = DEFAULT) -> bool:
    """Remove the limit whole; False when there was none."""
    with translate(f"delete limit {key}"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("limit_delete", ns), _key_params(key))
        return cur.fetchone() is not None


def _limit_or_none(
    present: bool,
    conc: int | None,
    rate: int | None,
    per: float | None,
    part: str | None,
    starts: bool = False,
) -> Limit | None:
    if not present or (conc is None and rate is None):
        return None
    return Limit(
        concurrency=conc,
        rate=rate,
        per=None if rate is None or per is None else timedelta(seconds=per),
        partition_by=part,
        counts="starts" if starts and rate is not None else "claims",
    )


def _list(
    cur: psycopg.Cursor[tuple[Any, ...]], limit_id: int | None, *, ns: Namespace = DEFAULT
) -> list[LimitState]:
    cur.execute(query("limit_list", ns), {"id": limit_id})
    out = []
    for (
        scope, target, part, conc, rate, per,
        has_decl, d_conc, d_rate, d_per,
        has_over, o_conc, o_rate, o_per,
        running, started, parts, full,
        b_parts, b_running, b_started, b_full,
        updated_at, starts,
    ) in cur.fetchall():  # fmt: skip
        by = part or None
        out.append(
            LimitState(
                key=LimitKey(scope, target, by),
                concurrency=conc,
                rate=rate,
                per=timedelta(seconds=per),
                declared=_limit_or_none(has_decl, d_conc, d_rate, d_per, by, starts),
                # An override of the rate alone keeps the period in force.
                override=_limit_or_none(
                    has_over, o_conc, o_rate, per if o_per is None else o_per, by, starts
                ),
                running=running,
                started=started,
                partitions=parts,
                partitions_full=full,
                busiest=tuple(
                    PartitionUse(value=v, running=r, started=s, full=f)
                    for v, r, s, f in zip(b_parts, b_running, b_started, b_full, strict=True)
                ),
                updated_at=updated_at,
                counts="starts" if starts else "claims",
            )
        )
    return out


def limit_list(conn: Connection, *, ns: Namespace = DEFAULT) -> list[LimitState]:
    """Every limit, with its use now, by scope, target and partition field."""
    with translate("list limits"), conn.cursor(row_factory=tuple_row) as cur:
        return _list(cur, None, ns=ns)


def limit_take_start(
    conn: Connection, job_id: int, attempt: int, *, ns: Namespace = DEFAULT
) -> tuple[datetime | None, float | None]:
    """Take the start of claim ``(job_id, attempt)`` under the rate limits that count
    starts (``Limit(counts="starts")``): ``(the start's time, None)`` once recorded (or
    when no such limit applies), ``(None, seconds to wait)`` while a window is full.
    One round trip, autocommit.

    Raises:
        drover.LeaseLost: the job is no longer running with ``attempt`` (its handler
            must not run; the engine records no outcome for it).
    """
    with translate(f"take the start of job {job_id}"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("limit_take_start", ns), {"job": job_id, "attempt": attempt})
        found = cur.fetchone()
    assert found is not None  # the function always answers one row
    started, wait, state, now_attempt = found
    if started is None and wait is None:
        raise LeaseLost(job_id, attempt, state, now_attempt)
    return started, wait


def job_claim_limited(
    conn: Connection,
    queue: str,
    limit: int,
    lease_seconds: float,
    holder: str | None = None,
    *,
    ns: Namespace = DEFAULT,
) -> tuple[list[JobRow], frozenset[int]]:
    """The 'limits' gate's claim (``drover._db.doors.GateClaim``, ADR 0025): up to
    ``limit`` due jobs of ``queue`` admitted under every limit that applies, in one
    round trip; the rows, and the ids claimed under a concurrency limit (their
    outcomes free capacity other clients wait for). As correct without limits,
    only slower than the kernel's claim."""
    params = {"queue": queue, "limit": limit, "lease_seconds": lease_seconds, "holder": holder}
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("job_claim_limited", ns), params)
        found = cur.fetchall()
    limited = frozenset(r[0] for r in found if r[-1])
    return [row_from_db(r[:-1]) for r in found], limited
