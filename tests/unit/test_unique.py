"""drover.Unique and the identity hash: no database."""

from __future__ import annotations

import pickle
from datetime import timedelta

from pydantic import Field

import drover
from drover._insert.encode import encode_insert
from drover._insert.identity import identity_of
from drover.unique import HELD_ALWAYS, STATE_BITS


class Doc(drover.JobArgs, kind="doc"):
    a: int
    b: str = ""
    c: dict[str, int] = Field(default_factory=dict)


def _identity(args: Doc, opts: drover.InsertOpts) -> str:
    return identity_of(args, encode_insert(args, opts), opts).hash


def test_state_bits_follow_the_enum_order() -> None:
    assert list(STATE_BITS) == [s.value for s in drover.JobState]
    assert list(STATE_BITS.values()) == [1 << i for i in range(len(drover.JobState))]
    assert set(HELD_ALWAYS) == {s.value for s in drover.job.ACTIVE_STATES}


def test_identity_is_deterministic_and_ignores_key_order() -> None:
    opts = drover.InsertOpts(unique=drover.Unique(by_args=True))
    one = _identity(Doc(a=1, c={"x": 1, "y": 2}), opts)
    assert one == _identity(Doc(a=1, c={"y": 2, "x": 1}), opts)
    assert one == "".join(_identity(Doc(a=1, c={"x": 1, "y": 2}), opts))
    assert one != _identity(Doc(a=2, c={"x": 1, "y": 2}), opts)


def test_identity_parts() -> None:
    named = drover.InsertOpts(unique=drover.Unique(by_args=["a"]))
    assert _identity(Doc(a=1, b="x"), named) == _identity(Doc(a=1, b="y"), named)
    assert _identity(Doc(a=1), named) != _identity(
        Doc(a=1), drover.InsertOpts(unique=drover.Unique(by_args=["a"]), queue="other")
    )
    spanning = drover.Unique(by_args=["a"], by_queue=False)
    assert _identity(Doc(a=1), drover.InsertOpts(unique=spanning)) == _identity(
        Doc(a=1), drover.InsertOpts(unique=spanning, queue="other")
    )
    forms = {
        _identity(Doc(a=1), named),
        _identity(Doc(a=1), drover.InsertOpts(debounce=5, unique=drover.Unique(by_args=["a"]))),
        _identity(Doc(a=1), drover.InsertOpts(throttle=5, unique=drover.Unique(by_args=["a"]))),
    }
    assert len(forms) == 3  # a debounce never updates a plain unique job


def test_by_args_names_are_sorted_and_deduplicated() -> None:
    assert drover.Unique(by_args=["b", "a", "b"]).by_args == ("a", "b")


def test_period_and_windows_become_timedeltas() -> None:
    assert drover.Unique(period=60).period == timedelta(minutes=1)
    opts = drover.InsertOpts(debounce=1.5)
    assert opts.debounce == timedelta(seconds=1.5)
    identity = identity_of(Doc(a=1), encode_insert(Doc(a=1), opts), opts)
    assert identity.window_us == 1_500_000
    assert identity.form == "d"


def test_default_states() -> None:
    assert drover.Unique().held_in() == HELD_ALWAYS
    assert drover.Unique(period=60).held_in() == (*HELD_ALWAYS, "completed")
    assert drover.Unique(states=[*HELD_ALWAYS, drover.JobState.DEAD]).held_in() == (
        *HELD_ALWAYS,
        "dead",
    )


def test_a_returned_duplicate_equals_and_pickles_like_a_row() -> None:
    from datetime import UTC, datetime

    from drover._db.unique import ExistingRow

    now = datetime.now(UTC)
    row = drover.JobRow(
        1, "doc", "default", {}, drover.JobState.AVAILABLE, 0, 25, (), now, None, now, None, None
    )
    existing = ExistingRow(*row)
    assert existing == row
    assert existing.duplicate
    assert not row.duplicate
    assert pickle.loads(pickle.dumps(existing)).duplicate  # noqa: S301 - our own bytes
