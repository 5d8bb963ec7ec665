"""When a periodic job fires: standard cron expressions and drover's ``@every <duration>``."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from cronsim import CronSim, CronSimError

from drover._hints import did_you_mean
from drover.errors import InvalidArgument

__all__ = ["Schedule"]

# The crontab(5) shorthands. @reboot has no meaning for a schedule that
# outlives any one process, so it is refused like any unknown word.
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_UNITS = {
    "h": timedelta(hours=1),
    "m": timedelta(minutes=1),
    "s": timedelta(seconds=1),
    "ms": timedelta(milliseconds=1),
    "us": timedelta(microseconds=1),
    "µs": timedelta(microseconds=1),
}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|us|µs|h|m|s)")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_FIELDS = (
    ("minute", "a minute is 0-59"),
    ("hour", "an hour is 0-23"),
    ("day-of-month", "a day of the month is 1-31, or L for the last"),
    ("month", "a month is 1-12 or JAN-DEC"),
    ("day-of-week", "a day of the week is 0-7 or SUN-SAT, 0 and 7 both Sunday"),
)
"""Each cron field's name and valid values, in order."""
_SYNTAX = "a field is *, a value, a range a-b, a list a,b or a step */n"
MIN_EVERY = timedelta(milliseconds=1)
MAX_EVERY = timedelta(days=3650)
"""The longest @every period: ten years."""


def _zone(timezone: str | ZoneInfo) -> ZoneInfo:
    if isinstance(timezone, ZoneInfo):
        return timezone
    if not isinstance(timezone, str) or not timezone.strip():
        raise InvalidArgument(f"timezone must be an IANA zone name or a ZoneInfo, not {timezone!r}")
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        # Read only here, on the error path: the set of zones is a directory walk.
        hint = did_you_mean(timezone, available_timezones())
        raise InvalidArgument(f"unknown timezone {timezone!r}{hint}") from None


def _parse_every(text: str, spec: str) -> timedelta:
    position, total = 0, timedelta(0)
    for match in _PART.finditer(text):
        if match.start() != position:
            break
        try:
            total += float(match.group(1)) * _UNITS[match.group(2)]
        except OverflowError:
            raise InvalidArgument(
                f"invalid schedule {spec!r}: @every must be at most {MAX_EVERY.days} days"
            ) from None
        position = match.end()
    if not text or " " in text or position != len(text):
        raise InvalidArgument(
            f"invalid schedule {spec!r}: @every takes one duration such as 30s, 1h30m or 250ms"
        )
    if total < MIN_EVERY:
        raise InvalidArgument(f"invalid schedule {spec!r}: @every must be at least 1ms")
    if total > MAX_EVERY:
        raise InvalidArgument(
            f"invalid schedule {spec!r}: @every must be at most {MAX_EVERY.days} days"
        )
    return total


def _explain(cron: str, exc: CronSimError) -> str:
    """cronsim's terse reason ("Bad minute") as the field, its text and what it accepts."""
    fields = cron.split(" ")
    for position, (name, valid) in enumerate(_FIELDS):
        if str(exc) != f"Bad {name}":
            continue
        text = fields[position]
        if name == "day-of-month" and _parses([*fields[:2], text, "*", "*"]):
            # The day exists in some month, but not in any month this schedule names.
            return (
                f"day-of-month field {text!r} never occurs in the months of month field "
                f"{fields[3]!r}, so the schedule would never fire"
            )
        return (
            f"{name} field {text!r} (field {position + 1} of 5) is not valid: {valid} ({_SYNTAX})"
        )
    return str(exc)


