"""Uniqueness by identity: ``drover.Unique``, and the rules that combine it with debounce
and throttle.

A ``Unique`` says which parts of an insert make up a job's identity (its
kind always; its queue, all or some of its args, an explicit key, a period)
and in which states a job holds that identity. ``InsertOpts(unique=...)``,
``InsertOpts(debounce=...)`` and ``InsertOpts(throttle=...)`` use it; the
identity is hashed by drover before anything is sent and enforced by a
unique index in the database, so it is exact under concurrent inserts from
any number of clients (no check-then-insert). See the "Uniqueness" guide and
ADR 0031.

A model module: no I/O. It cannot import ``drover.job`` (which imports it),
so it names the job states by their values; ``tests/unit`` checks them
against ``drover.JobState``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from drover._durations import Duration, to_seconds
from drover._hints import did_you_mean
from drover.errors import ConfigError, InvalidInsertOpts

__all__ = ["STATE_BITS", "Unique", "UniqueIdentity", "check_forms", "state_mask"]

STATE_BITS: dict[str, int] = {
    "pending": 1,
    "available": 2,
    "scheduled": 4,
    "running": 8,
    "retryable": 16,
    "completed": 32,
    "cancelled": 64,
    "dead": 128,
}
"""The bit of each job state in a row's ``unique_states`` mask, in ``drover_job_state``'s
order (the same mapping as the ``drover_state_bit`` SQL function)."""

HELD_ALWAYS = ("pending", "available", "scheduled", "running", "retryable")
"""The states every identity is held in: the ones a job moves among by itself."""

_OPTIONAL = ("completed", "cancelled", "dead")

MAX_KEY_LENGTH = 1024
_MIN_WINDOW = timedelta(milliseconds=1)


def state_mask(states: Collection[str]) -> int:
    """The ``unique_states`` bit mask of ``states`` (state values)."""
    mask = 0
    for state in states:
        mask |= STATE_BITS[state]
    return mask


def _window(value: object, name: str) -> timedelta:
    """``value`` (a ``Duration``) as a positive ``timedelta`` of whole microseconds."""
    try:
        seconds = to_seconds(value, name)  # type: ignore[arg-type]
    except ConfigError as exc:
        raise InvalidInsertOpts(str(exc)) from None
    window = value if isinstance(value, timedelta) else timedelta(seconds=seconds)
    if window < _MIN_WINDOW:
        raise InvalidInsertOpts(f"{name} must be at least 1 millisecond, not {seconds!r} seconds")
    return window


@dataclass(frozen=True, slots=True, kw_only=True)
class Unique:
    """What makes two inserts "the same job", for ``InsertOpts(unique=...)``.

    The identity is always the job's kind, plus:

    - ``by_queue`` (default True): the queue, so the same job in two queues is
      two identities. False makes the identity span every queue.
    - ``by_args``: True for all of the args, a list of field names for those
      fields only, False (the default) for none. Compared as canonical JSON
      (keys sorted), so field order does not matter; a name that is not a
      field of the args class is refused at insert.
    - ``key``: an explicit string, for identities the args cannot express.
    - ``period``: a ``timedelta`` or seconds. The identity is held for the
      window of that length the insert falls in, counted on the database
      clock from the Unix epoch (one per hour: windows start on the hour,
      UTC), so a second insert in the same window gets the first job even
      after it completed. A new window starts a new job.
    - ``states``: the states in which a job holds its identity, as
      ``JobState`` values or strings. The default is pending, available,
      scheduled, running and retryable (as ``unique_key``), plus completed
      when a period is given. Those five are always included (a job moves
      among them by itself, see ADR 0031); you may add ``completed``,
      ``cancelled`` and ``dead``.

    A second insert of a held identity writes nothing and returns the job
    that holds it, with ``row.duplicate`` True. Invalid values raise
    ``drover.InvalidInsertOpts`` at construction.
    """

    by_args: bool | Sequence[str] = False
    by_queue: bool = True
    key: str | None = None
    period: Duration | None = None
    states: Collection[str] | None = None

    def __post_init__(self) -> None:
        by_args = self.by_args
        if not isinstance(by_args, bool):
            if isinstance(by_args, str | bytes) or not isinstance(by_args, Sequence | Collection):
                raise InvalidInsertOpts(
                    "Unique.by_args must be True, False or a list of field names, "
                    f"not {type(by_args).__name__}"
                )
            names = tuple(by_args)
            if not names:
                raise InvalidInsertOpts(
                    "Unique.by_args is an empty list; use False for no args, True for all"
                )
            for name in names:
                if not isinstance(name, str) or not name:
                    raise InvalidInsertOpts(
                        f"Unique.by_args names fields by str, not {type(name).__name__}"
                    )
            object.__setattr__(self, "by_args", tuple(sorted(set(names))))
        if not isinstance(self.by_queue, bool):
            raise InvalidInsertOpts(
                f"Unique.by_queue must be True or False, not {type(self.by_queue).__name__}"
            )
        if self.key is not None:
            if not isinstance(self.key, str):
                raise InvalidInsertOpts(f"Unique.key must be a str, not {type(self.key).__name__}")
            if len(self.key) > MAX_KEY_LENGTH:
                raise InvalidInsertOpts(
                    f"Unique.key is {len(self.key)} characters long; the maximum is "
                    f"{MAX_KEY_LENGTH}"
                )
            try:
                self.key.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidInsertOpts("Unique.key is not valid UTF-8 text") from None
        if self.period is not None:
            object.__setattr__(self, "period", _window(self.period, "Unique.period"))
        if self.states is not None:
            object.__setattr__(self, "states", _states(self.states))

    @property
    def period_window(self) -> timedelta | None:
        """``period`` as a ``timedelta`` (``None`` without a period)."""
        assert self.period is None or isinstance(self.period, timedelta)
        return self.period

    def held_in(self) -> tuple[str, ...]:
        """The states in which a job inserted with this ``Unique`` holds its identity."""
        if self.states is not None:
            return tuple(self.states)
        if self.period is not None:
            return (*HELD_ALWAYS, "completed")
        return HELD_ALWAYS


@dataclass(frozen=True, slots=True)
class UniqueIdentity:
    """A job's unique identity as stored, for operators (``Inspector.unique_identity``)."""

    hash: str
    """The SHA-256 of the identity, in hex."""
    bucket: int
    """The period's bucket (windows since the Unix epoch); 0 without a period."""
    states: tuple[str, ...]
    """The states in which the job holds the identity; empty once it handed it on."""
    held: bool
    """Whether the job holds the identity now (its state is one of ``states``)."""


