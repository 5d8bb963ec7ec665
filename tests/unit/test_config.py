"""Config: defaults, warn-and-correct tuning, structural mistakes refused."""

from __future__ import annotations

import logging
import random
from datetime import UTC, datetime, timedelta

import pytest
from jobdb import sample_row

import drover


def test_defaults() -> None:
    c = drover.Config()
    assert c.concurrency == 10
    assert dict(c.queues) == {"default": 1}
    assert c.poll_interval == timedelta(seconds=1)
    assert c.lease_duration == timedelta(seconds=60)
    assert c.heartbeat_interval == timedelta(seconds=20)
    assert c.rescue_interval == timedelta(seconds=60)
    assert c.shutdown_timeout == timedelta(seconds=30)
    assert isinstance(c.retry_policy, drover.ExponentialRetryPolicy)
    assert c.middleware == ()
    assert len(c.workers) == 0


def test_durations_accept_timedelta_or_seconds() -> None:
    c = drover.Config(
        poll_interval=timedelta(milliseconds=250),
        lease_duration=30,
        heartbeat_interval=5.5,
        rescue_interval=timedelta(seconds=7),
        shutdown_timeout=timedelta(minutes=2),
    )
    assert c.poll_interval.total_seconds() == 0.25
    assert c.lease_duration.total_seconds() == 30
    assert c.heartbeat_interval.total_seconds() == 5.5
    assert c.rescue_interval.total_seconds() == 7
    assert c.shutdown_timeout.total_seconds() == 120


def test_config_is_immutable() -> None:
    c = drover.Config()
    with pytest.raises(AttributeError, match="immutable"):
        c.concurrency = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("fields", "message", "check"),
    [
        ({"concurrency": 0}, "concurrency must be at least one", ("concurrency", 10)),
        ({"concurrency": -5}, "concurrency must be at least one", ("concurrency", 10)),
        ({"lease_duration": 0}, "lease_duration must be at least 1 ms", ("lease_duration", 60)),
        (
            {"lease_duration": 10, "heartbeat_interval": 10},
            "heartbeat interval must be shorter than the lease",
            ("heartbeat_interval", 10 / 3),
        ),
        ({"queues": {"a": 0}}, "queue weight must be at least one", ("queues", {"a": 1})),
        (
            {"queues": {"a": 10**9}},
            "queue weight is above the maximum",
            ("queues", {"a": 100_000}),
        ),
    ],
)
def test_tuning_values_are_corrected_with_a_warning(
    caplog: pytest.LogCaptureFixture,
    fields: dict[str, object],
    message: str,
    check: tuple[str, object],
) -> None:
    with caplog.at_level(logging.WARNING, logger="drover"):
        c = drover.Config(**fields)  # type: ignore[arg-type]
    assert any(message in r.getMessage() for r in caplog.records), caplog.text
    name, expected = check
    value = getattr(c, name)
    if isinstance(value, timedelta):
        assert value.total_seconds() == pytest.approx(expected)
    elif name == "queues":
        assert dict(value) == expected
    else:
        assert value == expected


@pytest.mark.parametrize(
    ("fields", "check"),
    [
        ({"poll_interval": 0}, ("poll_interval", 1.0)),
        ({"poll_interval": -1}, ("poll_interval", 1.0)),
        ({"heartbeat_interval": 0, "lease_duration": 9}, ("heartbeat_interval", 3.0)),
        ({"rescue_interval": -1, "lease_duration": 9}, ("rescue_interval", 9.0)),
        ({"shutdown_timeout": -3}, ("shutdown_timeout", 0.0)),
    ],
)
def test_non_positive_values_mean_the_default(
    fields: dict[str, object], check: tuple[str, float]
) -> None:
    c = drover.Config(**fields)  # type: ignore[arg-type]
    name, expected = check
    assert getattr(c, name).total_seconds() == pytest.approx(expected)


def _not_callable() -> object:
    return 42


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"queues": {"": 1}}, "empty or non-text queue name"),
        ({"queues": {"  ": 1}}, "empty or non-text queue name"),
        ({"queues": {"a": "1"}}, "must be an int weight"),
        ({"queues": ["a"]}, "must map queue names"),
        ({"middleware": [None]}, r"middleware\[0\] is None"),
        ({"middleware": [lambda h: h, 42]}, r"middleware\[1\] is 42"),
        ({"middleware": "abc"}, "must be a list"),
        ({"workers": {}}, "must be a drover.Workers"),
        ({"concurrency": "10"}, "concurrency must be an int"),
        ({"concurrency": True}, "concurrency must be an int"),
        ({"poll_interval": "1s"}, "poll_interval must be a timedelta or a number"),
        ({"lease_duration": float("nan")}, "lease_duration must be a finite"),
        ({"retry_policy": object()}, "needs a next_retry"),
        ({"logger": "drover"}, "must be a logging.Logger"),
        ({"concurency": 3}, "unknown Config field.*concurency"),
    ],
)
def test_structural_mistakes_raise_config_error(fields: dict[str, object], match: str) -> None:
    with pytest.raises(drover.ConfigError, match=match):
        drover.Config(**fields)  # type: ignore[arg-type]


def test_middleware_list_is_copied_at_construction() -> None:
    calls: list[str] = []

    def mw(next_handler: drover.Handler) -> drover.Handler:
        calls.append("built")
        return next_handler

    chain = [mw]
    c = drover.Config(middleware=chain)
    chain.append(mw)
    assert c.middleware == (mw,)


def test_middleware_returning_a_non_handler_is_refused_at_client_construction() -> None:
    def broken(next_handler: drover.Handler) -> drover.Handler:
        return None  # type: ignore[return-value]

    with pytest.raises(drover.ConfigError, match=r"middleware\[0\] returned None"):
        drover.Client("postgresql://unused", drover.Config(middleware=[broken]))


@pytest.mark.parametrize("attempt", [1, 2, 3, 5, 10, 24])
def test_exponential_policy_stays_within_ten_percent(attempt: int) -> None:
    policy = drover.ExponentialRetryPolicy(rng=random.Random(attempt))
    base = attempt**4
    for _ in range(200):
        wait = policy.backoff(attempt).total_seconds()
        assert 0.9 * base <= wait <= 1.1 * base


def test_exponential_policy_spreads_and_grows() -> None:
    policy = drover.ExponentialRetryPolicy(rng=random.Random(7))
    samples = [policy.backoff(3).total_seconds() for _ in range(100)]
    assert max(samples) - min(samples) >= 1.0
    assert min(policy.backoff(4).total_seconds() for _ in range(50)) > max(samples)
    before = datetime.now(UTC)
    at = policy.next_retry(
        sample_row(state=drover.JobState.RUNNING, attempt=2, leased_until=datetime.now(UTC))
    )
    assert before + timedelta(seconds=14) <= at <= datetime.now(UTC) + timedelta(seconds=18)
    assert isinstance(policy, drover.RetryPolicy)
