"""Queues: how a client works one (``drover.Queue``), and the records operators read.

``Queue`` is configuration (``Config.queues``); ``QueueState`` and
``QueueSummary`` are what ``drover.Client`` and ``drover.Inspector`` report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any, overload

from drover.errors import ConfigError, InvalidInsertOpts
from drover.job import InsertOpts
from drover.limits import Limit, limits_tuple

__all__ = [
    "MAX_QUEUE_WEIGHT",
    "Queue",
    "QueueState",
    "QueueSummary",
    "QueuesField",
    "caps_of",
    "check_queue_name",
    "format_queues",
    "queues_mapping",
]

MAX_QUEUE_WEIGHT = 100_000
"""The largest queue weight. Two huge weights once overflowed the weighted draw."""


@dataclass(frozen=True, slots=True)
class QueueState:
    """A queue an operator has paused at some point (queues need no row to exist).

    ``paused_at`` is when the current pause began (``None`` once resumed);
    ``updated_at`` is the last pause or resume. Both are database-clock times.
    """

    name: str
    paused_at: datetime | None
    updated_at: datetime

    @property
    def paused(self) -> bool:
        """True while no client claims from this queue."""
        return self.paused_at is not None


@dataclass(frozen=True, slots=True)
class QueueSummary:
    """One queue as an operator sees it: paused or not, its backlog, its oldest wait.

    Listed by ``drover.Inspector.queues`` for every queue that has a
    waiting, running or dead job, or a pause record. ``counts`` has every
    state the depth gauges publish (available, scheduled, retryable,
    running, dead), zeros included; ``oldest_age_seconds`` is the age of the
    oldest job claimable now, ``None`` when none is (or the queue is paused).
    """

    name: str
    paused_at: datetime | None
    counts: Mapping[str, int]
    oldest_age_seconds: float | None

    @property
    def paused(self) -> bool:
        """True while no client claims from this queue."""
        return self.paused_at is not None


def check_queue_name(name: object) -> str:
    """``name`` if it is a valid queue name (the rules of ``InsertOpts.queue``).

    Raises:
        drover.InvalidInsertOpts: not a str, empty, too long, or holding NUL
            or a lone surrogate; the message says "queue name".
    """
    if not isinstance(name, str):
        raise InvalidInsertOpts(f"queue name must be a str, not {type(name).__name__}")
    try:
        InsertOpts(queue=name)
    except InvalidInsertOpts as exc:
        raise InvalidInsertOpts(str(exc).replace("InsertOpts.queue", "queue name")) from None
    return name


def _whole(value: object, what: str, least: int, most: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{what} must be an int, not {value!r}")
    if value < least or (most is not None and value > most):
        bounds = f"between {least} and {most}" if most is not None else f"at least {least}"
        raise ConfigError(f"{what} must be {bounds}, not {value}")
    return value


@dataclass(frozen=True, slots=True, init=False)
class Queue:
    """How a client works one queue: its weight, its cap on this client, its limits.

    Used as a value of ``Config.queues`` (``{"images": drover.Queue(weight=2,
    max_workers=4), "default": 1}``; a bare int ``n`` means
    ``Queue(weight=n)``). Immutable, compared by value; checked when built.

    - ``weight`` (1 to 100 000): how often the queue is tried first in a claim
      round, never whether it is tried (every round tries every queue).
    - ``max_workers``: at most this many of the queue's jobs run at once *in
      this client* (``None``: no cap but ``Config.concurrency``). The fetcher
      claims no more than the free part of the cap; the other queues use the
      remaining pool slots meanwhile, and when a capped queue's job returns
      the fetcher is woken to claim from it again at once, without waiting
      out ``poll_interval``. A job counts from its claim until its handler
      returns (or, at shutdown, until it is handed back). It is per client:
      four processes with ``max_workers=4`` run up to 16 jobs of the queue.
    - ``limits``: ``drover.Limit`` values that hold for every job of the queue
      across every client of the database (scope ``queue:NAME``), declared
      when a client working the queue starts. ``partition_by`` is allowed and
      reads that top-level args field from each job, whatever its kind: no
      args class can check the name, and jobs without the field share one
      budget (the value null).

    Raises:
        drover.ConfigError: a weight or ``max_workers`` that is not an int in
            range (the message names the field).
        drover.InvalidLimit: ``limits`` is not a ``drover.Limit`` or a list of
            them, or two of them share a partition field.
    """

    weight: int
    max_workers: int | None
    limits: tuple[Limit, ...]

    def __init__(
        self,
        *,
        weight: int = 1,
        max_workers: int | None = None,
        limits: Limit | Sequence[Limit] = (),
    ) -> None:
        object.__setattr__(self, "weight", _whole(weight, "Queue weight", 1, MAX_QUEUE_WEIGHT))
        if max_workers is not None:
            max_workers = _whole(max_workers, "Queue max_workers", 1)
        object.__setattr__(self, "max_workers", max_workers)
        object.__setattr__(self, "limits", limits_tuple(limits, "Queue limits"))

    def __repr__(self) -> str:
        parts = [f"weight={self.weight}"]
        if self.max_workers is not None:
            parts.append(f"max_workers={self.max_workers}")
        if self.limits:
            parts.append(f"limits={list(self.limits)!r}")
        return f"Queue({', '.join(parts)})"


def _default_queues() -> Mapping[str, Queue]:
    return MappingProxyType({"default": Queue()})


def _queue_entry(name: object, value: object, what: str) -> tuple[str, Queue]:
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"{what} contains an empty or non-text queue name: {name!r}")
    try:
        check_queue_name(name)
    except InvalidInsertOpts as exc:
        raise ConfigError(f"{what}: {exc}") from None
    if isinstance(value, Queue):
        return name, value
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(
            f"{what}[{name!r}] must be an int weight or a drover.Queue, not {value!r}"
        )
    try:
        return name, Queue(weight=value)
    except ConfigError as exc:
        raise ConfigError(
            f"{what}[{name!r}]: {str(exc).replace('Queue weight', 'weight')}"
        ) from None


def queues_mapping(value: object, what: str = "Config.queues") -> Mapping[str, Queue]:
    """``value`` (names to ``Queue`` or int weights) as a read-only mapping sorted by name.

    Raises:
        drover.ConfigError: not a mapping, empty, a bad name, or a value that
            is neither a ``drover.Queue`` nor an int weight in range (the
            message names ``what`` and the queue).
    """
    if value is None:
        return _default_queues()
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{what} must map queue names to weights or drover.Queue, not {type(value).__name__}"
        )
    if not value:
        raise ConfigError(f'{what} must name at least one queue, e.g. {{"default": 1}}')
    entries = dict(_queue_entry(name, value[name], what) for name in sorted(value, key=str))
    return MappingProxyType(entries)


class QueuesField:
    """A dataclass field that accepts queue names mapped to ``Queue`` or int weights.

    Reading it gives ``Mapping[str, Queue]``, read-only and sorted by name;
    ``None`` (the default) means ``{"default": Queue()}``. Rules that involve
    other fields (``max_workers`` against the concurrency) belong to the
    dataclass's ``__post_init__``.
    """

    def __init__(self) -> None:
        self._name = "?"
        self._attr = "_?"

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = f"{owner.__name__}.{name}"
        self._attr = f"_{name}"

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> None: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> Mapping[str, Queue]: ...
    def __get__(self, obj: object | None, owner: type | None = None) -> Any:
        if obj is None:
            return None  # what dataclasses reads as the field's default
        return obj.__dict__[self._attr]

    def __set__(self, obj: object, value: Mapping[str, Queue | int] | None) -> None:
        # Reached through object.__setattr__ in a frozen dataclass's __init__.
        obj.__dict__[self._attr] = queues_mapping(value, self._name)


def format_queues(queues: Mapping[str, Queue]) -> str:
    """``default=1,images=2:4``: each queue's weight, and ``:max_workers`` when capped.

    The form ``drover worker --queues`` takes, and the one logs and reprs show.
    """
    return ",".join(
        f"{name}={q.weight}" + ("" if q.max_workers is None else f":{q.max_workers}")
        for name, q in queues.items()
    )


def caps_of(queues: Mapping[str, Queue]) -> dict[str, int]:
    """The ``max_workers`` of each capped queue, by name (uncapped queues are left out)."""
    return {name: q.max_workers for name, q in queues.items() if q.max_workers is not None}