def states_of(mask: int) -> tuple[str, ...]:
    """The states of a ``unique_states`` mask, in the enum's order."""
    return tuple(state for state, bit in STATE_BITS.items() if mask & bit)


def _states(value: object) -> tuple[str, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Collection):
        raise InvalidInsertOpts(
            f"Unique.states must be a collection of job states, not {type(value).__name__}"
        )
    found: set[str] = set()
    for item in value:
        state = str(item.value) if hasattr(item, "value") else item
        if not isinstance(state, str) or state not in STATE_BITS:
            hint = did_you_mean(str(state), STATE_BITS)
            raise InvalidInsertOpts(
                f"Unique.states: {item!r} is not a job state{hint}; the states are "
                f"{', '.join(STATE_BITS)}"
            )
        found.add(state)
    missing = [s for s in HELD_ALWAYS if s not in found]
    if missing:
        raise InvalidInsertOpts(
            f"Unique.states leaves out {', '.join(missing)}; an identity is always held in "
            f"{', '.join(HELD_ALWAYS)} (a job returns to them by itself), and you may add "
            f"{', '.join(_OPTIONAL)}"
        )
    return tuple(s for s in STATE_BITS if s in found)


def check_forms(
    *,
    unique: object,
    debounce: object,
    throttle: object,
    unique_key: str | None,
    scheduled_at: datetime | None,
    depends_on: Sequence[Any],
    delay: object = None,
) -> tuple[timedelta | None, timedelta | None]:
    """Check how ``InsertOpts``'s uniqueness options combine; return debounce and throttle
    as ``timedelta``. Raises ``InvalidInsertOpts`` naming the conflict."""
    if unique is not None and not isinstance(unique, Unique):
        raise InvalidInsertOpts(
            f"InsertOpts.unique must be a drover.Unique, not {type(unique).__name__}"
        )
    debounce_window = None if debounce is None else _window(debounce, "InsertOpts.debounce")
    throttle_window = None if throttle is None else _window(throttle, "InsertOpts.throttle")
    if debounce_window is not None and throttle_window is not None:
        raise InvalidInsertOpts(
            "InsertOpts.debounce and InsertOpts.throttle cannot be combined: debounce keeps the "
            "last insert, throttle the first"
        )
    form = "debounce" if debounce_window is not None else "throttle"
    if debounce_window is not None or throttle_window is not None:
        if isinstance(unique, Unique) and unique.period is not None:
            raise InvalidInsertOpts(
                f"InsertOpts.{form} cannot be combined with a unique period: the {form} window "
                "decides how long the identity is held"
            )
        if isinstance(unique, Unique) and unique.states is not None:
            raise InvalidInsertOpts(
                f"InsertOpts.{form} cannot be combined with Unique.states: {form} decides "
                "which states hold the identity"
            )
    if debounce_window is not None and (scheduled_at is not None or delay is not None):
        given = "scheduled_at" if scheduled_at is not None else "delay"
        raise InvalidInsertOpts(
            f"InsertOpts.debounce cannot be combined with {given}: a debounced job is due "
            "one window after its last insert"
        )
    has_form = unique is not None or debounce_window is not None or throttle_window is not None
    if has_form and unique_key:
        raise InvalidInsertOpts(
            "InsertOpts.unique_key cannot be combined with unique, debounce or throttle; "
            "put the key in the identity: Unique(key=...)"
        )
    if has_form and depends_on:
        raise InvalidInsertOpts(
            "InsertOpts.depends_on cannot be combined with unique, debounce or throttle"
        )
    return debounce_window, throttle_window
