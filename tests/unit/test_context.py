"""JobContext: cancellation, deadlines, children. Synchronised on events, never on sleep."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest

import drover
from drover._durations import to_seconds


def test_new_context_is_active() -> None:
    ctx = drover.JobContext()
    assert not ctx.cancelled
    assert ctx.reason is None
    assert ctx.deadline is None
    assert ctx.remaining() is None
    assert ctx.wait(0) is False


def test_cancel_wakes_a_waiting_thread() -> None:
    ctx = drover.JobContext()
    waiting = threading.Event()
    result: list[bool] = []

    def handler() -> None:
        waiting.set()
        result.append(ctx.wait(30))

    t = threading.Thread(target=handler)
    t.start()
    assert waiting.wait(5)
    ctx.cancel("shutdown")
    t.join(5)
    assert not t.is_alive()
    assert result == [True]
    assert ctx.cancelled and ctx.reason == "shutdown"


def test_cancelling_a_parent_cancels_children_not_the_reverse() -> None:
    parent = drover.JobContext()
    child = parent.with_timeout(0)
    grandchild = child.with_timeout(timedelta(hours=1))
    grandchild.cancel()
    assert grandchild.cancelled and not child.cancelled and not parent.cancelled
    other = parent.with_timeout(60)
    parent.cancel("shutdown")
    assert child.cancelled and other.cancelled
    assert other.reason == "shutdown"
    late = parent.with_timeout(60)
    assert late.cancelled


def test_deadline_cancels() -> None:
    ctx = drover.JobContext().with_timeout(0.05)
    assert ctx.deadline is not None
    started = time.monotonic()
    assert ctx.wait(30) is True  # returns at the deadline, not after 30 s
    assert time.monotonic() - started < 15
    assert ctx.reason == "deadline exceeded"
    assert ctx.remaining() == 0.0


def test_child_never_outlives_the_parent_deadline() -> None:
    parent = drover.JobContext().with_timeout(10)
    child = parent.with_timeout(3600)
    assert child.deadline == parent.deadline


def test_values_are_shared_with_children() -> None:
    parent = drover.JobContext()
    parent.values["request_id"] = "r-1"
    assert parent.with_timeout(1).values["request_id"] == "r-1"


@pytest.mark.parametrize(
    ("value", "seconds"), [(timedelta(milliseconds=1500), 1.5), (2, 2.0), (0.25, 0.25), (-1, -1.0)]
)
def test_durations_accept_timedelta_or_seconds(value: drover.Duration, seconds: float) -> None:
    assert to_seconds(value, "x") == seconds


@pytest.mark.parametrize("value", [True, "5", None, float("nan"), float("inf")])
def test_durations_refuse_other_things(value: object) -> None:
    with pytest.raises((TypeError, ValueError), match="timeout"):
        to_seconds(value, "timeout")  # type: ignore[arg-type]
