"""Job results: what a handler returns, encoded for storage and decoded for callers.

A handler's return value is stored with its job's completion, in the same
fenced write (ADR 0028), so only the attempt that completed the job can store
one. ``None`` stores nothing. Everything else is encoded to JSON here, on the
worker's thread, before the completion is queued: pydantic models,
dataclasses, datetimes, UUIDs, enums and the JSON types are accepted, as
pydantic's JSON mode encodes them. A value that cannot be stored fails the
attempt with ``drover.InvalidResult``, which the retry policy treats like any
handler error.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar, overload

import pydantic
import pydantic_core

from drover.errors import InvalidArgument, InvalidResult

__all__ = [
    "DEFAULT_MAX_RESULT_BYTES",
    "MAX_RESULT_BYTES_CEILING",
    "check_max_result_bytes",
    "decode_result",
    "encode_result",
]

T = TypeVar("T")

DEFAULT_MAX_RESULT_BYTES = 256 * 1024
"""The default cap on one encoded result (``Config.max_result_bytes``): results
live in the jobs table, so large ones slow every scan of it."""

MAX_RESULT_BYTES_CEILING = 64 * 1024 * 1024
"""The largest cap ``Config.max_result_bytes`` accepts."""


def check_max_result_bytes(value: object, what: str = "max_result_bytes") -> int:
    """``value`` if it is an int in 1..``MAX_RESULT_BYTES_CEILING``, else InvalidArgument."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be an int number of bytes, not {value!r}")
    if not 1 <= value <= MAX_RESULT_BYTES_CEILING:
        raise InvalidArgument(
            f"{what} must be between 1 and {MAX_RESULT_BYTES_CEILING} bytes, not {value}"
        )
    return value


def _refuse_constant(token: str) -> Any:
    raise ValueError(token)


def encode_result(value: object, *, kind: str, max_bytes: int) -> str | None:
    """The JSON text to store for a handler's return ``value``; ``None`` for ``None``.

    Raises:
        drover.InvalidResult: ``value`` cannot be encoded as JSON, holds a
            NUL character or a NaN/Infinity (PostgreSQL's jsonb stores
            neither), or its encoding is longer than ``max_bytes``. The
            message names the kind and the problem.
    """
    if value is None:
        return None
    try:
        data = pydantic_core.to_json(value)
    except Exception as exc:  # pydantic raises several types here
        raise InvalidResult(
            f'the result of a job of kind "{kind}" cannot be stored as JSON: {exc}'
        ) from None
    if len(data) > max_bytes:
        raise InvalidResult(
            f'the result of a job of kind "{kind}" is {len(data)} bytes as JSON, over the '
            f"limit of {max_bytes} (Config.max_result_bytes); store large results elsewhere "
            "and return a reference"
        )
    text = data.decode()
    if "\\u0000" in text:
        raise InvalidResult(
            f'the result of a job of kind "{kind}" holds a NUL character, which PostgreSQL '
            "cannot store in JSON"
        )
    if "NaN" in text or "Infinity" in text:
        try:
            json.loads(text, parse_constant=_refuse_constant)
        except ValueError:
            raise InvalidResult(
                f'the result of a job of kind "{kind}" holds NaN or Infinity, which JSON '
                "cannot carry"
            ) from None
    return text


@overload
def decode_result(value: Any, as_type: None, job_id: int) -> Any: ...
@overload
def decode_result(value: Any, as_type: type[T], job_id: int) -> T: ...
def decode_result(value: Any, as_type: type[T] | None, job_id: int) -> Any:
    """A stored result (already parsed from JSON) as ``as_type``, or as is without one.

    Raises ``drover.InvalidResult`` when it does not validate as ``as_type``.
    """
    if as_type is None:
        return value
    try:
        return pydantic.TypeAdapter(as_type).validate_python(value)
    except pydantic.ValidationError as exc:
        name = getattr(as_type, "__name__", repr(as_type))
        raise InvalidResult(
            f"the result of job {job_id} does not validate as {name}: {exc}"
        ) from None
    except pydantic.PydanticSchemaGenerationError as exc:
        raise InvalidArgument(f"cannot read a result as {as_type!r}: {exc}") from None
