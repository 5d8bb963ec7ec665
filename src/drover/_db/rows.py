"""Turning what the database returns (or what drover sent it) into ``drover.JobRow``.

These functions run no SQL. The columns a query returns for a job are
declared once here (``JOB_COLUMNS``, in ``JobRow``'s field order) and
spelled into the SQL files as ``{{job_columns}}`` by ``drover._db.queries``,
so a row is built by position without the two ever drifting apart. A claim
or a bulk insert builds one row per job, hence ``tuple.__new__`` and the
decoder's ``raw_decode`` (ADR 0016).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from decimal import Decimal
from itertools import repeat
from types import MappingProxyType
from typing import Any

from drover._records import JobInsertParams
from drover.job import NO_META, JobRow, JobState

__all__ = [
    "JOB_COLUMNS",
    "NO_ERRORS",
    "decode_json",
    "decode_sent_json",
    "decode_sent_list",
    "new_row",
    "new_rows",
    "row_from_db",
]

JOB_COLUMNS = (
    "id",
    "kind",
    "queue",
    "args::text",
    "state::text",
    "attempt",
    "max_attempts",
    "errors::text",
    "scheduled_at",
    "leased_until",
    "created_at",
    "finalized_at",
    "unique_key",
    "priority",
    "progress",
    "progress_message",
    "meta::text",
    "tags",
)
"""What every job query returns, in ``JobRow``'s field order; jsonb and enums as text
(Django registers its own loaders for jsonb on its connections)."""

if tuple(c.partition("::")[0] for c in JOB_COLUMNS) != JobRow._fields:
    raise RuntimeError("JOB_COLUMNS must list JobRow's fields in order")


NO_ERRORS: tuple[dict[str, Any], ...] = ()
"""The ``errors`` of every row whose job has not failed yet."""


_raw_decode: Callable[[str], tuple[Any, int]] = json.JSONDecoder().raw_decode


def decode_json(text: str) -> Any:
    """``json.loads`` for the JSON drover reads back (jsonb as text, or its own encoding).

    ``raw_decode`` skips the whitespace checks ``json.loads`` makes around
    the document, most of its time for a small one. Anything it does not
    consume whole goes through ``json.loads``, which raises as usual.
    """
    try:
        value, end = _raw_decode(text)
    except ValueError:
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


def _number_as_stored(literal: str) -> float | int:
    # jsonb keeps a number as numeric, with as many decimals as its literal
    # had after the point, less its exponent: '1e23' has none and comes back
    # as the integer 100000000000000000000000. Mirror that, so a row built
    # from the JSON drover sent equals the row read back from the table.
    mantissa, _, exponent = literal.lower().partition("e")
    if not exponent:
        return float(literal)
    decimals = len(mantissa.partition(".")[2])
    if decimals - int(exponent) > 0:
        return float(literal)
    return int(Decimal(literal))


_raw_decode_sent: Callable[[str], tuple[Any, int]] = json.JSONDecoder(
    parse_float=_number_as_stored
).raw_decode


def decode_sent_json(text: str) -> Any:
    """The value the table will give back for JSON drover wrote (see ``_number_as_stored``)."""
    try:
        value, end = _raw_decode_sent(text)
    except ValueError:
        return json.loads(text, parse_float=_number_as_stored)
    return value if end == len(text) else json.loads(text, parse_float=_number_as_stored)


def decode_sent_list(texts: Sequence[str]) -> list[Any]:
    """``decode_sent_json`` of each text, decoded as one JSON array: one call into the
    decoder for a batch instead of one per job. Gives what decoding each alone gives;
    texts that are not one JSON document each are decoded one by one (and raise)."""
    if not texts:
        return []
    document = f"[{','.join(texts)}]"
    try:
        values, end = _raw_decode_sent(document)
    except ValueError:
        values, end = None, 0
    # A text that held two values ("1,2") would shift the rest: count them.
    if end != len(document) or len(values) != len(texts):
        return [decode_sent_json(text) for text in texts]
    return values  # type: ignore[no-any-return]


# tuple.__new__ skips the named tuple's Python-level __new__: a claim or a bulk
# insert builds one row per job.
_tuple_new = tuple.__new__
# A dict lookup, where JobState(value) goes through EnumType.__call__ (several
# times slower); an unknown value still raises ValueError through the fallback.
_STATES: dict[str, JobState] = {state.value: state for state in JobState}


def _state(value: str) -> JobState:
    state = _STATES.get(value)
    return state if state is not None else JobState(value)


def _errors(text: str) -> tuple[dict[str, Any], ...]:
    # Most rows have no errors yet: skip the decoder for the empty array.
    return NO_ERRORS if text == "[]" else tuple(decode_json(text))


def _meta(text: str) -> Any:
    # Most rows have no metadata: skip the decoder, and share one empty mapping.
    return NO_META if text == "{}" else decode_json(text)


def _sent_meta(text: str | None) -> Any:
    return NO_META if text is None or text == "{}" else decode_sent_json(text)


def new_rows(
    kind: str,
    queue: str,
    max_attempts: int,
    priority: int,
    ids: Sequence[int],
    args_json: Sequence[str],
    created_at: datetime,
    meta: str | None = None,
) -> list[JobRow]:
    """``new_row`` for a run of jobs of one kind and queue, inserted due now.

    ``meta``: the metadata every job carries (JSON text), or ``None``; its
    rows share one read-only mapping of it.
    """
    shared = NO_META if meta is None else MappingProxyType(decode_sent_json(meta))
    # The rows in C: zip gives each row's fields (the ones every row shares
    # repeated), tuple.__new__ makes it a JobRow, with no Python per job
    # (zip reuses its tuple once the JobRow has copied it).
    n = len(ids)
    if len(args_json) != n:
        raise ValueError(f"{n} ids for {len(args_json)} jobs")
    return list(
        map(
            _tuple_new,
            repeat(JobRow, n),
            zip(
                ids,
                repeat(kind),
                repeat(queue),
                decode_sent_list(args_json),
                repeat(JobState.AVAILABLE),
                repeat(0),
                repeat(max_attempts),
                repeat(NO_ERRORS),
                repeat(created_at),
                repeat(None),
                repeat(created_at),
                repeat(None),
                repeat(None),
                repeat(priority),
                repeat(None),
                repeat(None),
                repeat(shared),
                repeat(()),
                strict=False,  # the repeats never end: ids, checked above, do
            ),
        )
    )


def row_from_db(values: Sequence[Any]) -> JobRow:
    """Build a JobRow from the ``JOB_COLUMNS`` a job query returns."""
    return _tuple_new(
        JobRow,
        (
            values[0],
            values[1],
            values[2],
            decode_json(values[3]),
            _state(values[4]),
            values[5],
            values[6],
            _errors(values[7]),
            values[8],
            values[9],
            values[10],
            values[11],
            values[12],
            values[13],
            values[14],
            values[15],
            _meta(values[16]),
            tuple(values[17]),
        ),
    )


def new_row(
    params: JobInsertParams,
    id_: int,
    created_at: datetime,
    state: JobState = JobState.AVAILABLE,
    scheduled_at: datetime | None = None,
) -> JobRow:
    """The row an insert of ``params`` stored, without reading it back.

    A freshly inserted row holds exactly what was sent plus the column
    defaults, so only the id and the database clock need to come back.
    """
    # Positional, in JobRow's field order: a bulk insert builds one per item.
    return _tuple_new(
        JobRow,
        (
            id_,
            params.kind,
            params.queue,
            decode_sent_json(params.args_json),
            state,
            0,
            params.max_attempts,
            NO_ERRORS,
            created_at if scheduled_at is None else scheduled_at,
            None,
            created_at,
            None,
            params.unique_key,
            params.priority,
            None,
            None,
            _sent_meta(params.meta),
            params.tags,
        ),
    )
