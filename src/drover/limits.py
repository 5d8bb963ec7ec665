"""Cluster-wide limits: how many jobs of a scope may run at once, and how many may start per period.

A `Limit` is declared in code, on a `drover.JobArgs` class (scope: its kind)
or on a `drover.Queue` (scope: that queue), and written to the database when
a client starts; every client's claim reads the same rows, so a limit holds
across processes and hosts. An operator can override one at run time
(`Inspector.set_limit`, `drover limits set`). ADR 0025 has the algorithm.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, TypeAlias

from drover.errors import InvalidLimit

__all__ = [
    "MAX_LIMIT",
    "MAX_LIMIT_PERIOD",
    "Limit",
    "LimitKey",
    "LimitState",
    "PartitionUse",
    "Period",
    "RateCounts",
    "check_field",
    "check_override",
    "check_period",
    "limits_tuple",
    "parse_limit_key",
    "parse_period",
    "period_text",
]

MAX_LIMIT = 2**31 - 1
"""The largest concurrency or rate a limit can hold (a PostgreSQL integer)."""

MAX_LIMIT_PERIOD = timedelta(days=1)
"""The longest rate period: the claim keeps one period of starts to count against."""

RateCounts: TypeAlias = Literal["claims", "starts"]
"""What a rate limit counts: claims (the default) or handler starts (`Limit(counts=...)`)."""

Period: TypeAlias = timedelta | int | float | Literal["second", "minute", "hour"]
"""A rate period: a `timedelta`, a number of seconds, or "second", "minute", "hour"."""

_NAMED_PERIODS = {
    "second": timedelta(seconds=1),
    "minute": timedelta(minutes=1),
    "hour": timedelta(hours=1),
}

# An args field a partition is taken from: a top-level key of the stored JSON.
_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# The longest kind and queue names (drover.job's MAX_KIND_LENGTH and
# MAX_QUEUE_LENGTH; drover.job imports this module, so they are repeated here
# and a test keeps them equal).
_TARGET_LENGTH = {"kind": 255, "queue": 128}


def _positive(value: object, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidLimit(f"{what} must be a positive int, not {value!r}")
    if not 0 < value <= MAX_LIMIT:
        raise InvalidLimit(f"{what} must be between 1 and {MAX_LIMIT}, not {value}")
    return value


def check_period(value: object, what: str) -> timedelta:
    """`value` as a `timedelta` if it is a valid rate period, else `InvalidLimit` naming `what`."""
    if isinstance(value, str):
        period = _NAMED_PERIODS.get(value)
        if period is None:
            raise InvalidLimit(
                f"{what} must be a timedelta, seconds, or one of "
                f"{', '.join(repr(n) for n in _NAMED_PERIODS)}; not {value!r}"
            )
        return period
    if isinstance(value, timedelta):
        period = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise InvalidLimit(f"{what} must be a finite number of seconds, not {value!r}")
        period = timedelta(seconds=value)
    else:
        raise InvalidLimit(
            f"{what} must be a timedelta, a number of seconds, or "
            f'"second", "minute", "hour"; not {type(value).__name__}'
        )
    if period <= timedelta(0) or period > MAX_LIMIT_PERIOD:
        raise InvalidLimit(f"{what} must be more than 0 and at most one day, not {value!r}")
    if period < timedelta(milliseconds=1):
        raise InvalidLimit(f"{what} must be at least a millisecond, not {value!r}")
    return period


def check_field(value: object, what: str) -> str:
    """`value` if it names a top-level args field a partition can be taken from."""
    if not isinstance(value, str) or not _FIELD.match(value):
        raise InvalidLimit(
            f"{what} must name a top-level args field (letters, digits, _), not {value!r}"
        )
    return value


@dataclass(frozen=True, slots=True, init=False)
class Limit:
    """A cluster-wide limit on running jobs and on job starts, for one scope.

    Declared on a `drover.JobArgs` class (`limits=drover.Limit(...)`: every
    job of that kind, in any queue) or on a `drover.Queue` (every job of that
    queue). The same limit holds for every client of the database, however
    many processes or hosts:

    - `concurrency=N`: at most N jobs of the scope are running at once. A job
      counts from its claim until its outcome is recorded; a crashed worker's
      job keeps counting until the rescuer takes it back after its lease, and
      no longer.
    - `rate=N, per=period`: at most N jobs of the scope start (are claimed) in
      any window of length `per` on the database clock, retries included.
      `per` is a `timedelta`, seconds, or "second" (default), "minute",
      "hour"; at most one day.
    - `counts="starts"` (with `rate`): the rate counts handler starts
      instead of claims. The claim no longer counts the rate; the worker
      takes each start from the database just before it calls the handler,
      waiting (in its slot, interruptibly) while the window is full, so no
      window of `per` holds more than `rate` starts across every process.
      For a rate that protects an outside API. The default, "claims",
      counts claims: see docs/flow-control.md for what that bounds.
    - `partition_by="field"`: the budget is per value of that top-level args
      field (`concurrency=1, partition_by="tenant_id"`: one running job per
      tenant). Jobs without the field share one budget (the value null).

    Both `concurrency` and `rate` may be given; at least one must be. The
    claim enforces limits inside its own transaction, so no race between
    clients can exceed one; a job held back stays `available` and is claimed
    once the scope has room again (within a poll, sooner when the release
    wakes the fetchers). Limits order nothing: priority and due time still
    decide which waiting job goes first.

    Raises:
        drover.InvalidLimit: a value of 0 or less, neither limit given, `per`
            or `counts="starts"` without `rate`, a period that is not a
            duration of at most a day, `counts` other than "claims" or
            "starts", or a partition field that is not an identifier.
    """

    concurrency: int | None
    rate: int | None
    per: timedelta
    partition_by: str | None
    counts: RateCounts

    def __init__(
        self,
        *,
        concurrency: int | None = None,
        rate: int | None = None,
        per: Period | None = None,
        partition_by: str | None = None,
        counts: RateCounts = "claims",
    ) -> None:
        conc = _positive(concurrency, "Limit concurrency")
        rate_ = _positive(rate, "Limit rate")
        if conc is None and rate_ is None:
            raise InvalidLimit(
                "a Limit needs concurrency= (jobs running at once) or rate= (starts per period)"
            )
        if per is not None and rate_ is None:
            raise InvalidLimit("Limit per= is the period of rate=; give rate= too")
        period = check_period("second" if per is None else per, "Limit per")
        part = None if partition_by is None else check_field(partition_by, "Limit partition_by")
        if counts not in ("claims", "starts"):
            raise InvalidLimit(f'Limit counts must be "claims" or "starts", not {counts!r}')
        if counts == "starts" and rate_ is None:
            raise InvalidLimit('Limit counts="starts" is what rate= counts; give rate= too')
        object.__setattr__(self, "concurrency", conc)
        object.__setattr__(self, "rate", rate_)
        object.__setattr__(self, "per", period)
        object.__setattr__(self, "partition_by", part)
        object.__setattr__(self, "counts", counts)

    def __repr__(self) -> str:
        parts = []
        if self.concurrency is not None:
            parts.append(f"concurrency={self.concurrency}")
        if self.rate is not None:
            parts.append(f"rate={self.rate}, per={period_text(self.per)!r}")
            if self.counts == "starts":
                parts.append("counts='starts'")
        if self.partition_by is not None:
            parts.append(f"partition_by={self.partition_by!r}")
        return f"Limit({', '.join(parts)})"


def period_text(period: timedelta) -> str:
    """A rate period as operators write it: "second", "minute", "hour", else seconds ("90s")."""
    for name, value in _NAMED_PERIODS.items():
        if period == value:
            return name
    return f"{period.total_seconds():g}s"


def parse_period(text: str, what: str) -> timedelta:
    """A period typed by an operator: "second", "minute", "hour", or seconds ("90", "90s").

    What `period_text` writes reads back. Raises `InvalidLimit` naming
    `what`, as `check_period` does for a period that is not between a
    millisecond and a day.
    """
    stripped = text.strip()
    if stripped in _NAMED_PERIODS:
        return _NAMED_PERIODS[stripped]
    number = stripped.removesuffix("s")
    try:
        seconds = float(number)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds):
        raise InvalidLimit(
            f"{what} must be second, minute, hour or a number of seconds (90 or 90s), not {text!r}"
        )
    return check_period(seconds, what)


def check_override(
    concurrency: object, rate: object, per: object, what: str
) -> tuple[int | None, int | None, timedelta | None]:
    """An operator's override as `(concurrency, rate, per)`, checked; `None` where not given.

    The values follow `Limit`'s rules, but each may be left out (it keeps its
    current value); at least one of `concurrency` and `rate` must be given,
    and `per` only with `rate`. Messages name `what` (`"set_limit"`).

    Raises:
        drover.InvalidLimit: as `Limit`.
    """
    conc = _positive(concurrency, f"{what} concurrency")
    rate_ = _positive(rate, f"{what} rate")
    if conc is None and rate_ is None:
        raise InvalidLimit(
            f"{what} needs concurrency= (jobs running at once) or rate= (starts per period)"
        )
    if per is not None and rate_ is None:
        raise InvalidLimit(f"{what} per= is the period of rate=; give rate= too")
    period = None if per is None else check_period(per, f"{what} per")
    return conc, rate_, period


def limits_tuple(value: object, what: str) -> tuple[Limit, ...]:
    """`value` (a `Limit`, a sequence of them, or None) as a tuple, checked for clashes.

    Two limits of one scope must differ in `partition_by`: a scope has one
    limit per partition field (give `concurrency` and `rate` together).
    """
    if value is None:
        return ()
    items: Sequence[object]
    if isinstance(value, Limit):
        items = (value,)
    elif isinstance(value, Sequence) and not isinstance(value, str | bytes):
        items = value
    else:
        raise InvalidLimit(f"{what} must be a drover.Limit or a list of them, not {value!r}")
    seen: set[str | None] = set()
    out: list[Limit] = []
    for item in items:
        if not isinstance(item, Limit):
            raise InvalidLimit(f"{what} must hold drover.Limit objects, not {item!r}")
        if item.partition_by in seen:
            by = "no partition" if item.partition_by is None else repr(item.partition_by)
            raise InvalidLimit(
                f"{what} has two limits with {by}; give concurrency= and rate= in one Limit"
            )
        seen.add(item.partition_by)
        out.append(item)
    return tuple(out)


Scope = Literal["queue", "kind"]


@dataclass(frozen=True, slots=True)
class LimitKey:
    """Which jobs a limit counts: a queue's or a kind's, whole or per value of an args field.

    Written as text `kind:charge`, `kind:charge[tenant_id]` or `queue:images`
    (what `drover limits` takes and shows); `str(key)` gives that text.
    `parse_limit_key` reads that text.

    Raises:
        drover.InvalidLimit: a scope other than "queue" or "kind", a target
            that could not name a queue or kind (not a str, blank, too long,
            holding NUL or a lone surrogate), or a partition field that is not
            an identifier. Checked when the key is built, so a key that exists
            can be written.
    """

    scope: Scope
    target: str
    partition_by: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.scope, str) or self.scope not in _TARGET_LENGTH:
            raise InvalidLimit(f"a limit's scope must be 'queue' or 'kind', not {self.scope!r}")
        target, what = self.target, self.scope
        if not isinstance(target, str):
            raise InvalidLimit(f"a limit's {what} must be a str, not {type(target).__name__}")
        if not target.strip():
            raise InvalidLimit(f"limit {self.scope}:{target!r} names no {what}")
        longest = _TARGET_LENGTH[self.scope]
        if len(target) > longest:
            raise InvalidLimit(
                f"a limit's {what} is {len(target)} characters long; the maximum is {longest}"
            )
        if "\x00" in target:
            raise InvalidLimit(f"a limit's {what} must not contain NUL characters")
        try:
            target.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidLimit(
                f"a limit's {what} is not valid UTF-8 text (it holds a lone surrogate)"
            ) from None
        if self.partition_by is not None:
            check_field(self.partition_by, "a limit's partition field")

    def __str__(self) -> str:
        by = "" if self.partition_by is None else f"[{self.partition_by}]"
        return f"{self.scope}:{self.target}{by}"


_KEY = re.compile(r"^(queue|kind):(.+?)(?:\[([^\[\]]*)\])?$", re.DOTALL)


def parse_limit_key(text: object) -> LimitKey:
    """The `LimitKey` a text such as `kind:charge[tenant_id]` names.

    Raises:
        drover.InvalidLimit: not `queue:NAME` or `kind:NAME`, optionally
            followed by `[field]`.
    """
    if isinstance(text, LimitKey):
        return text
    match = _KEY.match(text) if isinstance(text, str) else None
    if match is None:
        raise InvalidLimit(
            "a limit is named queue:NAME or kind:NAME, optionally with [field] for a "
            f"partitioned one (kind:charge[tenant_id]); not {text!r}"
        )
    scope, target, field = match.groups()
    if not target.strip():
        raise InvalidLimit(f"limit {text!r} names no {scope}")
    part = None if field is None else check_field(field, f"limit {text!r} partition field")
    return LimitKey("queue" if scope == "queue" else "kind", target, part)


@dataclass(frozen=True, slots=True)
class PartitionUse:
    """One partition of a partitioned limit, and what it is using now.

    `value` is the args field's JSON text, as the claim tells partitions
    apart: `"acme"` (a string), `7` (a number: not the same partition as
    `"7"`), `null` (jobs without the field). `full` is True when the
    partition can start no job now: its running jobs are at the concurrency
    limit, or its starts in the current window at the rate.
    """

    value: str
    running: int
    started: int
    full: bool


@dataclass(frozen=True, slots=True)
class LimitState:
    """One limit as the database holds it, with what it is using now.

    `declared` is what code declared (written by the last client to start
    with it; `None` for a limit only an operator set); `override` what an
    operator set on top, field by field (`None` when there is none; its
    `per` is the period in force when the operator changed the rate
    alone). The effective values, those the claim enforces, are
    `concurrency`, `rate` and `per`.

    The use is a snapshot read in one statement, already changing as jobs
    start and end: `running` counts the scope's running jobs (all
    partitions; a crashed worker's until the rescuer takes them back);
    `started` its starts in the current window (0 without a rate);
    `partitions` how many partitions have a running job or a start in the
    window, and `partitions_full` how many of them can start no job now
    (at the concurrency limit or at the rate). A limit without
    `partition_by` has one partition, the whole scope: `partitions_full` is
    1 while the scope is at its limit. `busiest` lists, for a partitioned
    limit, the five partitions running the most jobs (then starting the
    most), busiest first. Times are database-clock times. `counts` is
    what the rate counts, as its code declares (`Limit(counts=...)`):
    "claims" or "starts".
    """

    key: LimitKey
    concurrency: int | None
    rate: int | None
    per: timedelta
    declared: Limit | None
    override: Limit | None
    running: int
    started: int
    partitions: int
    partitions_full: int
    busiest: tuple[PartitionUse, ...]
    updated_at: datetime
    counts: RateCounts = "claims"
