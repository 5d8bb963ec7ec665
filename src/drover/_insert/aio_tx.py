"""Inserting inside a caller's asyncio transaction: the path behind ``AsyncClient.insert_tx``
and ``AsyncClient.insert_many_tx``.

The order is the synchronous path's (``drover._insert.tx``): the input is
validated and encoded first (the same pure encoder), so bad input is refused
before the connection is touched; then the connection is resolved and
checked to be in a transaction; then the statements run in that
transaction. drover never commits it, and the wake-up is queued inside it,
so listeners hear of the job only if it commits.
"""

from __future__ import annotations

from collections.abc import Iterable

from drover._db.aio import (
    aio_insert,
    aio_insert_many,
    aio_insert_unique,
    resolve_async_connection,
)
from drover._db.namespace import DEFAULT, Namespace
from drover._insert.encode import encode_batch, encode_insert
from drover._insert.identity import identity_of, needs_identity
from drover._insert.tracing import stamp, stamp_batch
from drover.job import InsertItem, InsertOpts, JobArgs, JobRow

__all__ = ["insert_many_tx", "insert_tx"]


async def insert_tx(
    conn: object,
    args: JobArgs,
    opts: InsertOpts | None,
    *,
    notify: bool,
    members: str | None = None,
    ns: Namespace = DEFAULT,
) -> JobRow:
    """Insert one job through the caller's async connection; with ``notify`` it wakes at commit.

    With a unique identity, debounce or throttle (ADR 0031) the job holding
    the identity may come back instead, flagged ``duplicate``. ``members``:
    the trace context to stamp the job with (``drover._insert.tracing``).
    """
    params = encode_insert(args, opts)
    if members:
        params = stamp(params, members)
    if needs_identity(opts):
        assert opts is not None
        identity = identity_of(args, params, opts)
        found = await resolve_async_connection(conn)
        return await aio_insert_unique(found, params, identity, notify=notify, ns=ns)
    found = await resolve_async_connection(conn)
    return await aio_insert(found, params, notify=notify, ns=ns)


async def insert_many_tx(
    conn: object,
    items: Iterable[InsertItem],
    *,
    notify: bool,
    members: str | None = None,
    ns: Namespace = DEFAULT,
) -> list[JobRow]:
    """Insert a batch with COPY through the caller's async connection; rows in input order.

    An empty batch makes no round trip (the connection is still resolved and
    checked, so a misuse fails the same way whatever the batch holds).
    ``members``: the trace context to stamp each job with.
    """
    batch = encode_batch(items)
    found = await resolve_async_connection(conn)
    if not batch.params:
        return []
    if members:
        batch = stamp_batch(batch, members)
    return await aio_insert_many(found, batch, caller_tx=True, notify=notify, ns=ns)
