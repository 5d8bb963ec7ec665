"""The database-trouble tracker without a database: classification, episodes, rate limit."""

from __future__ import annotations

import logging
import random

import psycopg
import psycopg_pool
import pytest
from psycopg import errors as pgerrors

import drover
from drover._db.errors import classify
from drover._kernel import outage
from drover._kernel.outage import Backoff, Trouble


def _wrapped(cause: BaseException) -> drover.DatabaseError:
    # As translate() raises them: a drover error whose __cause__ is psycopg's.
    try:
        raise drover.DatabaseError(f"fetch jobs: {cause}") from cause
    except drover.DatabaseError as exc:
        return exc


def _from_none(cause: BaseException) -> drover.DatabaseError:
    # As _getconn raises a pool timeout: ``from None`` keeps __context__.
    try:
        try:
            raise cause
        except type(cause):
            raise drover.DatabaseError("no connection became available") from None
    except drover.DatabaseError as exc:
        return exc


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (
            _wrapped(pgerrors.LockNotAvailable("canceling statement due to lock timeout")),
            "lock_timeout",
        ),
        (
            _wrapped(pgerrors.QueryCanceled("canceling statement due to statement timeout")),
            "statement_timeout",
        ),
        (_wrapped(pgerrors.DeadlockDetected("deadlock detected")), "conflict"),
        (_wrapped(pgerrors.TooManyConnections("too many connections for role")), "connection"),
        (_wrapped(pgerrors.AdminShutdown("terminating connection")), "connection"),
        (_wrapped(psycopg.OperationalError("connection failed: refused")), "connection"),
        (_from_none(psycopg_pool.PoolTimeout("couldn't get a connection")), "connection"),
        (_wrapped(pgerrors.UniqueViolation("duplicate key")), "other"),
        (_wrapped(pgerrors.InsufficientPrivilege("permission denied")), "other"),
        (ValueError("a bug"), "other"),
    ],
)
def test_failures_are_classified_by_the_error_behind_them(error: BaseException, kind: str) -> None:
    assert classify(error) == kind


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(outage, "_clock", fake)
    return fake


def _tracker(caplog: pytest.LogCaptureFixture) -> tuple[Trouble, list[tuple[str, str]]]:
    caplog.set_level(logging.DEBUG, logger="test.outage")
    counted: list[tuple[str, str]] = []
    trouble = Trouble(logging.getLogger("test.outage"), counted=lambda s, k: counted.append((s, k)))
    return trouble, counted


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


REFUSED = _wrapped(pgerrors.TooManyConnections('too many connections for role "w"'))


def test_an_episode_warns_once_counts_every_failure_and_ends_when_every_loop_is_back(
    caplog: pytest.LogCaptureFixture, clock: Clock
) -> None:
    trouble, counted = _tracker(caplog)
    assert trouble.not_ready() is None
    for _ in range(5):
        assert trouble.failed("fetcher", REFUSED)
        assert trouble.failed("completer", REFUSED)
    assert len(counted) == 10 and set(counted) == {
        ("fetcher", "connection"),
        ("completer", "connection"),
    }
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and 'too many connections for role "w"' in warnings[0]
    reason = trouble.not_ready()
    assert reason is not None and reason.startswith("database unavailable: completer: ")
    assert trouble.failing("fetcher") == 5
    trouble.ok("fetcher")
    assert trouble.not_ready() is not None  # the completer still fails
    clock.now += 12.5
    trouble.ok("completer")
    assert trouble.not_ready() is None
    over = [r for r in caplog.records if getattr(r, "event", None) == "database_trouble_over"]
    assert len(over) == 1 and "after 12.5s" in over[0].getMessage()


def test_episodes_closer_than_a_minute_share_one_warning(
    caplog: pytest.LogCaptureFixture, clock: Clock
) -> None:
    trouble, _ = _tracker(caplog)
    for _ in range(3):  # a flapping database: three short episodes in 30 s
        trouble.failed("fetcher", REFUSED)
        clock.now += 5
        trouble.ok("fetcher")
        clock.now += 5
    assert trouble.episodes == 3
    assert len(_warnings(caplog)) == 1
    clock.now += 60
    trouble.failed("fetcher", REFUSED)
    warnings = _warnings(caplog)
    assert len(warnings) == 2 and "2 shorter episode(s) since the last warning" in warnings[1]


def test_a_failure_that_is_not_transient_is_counted_but_left_to_the_caller(
    caplog: pytest.LogCaptureFixture, clock: Clock
) -> None:
    trouble, counted = _tracker(caplog)
    assert not trouble.failed("completer", _wrapped(pgerrors.UniqueViolation("dup")))
    assert counted == [("completer", "other")]
    assert trouble.not_ready() is None
    assert caplog.records == []


def test_a_loop_that_gets_through_cuts_the_others_backoff_short(
    caplog: pytest.LogCaptureFixture, clock: Clock
) -> None:
    trouble, _ = _tracker(caplog)
    woken: list[str] = []
    for name in ("fetcher", "refresher", "heartbeat"):
        trouble.watch(name, lambda n=name: woken.append(n))  # type: ignore[misc]
    trouble.failed("fetcher", REFUSED)
    trouble.failed("refresher", REFUSED)
    trouble.ok("heartbeat")  # was not failing: wakes nobody
    assert woken == []
    trouble.ok("fetcher")
    assert woken == ["refresher"]


def test_backoff_doubles_to_its_cap_with_jitter() -> None:
    backoff = Backoff(1.0, 5.0, random.Random(7))
    delays = [backoff.delay(n) for n in range(1, 8)]
    for delay, step in zip(delays, [1, 2, 4, 5, 5, 5, 5], strict=True):
        assert 0.8 * step <= delay <= 1.2 * step
