"""Job queries: the Python side of ``sql/queries/jobs.sql``.

Every function takes the connection to run on and returns drover types (built
by ``drover._db.rows``). None of them commits, rolls back or changes
session settings: the caller (the client, or the application for
``insert_tx``) owns the transaction.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any, LiteralString

from psycopg.rows import tuple_row

from drover._db import Connection
from drover._db.errors import translate
from drover._db.insert_one import duplicate_error, insert_statement, inserted_row, job_insert
from drover._db.namespace import DEFAULT, Namespace
from drover._db.plans import ALL, ONE, Atomic, Copy, Execute, Plan, run
from drover._db.queries import query
from drover._db.rows import new_row, new_rows, row_from_db
from drover._db.unique import unique_batch_plan
from drover._records import EncodedBatch, JobInsertParams, UniformBatch
from drover.errors import DuplicateJob
from drover.job import JobRow, JobState

__all__ = [
    "copy_chunks",
    "copy_statement",
    "decoration",
    "duplicate_error",
    "insert_statement",
    "inserted_row",
    "job_insert",
    "job_insert_many",
    "job_insert_rows",
    "many_action",
    "many_plan",
    "staged_row",
]


# json.dumps for a str, minus the encoder object json.dumps sets up per call.
_json_string: Callable[[str], str] = json.encoder.encode_basestring_ascii


def decoration(p: JobInsertParams) -> str:
    """``,tags,meta`` as JSON, appended to a job's array by the statements that take one."""
    tags = ",".join(_json_string(tag) for tag in p.tags)
    return f",[{tags}],{'null' if p.meta is None else p.meta}"


def job_insert_rows(
    conn: Connection, batch: Sequence[JobInsertParams], *, ns: Namespace = DEFAULT
) -> list[JobRow | None]:
    """Insert single jobs of several callers in one statement; ``None`` where a unique key lost.

    One round trip and, on an autocommit connection, one transaction for the
    whole list. Results are in input order.
    """
    quote = _json_string
    document = ",".join(
        f"[{quote(p.kind)},{quote(p.queue)},{p.args_json},{p.max_attempts},"
        f"{'null' if p.scheduled_at is None else quote(p.scheduled_at.isoformat())},"
        f"{'null' if p.unique_key is None else quote(p.unique_key)},{p.priority}"
        f"{decoration(p) if p.tags or p.meta is not None else ''}]"
        for p in batch
    )
    with translate(f"insert {len(batch)} jobs"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("job_insert_rows", ns), (f"[{document}]",))
        found = cur.fetchall()
    return [
        None if id_ is None else new_row(p, id_, created_at, JobState(state), scheduled_at)
        for p, (id_, created_at, state, scheduled_at) in zip(batch, found, strict=True)
    ]


def job_insert_many(
    conn: Connection,
    encoded: EncodedBatch,
    *,
    caller_tx: bool,
    notify: bool,
    ns: Namespace = DEFAULT,
) -> list[JobRow]:
    """Insert an encoded batch with COPY; rows come back in input order, ids ascending.

    ``many_plan`` carried out on ``conn`` (``drover._db.aio.aio_insert_many``
    carries out the same plan on an async connection).
    """
    if not encoded.params:
        return []
    return run(
        conn, many_plan(encoded, caller_tx=caller_tx, notify=notify, ns=ns), many_action(encoded)
    )


def many_action(encoded: EncodedBatch) -> str:
    """What an error of ``many_plan`` says drover was doing."""
    unique = " unique" if encoded.identities else ""
    return f"insert {len(encoded.params)}{unique} jobs"


def many_plan(
    encoded: EncodedBatch, *, caller_tx: bool, notify: bool, ns: Namespace = DEFAULT
) -> Plan[list[JobRow]]:
    """The writes of a batch: one of three routes, chosen from what the encoder found.

    A batch with no unique key, tags or metadata is copied straight into
    ``drover_jobs`` (``_direct``: the ids reserved first, then one COPY). A
    batch with unique keys, tags or metadata goes through a staging table so
    that a collision, with an existing job or within the batch, writes
    nothing and raises ``DuplicateJob``; with ``caller_tx`` that runs under a
    savepoint, so the caller's transaction stays usable. A batch where an
    item has a unique identity, debounce or throttle is one
    ``drover_insert_unique`` statement (``_identified``).
    """
    batch = encoded.params
    if not batch:
        return []
    if encoded.identities:
        return (yield from _identified(encoded, caller_tx=caller_tx, notify=notify, ns=ns))
    if encoded.unique or encoded.decorated:
        # Tags and metadata go through the staging table too: its COPY adapts
        # them, and the direct COPY's hand-formatted rows stay lean.
        return (yield from _staged(batch, caller_tx=caller_tx, notify=notify, ns=ns))
    queues = sorted(encoded.queues) if notify else []
    direct = _direct(batch, timed=encoded.timed, queues=queues, meta=encoded.shared_meta, ns=ns)
    if caller_tx:
        # No savepoint: without unique keys nothing in the batch can be
        # refused, so a failure here is a database error, which aborts the
        # caller's transaction like any failed statement would.
        return (yield from direct)
    # BEGIN travels with the reserving statement: one round trip fewer per batch.
    rows: list[JobRow] = yield Atomic(direct, lead=True)
    return rows


