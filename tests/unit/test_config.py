"""Config: defaults, and every unknown, mistyped or out-of-range value refused."""

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
    assert dict(c.queues) == {"default": drover.Queue(weight=1)}
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
    with pytest.raises(AttributeError, match="cannot assign to field 'concurrency'"):
        c.concurrency = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"concurrency": 0}, r"Config.concurrency must be at least 1, not 0"),
        ({"concurrency": -5}, r"Config.concurrency must be at least 1, not -5"),
        ({"lease_duration": 0}, r"Config.lease_duration must be at least 1 ms, not 0s"),
        ({"lease_duration": 0.0005}, r"Config.lease_duration must be at least 1 ms"),
        (
            {"lease_duration": 10, "heartbeat_interval": 10},
            r"Config.heartbeat_interval must be positive and shorter than the lease \(10s\)",
        ),
        ({"heartbeat_interval": 0}, r"Config.heartbeat_interval must be positive"),
        ({"heartbeat_interval": -1}, r"Config.heartbeat_interval must be positive"),
        ({"poll_interval": 0}, r"Config.poll_interval must be positive, not 0s"),
        ({"poll_interval": -1}, r"Config.poll_interval must be positive, not -1s"),
        ({"rescue_interval": -1}, r"Config.rescue_interval must be positive"),
        ({"plugins": [None]}, r"Config.plugins\[0\] must be a drover.Plugin, not None"),
        ({"shutdown_timeout": -3}, r"Config.shutdown_timeout must not be negative, not -3s"),
        ({"queues": {}}, r"Config.queues must name at least one queue"),
        ({"queues": {"a": 0}}, r"Config.queues\['a'\]: weight must be between 1 and 100000, not 0"),
        (
            {"queues": {"ok": 1, "bulk": 10**9}},
            r"Config.queues\['bulk'\]: weight must be between 1 and 100000, not 1000000000",
        ),
        ({"poll_interval": 1e300}, r"Config.poll_interval is too large"),
    ],
)
def test_out_of_range_values_are_refused_naming_the_field(
    caplog: pytest.LogCaptureFixture, fields: dict[str, object], match: str
) -> None:
    caplog.set_level(logging.DEBUG)
    with pytest.raises(drover.ConfigError, match=match) as raised:
        drover.Config(**fields)  # type: ignore[arg-type]
    assert isinstance(raised.value, drover.InvalidArgument)
    assert caplog.records == [], "a refused value is an error, not a log line"


def test_replace_checks_again_and_keeps_the_rest() -> None:
    base = drover.Config(concurrency=4, queues={"b": 2, "a": 1}, lease_duration=30)
    changed = base.replace(concurrency=8)
    assert changed.concurrency == 8
    assert list(changed.queues) == ["a", "b"]
    assert changed.lease_duration == timedelta(seconds=30)
    assert changed.heartbeat_interval == timedelta(seconds=10)
    with pytest.raises(drover.ConfigError, match="concurrency must be at least 1"):
        base.replace(concurrency=0)
    with pytest.raises(
        drover.ConfigError, match=r"unknown Config field.*concurency \(did you mean 'concurrency'"
    ):
        base.replace(concurency=3)


def test_queues_read_back_sorted_and_read_only() -> None:
    c = drover.Config(queues={"b": 2, "a": 1})
    assert list(c.queues.items()) == [("a", drover.Queue(weight=1)), ("b", drover.Queue(weight=2))]
    with pytest.raises(TypeError):
        c.queues["c"] = drover.Queue()  # type: ignore[index]


def test_an_int_weight_means_a_queue_of_that_weight_with_no_cap_and_no_limits() -> None:
    c = drover.Config(queues={"bulk": 7, "images": drover.Queue(weight=2, max_workers=4)})
    assert c.queues["bulk"] == drover.Queue(weight=7)
    assert (c.queues["bulk"].weight, c.queues["bulk"].max_workers) == (7, None)
    assert c.queues["bulk"].limits == ()
    assert c.queues["images"].max_workers == 4
    assert "queues=bulk=7,images=2:4," in repr(c)
    # replace() reads the normalised mapping back in unchanged.
    assert dict(c.replace(concurrency=4).queues) == dict(c.queues)


def test_a_queue_is_an_immutable_value_with_a_short_repr() -> None:
    q = drover.Queue(weight=3, max_workers=2, limits=drover.Limit(concurrency=5))
    assert q == drover.Queue(weight=3, max_workers=2, limits=[drover.Limit(concurrency=5)])
    assert hash(q) == hash(
        drover.Queue(weight=3, max_workers=2, limits=drover.Limit(concurrency=5))
    )
    assert q.limits == (drover.Limit(concurrency=5),)
    assert repr(q) == "Queue(weight=3, max_workers=2, limits=[Limit(concurrency=5)])"
    assert repr(drover.Queue()) == "Queue(weight=1)"
    with pytest.raises(AttributeError):
        q.weight = 4  # type: ignore[misc]
    with pytest.raises(TypeError):
        drover.Queue(2)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"weight": 0}, r"Queue weight must be between 1 and 100000, not 0"),
        ({"weight": 100_001}, r"Queue weight must be between 1 and 100000, not 100001"),
        ({"weight": 2.0}, r"Queue weight must be an int, not 2.0"),
        ({"weight": True}, r"Queue weight must be an int, not True"),
        ({"max_workers": 0}, r"Queue max_workers must be at least 1, not 0"),
        ({"max_workers": -2}, r"Queue max_workers must be at least 1, not -2"),
        ({"max_workers": "4"}, r"Queue max_workers must be an int, not '4'"),
    ],
)
def test_a_bad_queue_is_refused_when_it_is_built_naming_the_field(
    fields: dict[str, object], match: str
) -> None:
    with pytest.raises(drover.ConfigError, match=match):
        drover.Queue(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("limits", "match"),
    [
        ("3", r"Queue limits must be a drover.Limit or a list of them, not '3'"),
        ([3], r"Queue limits must hold drover.Limit objects, not 3"),
        (
            [drover.Limit(concurrency=1), drover.Limit(rate=2)],
            r"Queue limits has two limits with no partition",
        ),
    ],
)
def test_bad_queue_limits_are_an_invalid_limit(limits: object, match: str) -> None:
    with pytest.raises(drover.InvalidLimit, match=match):
        drover.Queue(limits=limits)  # type: ignore[arg-type]


def test_a_queue_limit_may_be_partitioned_by_any_args_field() -> None:
    limit = drover.Limit(concurrency=1, partition_by="tenant_id")
    assert drover.Queue(limits=limit).limits == (limit,)


def test_max_workers_above_the_concurrency_is_refused_naming_both() -> None:
    with pytest.raises(
        drover.ConfigError,
        match=r"Config.queues\['images'\]: max_workers 5 is more than Config.concurrency 4",
    ):
        drover.Config(concurrency=4, queues={"images": drover.Queue(max_workers=5)})
    ok = drover.Config(concurrency=4, queues={"images": drover.Queue(max_workers=4)})
    with pytest.raises(drover.ConfigError, match="max_workers 4 is more than Config.concurrency 3"):
        ok.replace(concurrency=3)


def test_a_queue_value_that_is_neither_an_int_nor_a_queue_is_refused() -> None:
    with pytest.raises(
        drover.ConfigError, match=r"Config.queues\['a'\] must be an int weight or a"
    ):
        drover.Config(queues={"a": {"weight": 2}})  # type: ignore[dict-item]


def test_positional_arguments_are_refused() -> None:
    with pytest.raises(drover.ConfigError, match="keyword arguments only"):
        drover.Config(5)  # type: ignore[call-arg, arg-type]


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
