"""Job.set_progress and Job.update_meta on their own: validation and the slot (ADR 0032)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

import drover


class Work(drover.JobArgs, kind="unit_progress"):
    pass


def _job() -> drover.Job[Work]:
    return drover.Job(
        id=1,
        kind="unit_progress",
        queue="default",
        attempt=1,
        max_attempts=25,
        created_at=datetime.now(UTC),
        args=Work(),
    )


@pytest.mark.parametrize(
    ("fraction", "message", "refusal"),
    [
        (1.5, None, "from 0 to 1"),
        (-0.1, None, "from 0 to 1"),
        (float("nan"), None, "from 0 to 1"),
        ("half", None, "must be a number"),
        (True, None, "must be a number"),
        (0.5, 3, "must be a str"),
        (0.5, "x" * 1001, "1001 characters long"),
        (0.5, "a\x00b", "NUL"),
    ],
)
def test_set_progress_refuses_bad_values(fraction: object, message: object, refusal: str) -> None:
    job = _job()
    with pytest.raises(drover.InvalidArgument, match=refusal):
        job.set_progress(fraction, message)  # type: ignore[arg-type]
    slot = job.context._execution.progress
    assert slot is None or slot.latest is None


def test_the_latest_report_is_kept_and_an_int_is_a_fraction() -> None:
    job = _job()
    job.set_progress(0.25, "a quarter")
    job.set_progress(1)
    slot = job.context._execution.progress
    assert slot is not None and slot.latest == (1.0, None)
    assert slot.dirty
    assert slot.take() == ((1.0, None), None)
    assert not slot.dirty


def test_a_child_context_reports_into_the_execution_s_slot() -> None:
    job = _job()
    child = job.context.with_timeout(60)
    drover.Job(
        id=1,
        kind="unit_progress",
        queue="default",
        attempt=1,
        max_attempts=25,
        created_at=job.created_at,
        args=Work(),
        context=child,
    ).set_progress(0.5)
    slot = job.context._execution.progress
    assert slot is not None and slot.latest == (0.5, None)


def test_update_meta_merges_top_level_keys() -> None:
    job = _job()
    job.update_meta({"a": 1, "b": {"x": 1}})
    job.update_meta({"b": {"y": 2}})
    slot = job.context._execution.progress
    assert slot is not None
    assert slot.take() == (None, {"a": 1, "b": {"y": 2}})
    assert slot.meta == {"a": 1, "b": {"y": 2}}
