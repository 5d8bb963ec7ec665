"""One rule for durations across the API: a ``timedelta`` or a number of seconds."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any, TypeAlias, overload

from drover.errors import ConfigError

__all__ = ["MAX_DURATION", "Duration", "DurationField", "to_seconds"]

Duration: TypeAlias = timedelta | int | float
"""A span of time: a ``datetime.timedelta`` or a number of seconds."""

MAX_DURATION = timedelta(days=3650)
"""Longest duration a Config field or a plugin option accepts: ten years. Far longer
ones overflow thread waits (``threading.TIMEOUT_MAX``) and PostgreSQL intervals."""


def to_seconds(value: Duration, name: str) -> float:
    """Return ``value`` in seconds, or raise ``drover.ConfigError`` naming ``name``.

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


class DurationField:
    """A dataclass field that accepts a ``Duration`` and stores a ``timedelta``.

    Declared once, as ``poll_interval: DurationField = DurationField(1.0)``:
    the generated ``__init__`` takes ``timedelta | int | float`` (or ``None``
    where the default is ``None``, meaning "derived from another field"), and
    reading the attribute gives a ``timedelta``. A bad value raises
    ``drover.ConfigError`` naming ``<Class>.<field>``. Range rules that
    involve other fields belong in the dataclass's ``__post_init__``.
    """

    def __init__(self, default: Duration | None) -> None:
        self._default = default
        self._name = "?"
        self._attr = "_?"

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = f"{owner.__name__}.{name}"
        self._attr = f"_{name}"

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Duration | None: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> timedelta: ...
    def __get__(self, obj: object | None, owner: type | None = None) -> Any:
        if obj is None:
            return self._default  # what dataclasses reads as the field's default
        return obj.__dict__[self._attr]

    def __set__(self, obj: object, value: Duration | None) -> None:
        # Reached through object.__setattr__ in a frozen dataclass's __init__.
        if value is not None and not isinstance(value, timedelta):
            seconds = to_seconds(value, self._name)
            try:
                value = timedelta(seconds=seconds)
            except OverflowError:
                raise ConfigError(f"{self._name} is too large: {seconds!r} seconds") from None
        obj.__dict__[self._attr] = value