def _direct(
    params: Sequence[JobInsertParams],
    *,
    timed: bool,
    queues: list[str],
    meta: str | None,
    ns: Namespace = DEFAULT,
) -> Plan[list[JobRow]]:
    reserved = yield Execute(query("job_insert_batch_reserve", ns), (len(params), queues), ONE)
    now, ids, _ = reserved
    ids.sort()
    rows: list[JobRow] = []
    # copy_chunks appends each chunk's rows once the runner has written it.
    yield Copy(
        copy_statement(params, timed=timed, meta=meta, ns=ns),
        copy_chunks(params, ids, now, rows, timed=timed, meta=meta),
    )
    return rows


# Rows per write to the COPY stream: the server starts on the first rows while
# Python formats the next, and no batch is held twice in memory as text.
_COPY_CHUNK = 1000


def _copy_text(value: str) -> str:
    """``value`` escaped as a field of COPY's text format."""
    if "\\" in value:
        value = value.replace("\\", "\\\\")
    if "\t" in value or "\n" in value or "\r" in value:
        value = value.replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return value


def copy_statement(
    params: Sequence[JobInsertParams],
    *,
    timed: bool,
    meta: str | None = None,
    ns: Namespace = DEFAULT,
) -> LiteralString:
    """The COPY statement ``copy_chunks`` formats rows for (``meta``: the batch's
    ``shared_meta``), in ``ns``'s schema."""
    if timed and not isinstance(params, UniformBatch):
        if meta is not None:
            return query("job_insert_batch_direct_timed_meta", ns)
        return query("job_insert_batch_direct_timed", ns)
    if meta is not None:
        return query("job_insert_batch_direct_meta", ns)
    return query("job_insert_batch_direct", ns)


def copy_chunks(
    params: Sequence[JobInsertParams],
    ids: list[int],
    now: datetime,
    rows: list[JobRow],
    *,
    timed: bool,
    meta: str | None = None,
) -> Iterator[str]:
    """The direct COPY's input, one text per chunk of rows; pure, shared by sync and async.

    ``ids`` are the reserved ids (ascending), ``now`` the reserving
    transaction's clock. After each chunk is yielded (and written by the
    caller), the chunk's ``JobRow`` s are appended to ``rows``: built while
    the server is still busy with the text just sent. ``meta``: the
    batch's ``shared_meta``, written as each row's last field.
    """
    if isinstance(params, UniformBatch):
        yield from _uniform_chunks(params, ids, now, rows, meta)
        return
    # Each line's end: the shared metadata, if any, is its last field.
    end = "\n" if meta is None else f"\t{_copy_text(meta)}\n"
    # kind + queue, escaped, per distinct pair: a batch has few.
    prefixes: dict[tuple[str, str], str] = {}
    stamp = now.isoformat()
    # The rows are formatted here rather than by write_row: one str.join per
    # chunk instead of psycopg's per-value dumping (ADR 0009). args_json is
    # JSON from pydantic, which has no raw control characters (JSON escapes
    # them), so only its backslashes need doubling.
    for start in range(0, len(params), _COPY_CHUNK):
        chunk = params[start : start + _COPY_CHUNK]
        lines: list[str] = []
        for id_, p in zip(ids[start : start + len(chunk)], chunk, strict=True):
            prefix = prefixes.get((p.kind, p.queue))
            if prefix is None:
                prefix = f"{_copy_text(p.kind)}\t{_copy_text(p.queue)}"
                prefixes[p.kind, p.queue] = prefix
            args_json = p.args_json
            if "\\" in args_json:
                args_json = args_json.replace("\\", "\\\\")
            if not timed:
                lines.append(f"{id_}\t{prefix}\t{args_json}\t{p.max_attempts}\t{p.priority}{end}")
                continue
            # The rule of job_insert, on the clock of this transaction: a
            # missing or past time means now, only a later time is scheduled.
            at = p.scheduled_at
            if at is None or at <= now:
                lines.append(
                    f"{id_}\t{prefix}\t{args_json}\t{p.max_attempts}\t{p.priority}\t"
                    f"{stamp}\tavailable{end}"
                )
            else:
                lines.append(
                    f"{id_}\t{prefix}\t{args_json}\t{p.max_attempts}\t{p.priority}\t"
                    f"{at.isoformat()}\tscheduled{end}"
                )
        yield "".join(lines)
        # Built while the server is still busy with the rows just sent.
        if timed:
            for id_, p in zip(ids[start : start + len(chunk)], chunk, strict=True):
                at = p.scheduled_at
                if at is None or at <= now:
                    rows.append(new_row(p, id_, now))
                else:
                    rows.append(new_row(p, id_, now, JobState.SCHEDULED, at))
        else:
            rows += [
                new_row(p, id_, now)
                for id_, p in zip(ids[start : start + len(chunk)], chunk, strict=True)
            ]


_BACKSLASH = "\\"
_TWO_BACKSLASHES = "\\\\"


