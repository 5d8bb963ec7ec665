"""Schedules: crontab as users know it, @every aligned to the epoch, DST, strictly-after."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import drover
from drover import Schedule

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[arg-type, misc]


def local(zone: ZoneInfo, *parts: int, fold: int = 0) -> datetime:
    return datetime(*parts, tzinfo=zone, fold=fold)  # type: ignore[arg-type, misc]


def fires(schedule: Schedule, after: datetime, count: int) -> list[datetime]:
    found: list[datetime] = []
    for _ in range(count):
        fire = schedule.next(after)
        assert fire is not None
        found.append(fire)
        after = fire
    return found


@pytest.mark.parametrize(
    ("spec", "after", "expected"),
    [
        ("*/5 * * * *", utc(2026, 1, 1, 10, 2), utc(2026, 1, 1, 10, 5)),
        ("0 * * * *", utc(2026, 1, 1, 10, 0), utc(2026, 1, 1, 11, 0)),  # strictly after
        ("@hourly", utc(2026, 1, 1, 10, 0, 1), utc(2026, 1, 1, 11, 0)),
        ("@daily", utc(2026, 1, 1, 0, 0), utc(2026, 1, 2, 0, 0)),
        ("@midnight", utc(2026, 1, 1, 23, 59, 59), utc(2026, 1, 2, 0, 0)),
        ("@weekly", utc(2026, 1, 1), utc(2026, 1, 4)),  # 2026-01-04 is a Sunday
        ("@monthly", utc(2026, 1, 15), utc(2026, 2, 1)),
        ("@yearly", utc(2026, 1, 1), utc(2027, 1, 1)),
        ("@annually", utc(2026, 6, 1), utc(2027, 1, 1)),
        ("15,45 9-10 * * *", utc(2026, 1, 1, 9, 15), utc(2026, 1, 1, 9, 45)),
        ("15,45 9-10 * * *", utc(2026, 1, 1, 10, 45), utc(2026, 1, 2, 9, 15)),
        ("0-30/10 * * * *", utc(2026, 1, 1, 10, 20), utc(2026, 1, 1, 10, 30)),
        ("0-30/10 * * * *", utc(2026, 1, 1, 10, 30), utc(2026, 1, 1, 11, 0)),
        ("0 9 * JAN MON", utc(2026, 1, 1), utc(2026, 1, 5, 9, 0)),
        ("0 9 * * MON-FRI", utc(2026, 1, 2, 9, 0), utc(2026, 1, 5, 9, 0)),
        ("0 0 * * 0", utc(2026, 1, 1), utc(2026, 1, 4)),  # 0 and 7 are both Sunday
        ("0 0 * * 7", utc(2026, 1, 1), utc(2026, 1, 4)),
        ("0 0 * * sun", utc(2026, 1, 1), utc(2026, 1, 4)),
        # Vixie: both day fields restricted → either matches (the 13th OR a Friday).
        ("0 0 13 * FRI", utc(2026, 1, 1), utc(2026, 1, 2)),
        ("0 0 13 * FRI", utc(2026, 1, 9, 1), utc(2026, 1, 13)),
        # One day field is *: both must match.
        ("0 0 13 * *", utc(2026, 1, 1), utc(2026, 1, 13)),
        ("0 0 29 2 *", utc(2026, 1, 1), utc(2028, 2, 29)),
    ],
)
def test_cron_grammar_in_utc(spec: str, after: datetime, expected: datetime) -> None:
    assert Schedule(spec).next(after) == expected


def test_a_zone_moves_the_fire_time_and_the_result_is_utc() -> None:
    fire = Schedule("30 2 * * *", "Europe/Berlin").next(utc(2026, 1, 10, 12))
    assert fire == utc(2026, 1, 11, 1, 30) and fire.tzinfo is UTC
    assert Schedule("0 9 * * *", NEW_YORK).next(utc(2026, 7, 1)) == utc(2026, 7, 1, 13)


def test_a_skipped_local_time_fires_at_the_next_instant_that_exists() -> None:
    # Berlin springs forward on 2026-03-29: 02:00 becomes 03:00.
    nightly = Schedule("30 2 * * *", BERLIN)
    got = [f.astimezone(BERLIN) for f in fires(nightly, local(BERLIN, 2026, 3, 28, 12), 3)]
    assert got == [
        local(BERLIN, 2026, 3, 29, 3, 0),
        local(BERLIN, 2026, 3, 30, 2, 30),
        local(BERLIN, 2026, 3, 31, 2, 30),
    ]
    every_20 = Schedule("*/20 * * * *", BERLIN)
    got = [f.astimezone(BERLIN) for f in fires(every_20, local(BERLIN, 2026, 3, 29, 1, 30), 3)]
    assert got == [
        local(BERLIN, 2026, 3, 29, 1, 40),
        local(BERLIN, 2026, 3, 29, 3, 0),
        local(BERLIN, 2026, 3, 29, 3, 20),
    ]


def test_a_repeated_local_time_fires_once() -> None:
    # Berlin falls back on 2026-10-25: 03:00 becomes 02:00, 02:30 happens twice.
    nightly = Schedule("30 2 * * *", BERLIN)
    got = fires(nightly, local(BERLIN, 2026, 10, 24, 12), 2)
    assert [f.astimezone(BERLIN).replace(tzinfo=None) for f in got] == [
        datetime(2026, 10, 25, 2, 30),
        datetime(2026, 10, 26, 2, 30),
    ]
    # Real time keeps flowing for a schedule with a wildcard hour.
    half_hourly = Schedule("*/30 * * * *", BERLIN)
    got = fires(half_hourly, local(BERLIN, 2026, 10, 25, 1, 40), 5)
    assert [b - a for a, b in itertools.pairwise(got)] == [timedelta(minutes=30)] * 4


@pytest.mark.parametrize(
    ("spec", "after", "expected"),
    [
        ("@every 30s", utc(2026, 1, 1, 10, 0, 0), utc(2026, 1, 1, 10, 0, 30)),
        ("@every 30s", utc(2026, 1, 1, 10, 0, 29), utc(2026, 1, 1, 10, 0, 30)),
        ("@every 1h30m", utc(2026, 1, 1, 0, 0), utc(2026, 1, 1, 1, 30)),
        ("@every 250ms", utc(2026, 1, 1), utc(2026, 1, 1) + timedelta(milliseconds=250)),
        ("@every 1.5h", utc(2026, 1, 1, 0, 0), utc(2026, 1, 1, 1, 30)),
        # 7 minutes does not divide a day: alignment is to the Unix epoch, not midnight.
        ("@every 7m", utc(2026, 1, 2), utc(2026, 1, 2, 0, 2)),
    ],
)
def test_every_is_aligned_to_the_unix_epoch(spec: str, after: datetime, expected: datetime) -> None:
    assert Schedule(spec).next(after) == expected


def test_every_ignores_the_zone() -> None:
    after = utc(2026, 1, 1, 5, 10)
    assert Schedule("@every 45m", NEW_YORK).next(after) == Schedule("@every 45m").next(after)
    assert Schedule("@every 45m", NEW_YORK).next(after) == utc(2026, 1, 1, 5, 15)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "5 fields"),
        ("* * * *", "5 fields"),
        ("* * * * * *", "5 fields"),
        ("61 * * * *", "minute field '61' (field 1 of 5) is not valid: a minute is 0-59"),
        ("* 24 * * *", "hour field '24' (field 2 of 5) is not valid: an hour is 0-23"),
        ("* * 0 * *", "day-of-month field '0' (field 3 of 5) is not valid: a day of"),
        ("* * 32 * *", "the month is 1-31"),
        ("* * * 0 *", "month field '0' (field 4 of 5) is not valid: a month is 1-12"),
        ("* * * 13 *", "a month is 1-12 or JAN-DEC"),
        ("* * * * 8", "day-of-week field '8' (field 5 of 5) is not valid"),
        ("5-1 * * * *", "minute field '5-1'"),
        ("*/0 * * * *", "a step */n"),
        ("? * * * *", "minute field '?'"),
        ("0 0 30 2 *", "never occurs in the months of month field '2'"),  # never satisfiable
        ("@reboot", "unknown shorthand"),
        ("@fortnightly", "unknown shorthand"),
        ("@every", "@every takes one duration"),
        ("@every 0s", "at least 1ms"),
        ("@every -1s", "@every takes one duration"),
        ("@every 1h 30m", "@every takes one duration"),
        ("@every 5x", "@every takes one duration"),
        ("@every 1d", "@every takes one duration"),
    ],
)
def test_invalid_specs_are_refused_with_a_reason(spec: str, message: str) -> None:
    with pytest.raises(drover.InvalidArgument, match="invalid schedule") as raised:
        Schedule(spec)
    assert message in str(raised.value)
    assert repr(spec) in str(raised.value)


@pytest.mark.parametrize("zone", ["Mars/Olympus", "", "../etc/passwd"])
def test_an_unknown_timezone_is_refused(zone: str) -> None:
    with pytest.raises(drover.InvalidArgument, match="timezone"):
        Schedule("@daily", zone)


def test_next_needs_an_aware_datetime() -> None:
    with pytest.raises(drover.InvalidArgument, match="timezone-aware"):
        Schedule("@daily").next(datetime(2026, 1, 1))


SPECS = [
    "* * * * *", "*/7 * * * *", "30 2 * * *", "0 9 * * MON-FRI", "0 0 13 * FRI",
    "15 1,2,3 * * *", "0 0 1 * *", "@every 30s", "@every 1h30m", "@every 250ms", "@every 7m",
]  # fmt: skip
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]
instants = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2090, 1, 1), timezones=st.just(UTC)
)


@settings(max_examples=300, deadline=None)
@given(spec=st.sampled_from(SPECS), zone=st.sampled_from(ZONES), t1=instants, t2=instants)
def test_next_is_strictly_after_and_monotone(
    spec: str, zone: str, t1: datetime, t2: datetime
) -> None:
    schedule = Schedule(spec, zone)
    first, second = schedule.next(t1), schedule.next(t2)
    assert first is not None and second is not None
    assert first > t1 and second > t2
    if t1 <= t2:
        assert first <= second
    # Nothing fires in between: the next fire after (first - 1 µs) is first again.
    assert schedule.next(first - timedelta(microseconds=1)) == first
