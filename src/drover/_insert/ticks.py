"""A periodic job's tick through the insert funnel (ADR 0011, ADR 0047)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from drover._db.ticks import Leadership, LeasedLeadership, Tick
from drover._insert.encode import encode_insert
from drover._insert.funnel import Prepared, prepare_params, through
from drover.insert_middleware import InsertMiddleware
from drover.job import InsertOpts, JobArgs, JobRow

__all__ = ["insert_tick"]


def insert_tick(
    chain: Sequence[InsertMiddleware],
    leadership: Leadership | LeasedLeadership,
    args: JobArgs,
    opts: InsertOpts,
    *,
    periodic_id: str,
    fire: datetime,
    upto: datetime,
    next_fire: datetime | None,
) -> Tick:
    """Encode the tick's job, pass it through ``chain`` and write it with the watermark.

    The write is ``leadership.fire_tick``: the watermark's move and the job's
    insert in one transaction. The middleware sees the job, then its row, or
    no row when the watermark already covered ``fire`` or a waiting job held
    the tick's key.
    """
    fired: list[Tick] = []

    def write(prepared: Prepared) -> list[JobRow]:
        tick = leadership.fire_tick(
            prepared.payload,
            periodic_id=periodic_id,
            fire=fire,
            upto=upto,
            next_fire=next_fire,
        )
        fired.append(tick)
        return [] if tick.row is None else [tick.row]

    through(chain, prepare_params(encode_insert(args, opts), "periodic"), write)
    return fired[0]