def _uniform_chunks(
    batch: UniformBatch, ids: list[int], now: datetime, rows: list[JobRow], meta: str | None
) -> Iterator[str]:
    # copy_chunks' untimed case for one kind and queue, from the JSON texts.
    head = f"\t{_copy_text(batch.kind)}\t{_copy_text(batch.queue)}\t"
    tail = f"\t{batch.max_attempts}\t{batch.priority}\n"
    if meta is not None:
        tail = f"\t{batch.max_attempts}\t{batch.priority}\t{_copy_text(meta)}\n"
    for start in range(0, len(batch), _COPY_CHUNK):
        texts = batch.args_json[start : start + _COPY_CHUNK]
        chunk_ids = ids[start : start + len(texts)]
        # JSON from pydantic has no raw control characters (JSON escapes
        # them), so only its backslashes need doubling for COPY's text format.
        yield "".join(
            [
                f"{id_}{head}{text}{tail}"
                if "\\" not in text
                else f"{id_}{head}{text.replace(_BACKSLASH, _TWO_BACKSLASHES)}{tail}"
                for id_, text in zip(chunk_ids, texts, strict=True)
            ]
        )
        # Built while the server is still busy with the rows just sent.
        rows += new_rows(
            batch.kind, batch.queue, batch.max_attempts, batch.priority, chunk_ids, texts, now, meta
        )


def staged_row(ord_: int, p: JobInsertParams) -> tuple[Any, ...]:
    """One item of a batch as a row of the staging table's COPY (``job_insert_batch_copy``)."""
    return (
        ord_,
        p.kind,
        p.queue,
        p.args_json,
        p.max_attempts,
        p.scheduled_at,
        p.unique_key,
        p.priority,
        list(p.tags),
        "{}" if p.meta is None else p.meta,
    )


def _staged(
    batch: Sequence[JobInsertParams],
    *,
    caller_tx: bool,
    notify: bool,
    ns: Namespace = DEFAULT,
) -> Plan[list[JobRow]]:
    # A constant three round trips however large the batch (plus BEGIN/COMMIT
    # or a savepoint). The COPY and the insert run in a nested transaction so
    # a unique-key collision writes nothing.
    if caller_tx:
        # On a non-autocommit connection that has not run a statement yet
        # (the first call inside Django's atomic(), say) psycopg would make
        # conn.transaction() the outermost transaction and COMMIT the
        # caller's work with ours. Executing first opens the caller's
        # transaction, so the Atomic below is a savepoint.
        yield Execute(query("job_insert_batch_stage", ns), None)
    rows: list[JobRow] = yield Atomic(
        _staged_body(batch, stage=not caller_tx, notify=notify, ns=ns)
    )
    return rows


def _staged_body(
    batch: Sequence[JobInsertParams], *, stage: bool, notify: bool, ns: Namespace
) -> Plan[list[JobRow]]:
    if stage:
        yield Execute(query("job_insert_batch_stage", ns), None)
    yield Copy(
        query("job_insert_batch_copy", ns),
        (staged_row(ord_, p) for ord_, p in enumerate(batch)),
        rows=True,
    )
    found = yield Execute(query("job_insert_batch_apply", ns), None, ALL)
    if len(found) != len(batch):
        # The staging table maps input positions to the ids they would have
        # had. Raising rolls the nested transaction back: nothing stays.
        staged = yield Execute(query("job_insert_batch_staged_ids", ns), None, ALL)
        raise _first_duplicate(batch, staged, {r[0] for r in found})
    if notify:
        yield Execute(query("notify_queues", ns), {"queues": sorted({p.queue for p in batch})})
    return [row_from_db(r) for r in found]


def _identified(
    encoded: EncodedBatch, *, caller_tx: bool, notify: bool, ns: Namespace = DEFAULT
) -> Plan[list[JobRow]]:
    # A batch where some item has a unique identity, debounce or throttle
    # (ADR 0031): one statement runs the items in order, each returning its
    # job or the one holding its identity. An item with only a unique_key
    # that is taken fails the batch as on the staged path, so the statement
    # runs in a nested transaction that the raise rolls back.
    if caller_tx:
        # As in _staged: make sure the caller's transaction is open, so that
        # the Atomic below is a savepoint.
        yield Execute(query("job_insert_unique_begin", ns), None)
    rows: list[JobRow] = yield Atomic(_identified_body(encoded, notify=notify, ns=ns))
    return rows


def _identified_body(encoded: EncodedBatch, *, notify: bool, ns: Namespace) -> Plan[list[JobRow]]:
    batch = encoded.params
    rows = yield from unique_batch_plan(batch, encoded.identities or {}, notify=notify, ns=ns)
    for index, row in enumerate(rows):
        if row is None:
            raise duplicate_error(batch[index], f"item {index}: ")
    return [row for row in rows if row is not None]


def _first_duplicate(
    batch: Sequence[JobInsertParams], staged: Sequence[tuple[Any, ...]], inserted: set[int]
) -> DuplicateJob:
    for ord_, id_ in staged:
        if id_ not in inserted:
            return duplicate_error(batch[ord_], f"item {ord_}: ")
    return duplicate_error(next(p for p in batch if p.unique_key is not None))
