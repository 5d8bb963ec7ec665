"""Inserts with a unique identity, debounce or throttle: the Python side of
``sql/queries/unique.sql`` (ADR 0031).

One statement for any number of items: ``drover_insert_unique`` (migration
0015) inserts them one after another and says, for each, whether it
inserted a job or found the one holding the identity. The unique index
decides every race; the function retries an item whose holder left its
states between the insert and the read, so the answer is exact.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from psycopg.rows import tuple_row

from drover._db import Connection
from drover._db.errors import translate
from drover._db.namespace import DEFAULT, Namespace
from drover._db.plans import ALL, ONE, Execute, Plan, run
from drover._db.queries import query
from drover._db.rows import new_row, row_from_db
from drover._records import Identity, JobInsertParams
from drover.job import JobRow, JobState
from drover.unique import UniqueIdentity, states_of

__all__ = [
    "ExistingRow",
    "insert_one",
    "job_insert_unique",
    "job_unique_identity",
    "unique_batch_plan",
    "unique_item",
    "unique_one_plan",
    "unique_rows",
]


class ExistingRow(JobRow):
    """A ``JobRow`` an insert returned instead of inserting: ``duplicate`` is True.

    Equal to a ``JobRow`` with the same fields (the flag is the class, not a field).
    """

    __slots__ = ()

    @property
    def duplicate(self) -> bool:
        """True: the insert found this job holding its identity."""
        return True


_json_string: Callable[[str], str] = json.encoder.encode_basestring_ascii


def unique_item(params: JobInsertParams, identity: Identity | None) -> str:
    quote = _json_string
    head = (
        f"[{quote(params.kind)},{quote(params.queue)},{params.args_json},{params.max_attempts},"
        f"{'null' if params.scheduled_at is None else quote(params.scheduled_at.isoformat())},"
        f"{'null' if params.unique_key is None else quote(params.unique_key)},{params.priority}"
    )
    decorated = bool(params.tags) or params.meta is not None
    if identity is None:
        if not decorated:
            return head + "]"
        tail = "null,null,null,null,null"
    else:
        period = "null" if identity.period_us is None else str(identity.period_us)
        window = "null" if identity.window_us is None else str(identity.window_us)
        tail = f'"{identity.hash}",{period},{identity.states},"{identity.form}",{window}'
    if not decorated:
        return f"{head},{tail}]"
    tags = "[" + ",".join(quote(t) for t in params.tags) + "]"
    meta = "null" if params.meta is None else params.meta
    return f"{head},{tail},{tags},{meta}]"


def job_insert_unique(
    conn: Connection,
    batch: Sequence[JobInsertParams],
    identities: Mapping[int, Identity],
    *,
    notify: bool,
    ns: Namespace = DEFAULT,
) -> list[JobRow | None]:
    """Insert ``batch`` in order, each item with its identity (if any); one round trip.

    Returns one row per item: the inserted job, an ``ExistingRow`` (the job
    that held the identity, as that item left it: a debounce has already
    replaced its args), or ``None`` for an item without an identity whose
    ``unique_key`` was taken. With ``notify`` each inserted job's queue is
    woken when the transaction commits. Runs in the connection's current
    transaction (on an autocommit connection, one of its own).
    """
    action = f"insert {len(batch)} unique job{'s' if len(batch) != 1 else ''}"
    return run(conn, unique_batch_plan(batch, identities, notify=notify, ns=ns), action)


def unique_batch_plan(
    batch: Sequence[JobInsertParams],
    identities: Mapping[int, Identity],
    *,
    notify: bool,
    ns: Namespace = DEFAULT,
) -> Plan[list[JobRow | None]]:
    """``job_insert_unique`` as a plan (``drover._db.plans``)."""
    document = ",".join(unique_item(p, identities.get(i)) for i, p in enumerate(batch))
    found = yield Execute(query("job_insert_unique", ns), (f"[{document}]", notify), ALL)
    return unique_rows(found)


def unique_rows(found: Sequence[tuple[Any, ...]]) -> list[JobRow | None]:
    """The rows of ``job_insert_unique``'s answer, one per item (see ``job_insert_unique``)."""
    rows: list[JobRow | None] = []
    for values in found:
        if values[1] is None:
            rows.append(None)
            continue
        row = row_from_db(values[1:])
        rows.append(ExistingRow(*row) if values[0] else row)
    return rows


def insert_one(
    conn: Connection,
    params: JobInsertParams,
    identity: Identity,
    *,
    notify: bool,
    ns: Namespace = DEFAULT,
) -> JobRow:
    """Insert one job with ``identity``, or return the job holding it (an ``ExistingRow``).

    ``unique_one_plan`` carried out on ``conn`` (``drover._db.aio`` carries
    out the same plan on an async connection).
    """
    return run(
        conn,
        unique_one_plan(params, identity, notify=notify, ns=ns),
        f"insert job kind {params.kind!r}",
    )


def unique_one_plan(
    params: JobInsertParams, identity: Identity, *, notify: bool, ns: Namespace = DEFAULT
) -> Plan[JobRow]:
    """One job with ``identity``: inserted, or the job holding it (an ``ExistingRow``).

    A plain unique identity that is free takes one INSERT as lean as
    ``job_insert_now`` (``job_insert_identified_now``; with a period or a
    time, ``job_insert_identified``); a held one costs a second statement
    that reads the holder (``job_unique_holder``). Debounce, throttle and the
    rare race where the holder left its states in between go through
    ``drover_insert_unique``.
    """
    # Tags and metadata ride only in drover_insert_unique's items, so the
    # lean statements below stay as short as a plain insert's.
    lean = identity.form == "u" and not params.tags and params.meta is None
    if lean and identity.period_us is None and params.scheduled_at is None:
        now_row = yield Execute(
            query("job_insert_identified_now", ns),
            (
                params.kind,
                params.queue,
                params.args_json,
                params.max_attempts,
                params.priority,
                identity.hash,
                identity.states,
                notify,
            ),
            ONE,
        )
        if now_row is not None:
            return new_row(params, now_row[0], now_row[1])
    elif lean:
        found = yield Execute(
            query("job_insert_identified", ns),
            (
                params.kind,
                params.queue,
                params.args_json,
                params.max_attempts,
                params.priority,
                params.scheduled_at,
                params.scheduled_at,
                identity.hash,
                identity.period_us,
                identity.states,
                notify,
            ),
            ONE,
        )
        if found is not None:
            id_, created_at, state, scheduled_at, _ = found
            return new_row(params, id_, created_at, JobState(state), scheduled_at)
    if lean:
        # Held: read the holder. If it left its states meanwhile (or a new
        # period began), the function below inserts or finds, exactly.
        holder = yield Execute(
            query("job_unique_holder", ns), (identity.hash, identity.period_us), ONE
        )
        if holder is not None:
            return ExistingRow(*row_from_db(holder))
    rows = yield from unique_batch_plan([params], {0: identity}, notify=notify, ns=ns)
    row = rows[0]
    assert row is not None
    return row


def job_unique_identity(
    conn: Connection, job_id: int, *, ns: Namespace = DEFAULT
) -> UniqueIdentity | bool | None:
    """The job's identity; ``None`` if it has none, ``False`` if there is no such job."""
    with translate("read a job's unique identity"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("job_unique_identity", ns), {"id": job_id})
        found = cur.fetchone()
    if found is None:
        return False
    hash_hex, bucket, mask, held = found
    if hash_hex is None:
        return None
    return UniqueIdentity(hash_hex, bucket, states_of(mask), bool(held))
