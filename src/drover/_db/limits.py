"""Cluster-wide limits: the Python side of ``sql/queries/limits.sql``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from psycopg.rows import tuple_row

from drover._db import Connection
from drover._db.errors import translate
from drover._db.queries import query
from drover.limits import Limit, LimitKey, LimitState

__all__ = ["limit_clear", "limit_declare", "limit_delete", "limit_list", "limit_set"]


def _key_params(key: LimitKey) -> dict[str, object]:
    return {"scope": key.scope, "target": key.target, "part": key.partition_by or ""}


def limit_declare(conn: Connection, declared: Sequence[tuple[LimitKey, Limit]]) -> None:
    """Write what code declares, keeping operators' overrides (one statement)."""
    if not declared:
        return
    with translate(f"declare {len(declared)} limits"), conn.cursor() as cur:
        cur.execute(
            query("limit_declare"),
            {
                "scopes": [k.scope for k, _ in declared],
                "targets": [k.target for k, _ in declared],
                "parts": [k.partition_by or "" for k, _ in declared],
                "concs": [lim.concurrency for _, lim in declared],
                "rates": [lim.rate for _, lim in declared],
                "pers": [lim.per.total_seconds() if lim.rate else None for _, lim in declared],
            },
        )


def limit_set(
    conn: Connection,
    key: LimitKey,
    concurrency: int | None,
    rate: int | None,
    per: timedelta | None,
) -> None:
    """Override the values given; create the limit if it does not exist. Wakes the fetchers."""
    params = _key_params(key) | {
        "conc": concurrency,
        "rate": rate,
        "per": None if per is None else per.total_seconds(),
    }
    with translate(f"set limit {key}"), conn.cursor() as cur:
        cur.execute(query("limit_set"), params)


def limit_clear(conn: Connection, key: LimitKey) -> bool:
    """Drop the override (and an undeclared limit); False when there was none."""
    with translate(f"clear limit {key}"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("limit_clear"), _key_params(key))
        return cur.fetchone() is not None


def limit_delete(conn: Connection, key: LimitKey) -> bool:
    """Remove the limit whole; False when there was none."""
    with translate(f"delete limit {key}"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("limit_delete"), _key_params(key))
        return cur.fetchone() is not None


def _limit_or_none(
    present: bool, conc: int | None, rate: int | None, per: float | None, part: str | None
) -> Limit | None:
    if not present or (conc is None and rate is None):
        return None
    return Limit(
        concurrency=conc,
        rate=rate,
        per=None if rate is None or per is None else timedelta(seconds=per),
        partition_by=part,
    )


def limit_list(conn: Connection) -> list[LimitState]:
    """Every limit, with its use now, by scope and target."""
    with translate("list limits"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("limit_list"))
        rows = cur.fetchall()
    out = []
    for (
        scope, target, part, conc, rate, per,
        has_decl, d_conc, d_rate, d_per,
        has_over, o_conc, o_rate, o_per,
        running, started, full, updated_at,
    ) in rows:  # fmt: skip
        by = part or None
        out.append(
            LimitState(
                key=LimitKey(scope, target, by),
                concurrency=conc,
                rate=rate,
                per=timedelta(seconds=per),
                declared=_limit_or_none(has_decl, d_conc, d_rate, d_per, by),
                override=_limit_or_none(has_over, o_conc, o_rate, o_per, by),
                running=running,
                started=started,
                partitions_full=full,
                updated_at=updated_at,
            )
        )
    return out
