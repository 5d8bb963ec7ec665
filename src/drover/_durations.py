"""One rule for durations across the API: a ``timedelta`` or a number of seconds."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import TypeAlias

from drover.errors import ConfigError

__all__ = ["Duration", "to_seconds"]

Duration: TypeAlias = timedelta | int | float
"""A span of time: a :class:`datetime.timedelta` or a number of seconds."""


def to_seconds(value: Duration, name: str) -> float:
    """Return ``value`` in seconds, or raise :class:`drover.ConfigError` naming ``name``.

    ``bool`` is refused even though it is an ``int``: ``timeout=True`` is a bug,
    not one second. NaN and infinities are refused; negatives are returned as
    given so each caller decides what a negative means.
    """
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(
            f"{name} must be a timedelta or a number of seconds, not {type(value).__name__}"
        )
    seconds = float(value)
    if not math.isfinite(seconds):
        raise ConfigError(f"{name} must be a finite number of seconds, not {value!r}")
    return seconds
