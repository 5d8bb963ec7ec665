"""Turning what the database returns (or what drover sent it) into :class:`drover.JobRow`.

Separate from the statements in :mod:`drover._db.store`: these functions run
no SQL. They are on the hot path (a claim or a bulk insert builds one row per
job), hence the direct use of the JSON scanner and ``tuple.__new__``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from drover.job import JobRow, JobState

if TYPE_CHECKING:
    from drover._db.store import JobInsertParams

__all__ = ["NO_ERRORS", "decode_json", "decode_sent_json", "new_row", "new_rows", "row_from_db"]


class _NoErrors(list[Any]):
    """The ``errors`` of every row whose job has not failed yet: one shared empty list.

    A fresh list per row is a garbage-collector-tracked object that outlives
    the call, and a bulk insert or a claim returns thousands of rows: in a
    process with a large heap those lists alone triggered extra full
    collections (about a tenth of a bulk insert's time). Rows are read-only
    snapshots, so the shared list refuses every change; it still equals
    ``[]``, is a ``list``, pickles and copies to itself.
    """

    __slots__ = ()

    def _refuse(self, *args: object, **kwargs: object) -> Any:
        raise TypeError("a JobRow's errors are a read-only snapshot; copy them with list()")

    append = extend = insert = remove = pop = clear = sort = reverse = _refuse
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse

    def __copy__(self) -> _NoErrors:
        return self

    def __deepcopy__(self, memo: object) -> _NoErrors:
        return self

    def __reduce__(self) -> str:
        return "NO_ERRORS"


NO_ERRORS: list[Any] = _NoErrors()


# Set by JSONDecoder.__init__ (the C scanner when available) but not in the stubs.
_scan_json: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def decode_json(text: str) -> Any:
    """``json.loads`` for the JSON drover reads back (jsonb as text, or its own encoding).

    Calls the decoder's C scanner directly: ``json.loads`` spends most of its
    time, for a small document, on the whitespace checks around it, and a
    claim or a bulk insert decodes one per job. Anything the scanner does not
    consume whole goes through ``json.loads``, which raises as usual.
    """
    try:
        value, end = _scan_json(text, 0)
    except StopIteration:
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


_scan_sent_json: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder(  # type: ignore[attr-defined]
    parse_float=_number_as_stored
).scan_once


def decode_sent_json(text: str) -> Any:
    """The value the table will give back for JSON drover wrote (see ``_number_as_stored``)."""
    try:
        value, end = _scan_sent_json(text, 0)
    except StopIteration:
        return json.loads(text, parse_float=_number_as_stored)
    return value if end == len(text) else json.loads(text, parse_float=_number_as_stored)


# tuple.__new__ skips the named tuple's Python-level __new__: a claim or a bulk
# insert builds one row per job.
_tuple_new = tuple.__new__
# A dict lookup, where JobState(value) goes through EnumType.__call__ (several
# times slower); an unknown value still raises ValueError through the fallback.
_STATES: dict[str, JobState] = {state.value: state for state in JobState}


def _state(value: str) -> JobState:
    state = _STATES.get(value)
    return state if state is not None else JobState(value)


def _errors(text: str) -> Any:
    # Most rows have no errors yet: skip the decoder for the empty array.
    return NO_ERRORS if text == "[]" else decode_json(text)


def new_rows(
    kind: str,
    queue: str,
    max_attempts: int,
    ids: Sequence[int],
    args_json: Sequence[str],
    created_at: datetime,
) -> list[JobRow]:
    """:func:`new_row` for a run of jobs of one kind and queue, inserted due now."""
    new = _tuple_new
    decode = decode_sent_json
    return [
        new(
            JobRow,
            (
                id_,
                kind,
                queue,
                decode(text),
                JobState.AVAILABLE,
                0,
                max_attempts,
                NO_ERRORS,
                created_at,
                None,
                created_at,
                None,
                None,
            ),
        )
        for id_, text in zip(ids, args_json, strict=True)
    ]


def row_from_db(values: Sequence[Any]) -> JobRow:
    """Build a JobRow from the 13 columns every job query starts with, jsonb as text."""
    # Positional, in JobRow's field order.
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
        ),
    )