def _parses(fields: list[str]) -> bool:
    try:
        CronSim(" ".join(fields), datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError:
        return False
    return True


class Schedule:
    """A parsed schedule: ``next(after)`` is the first fire time strictly after ``after``.

    Two forms:

    - **cron**: the five crontab fields ``minute hour day-of-month month
      day-of-week``, with ``*``, numbers, ranges ``1-5``, lists ``1,15``,
      steps ``*/5`` and ``0-30/10``, month and day names (``JAN``, ``MON``),
      ``0`` or ``7`` for Sunday, and the Vixie rule that a day matches when
      *either* day field matches if neither is ``*``; plus ``@yearly``
      (``@annually``), ``@monthly``, ``@weekly``, ``@daily`` (``@midnight``)
      and ``@hourly``. Evaluated in ``timezone`` (an IANA name or a
      ``ZoneInfo``) by `cronsim <https://pypi.org/project/cronsim/>`_, which
      follows Debian's cron across daylight-saving changes: a fixed time that
      a spring-forward skips fires at the first instant that exists (03:00
      for 02:30), a fixed time that a fall-back repeats fires once, and
      schedules with a wildcard hour keep their real-time cadence.
    - **@every <duration>**: ``@every 30s``, ``@every 1h30m``, ``@every
      250ms`` (units ``h``, ``m``, ``s``, ``ms``, ``us``; at least 1 ms),
      firing at whole multiples of the duration since the Unix epoch in UTC,
      whatever ``timezone`` says, so every client computes the same instants.

    Invalid input raises ``drover.InvalidArgument`` saying what is
    wrong; nothing is evaluated lazily. Immutable and thread-safe.
    """

    __slots__ = ("_cron", "_every", "spec", "timezone")

    spec: str
    timezone: ZoneInfo
    _cron: str | None
    _every: timedelta | None

    def __init__(self, spec: str, timezone: str | ZoneInfo = "UTC") -> None:
        if not isinstance(spec, str):
            raise InvalidArgument(f"a schedule must be a str, not {type(spec).__name__}")
        zone = _zone(timezone)
        text = " ".join(spec.split())
        every: timedelta | None = None
        cron: str | None = None
        if text.lower().startswith("@every"):
            # One token: "@every 1h 30m" is refused rather than guessed at.
            every = _parse_every(text[len("@every") :].strip(), spec)
        else:
            cron = _MACROS.get(text.lower(), text)
            if cron.startswith("@"):
                known = ", ".join(sorted(_MACROS))
                raise InvalidArgument(
                    f"invalid schedule {spec!r}: unknown shorthand; use one of {known} or @every"
                )
            if len(cron.split(" ")) != 5:
                raise InvalidArgument(
                    f"invalid schedule {spec!r}: a cron schedule has 5 fields "
                    "(minute hour day-of-month month day-of-week)"
                )
            try:
                CronSim(cron, datetime(2000, 1, 1, tzinfo=zone))
            except CronSimError as exc:
                raise InvalidArgument(f"invalid schedule {spec!r}: {_explain(cron, exc)}") from None
        object.__setattr__(self, "spec", spec)
        object.__setattr__(self, "timezone", zone)
        object.__setattr__(self, "_cron", cron)
        object.__setattr__(self, "_every", every)

    @property
    def every(self) -> timedelta | None:
        """The period of an ``@every`` schedule, else ``None``."""
        return self._every

    def next(self, after: datetime) -> datetime | None:
        """The first fire time strictly after ``after`` (timezone-aware), in UTC.

        ``None`` when a cron schedule has no fire time in the next 50 years, or the
        next one would fall after year 9999.

        Raises:
            drover.InvalidArgument: ``after`` is naive.
        """
        if not isinstance(after, datetime) or after.utcoffset() is None:
            raise InvalidArgument(f"Schedule.next needs a timezone-aware datetime, not {after!r}")
        try:
            if self._every is not None:
                # Integer microseconds: no float rounding at any distance from the epoch.
                elapsed = (after - _EPOCH) // _MICROSECOND
                period = self._every // _MICROSECOND
                return _EPOCH + (elapsed // period + 1) * period * _MICROSECOND
            assert self._cron is not None
            local = after.astimezone(self.timezone)
            try:
                fire = next(iter(CronSim(self._cron, local)))
            except StopIteration:
                return None
            return fire.astimezone(UTC)
        except OverflowError:
            return None  # the next fire time is past year 9999: there is none

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Schedule is immutable")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Schedule):
            return NotImplemented
        return (self._cron, self._every, self.timezone.key) == (
            other._cron,
            other._every,
            other.timezone.key,
        )

    def __hash__(self) -> int:
        return hash((self._cron, self._every, self.timezone.key))

    def __repr__(self) -> str:
        return f"Schedule({self.spec!r}, {self.timezone.key!r})"
