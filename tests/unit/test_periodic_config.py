"""PeriodicJob and Config.periodic_jobs: every mistake refused at build time, naming the entry."""

from __future__ import annotations

from zoneinfo import ZoneInfo

import pytest

import drover
from drover.periodic import tick_key, tick_opts


class Report(drover.JobArgs, kind="report", queue="reports", max_attempts=3):
    day: str = "today"


def test_a_periodic_job_keeps_what_it_was_given() -> None:
    job = drover.PeriodicJob(
        "nightly", "30 2 * * *", Report(), drover.InsertOpts(queue="q"), timezone="Europe/Berlin"
    )
    assert (job.id, job.schedule.spec, job.timezone) == (
        "nightly",
        "30 2 * * *",
        ZoneInfo("Europe/Berlin"),
    )
    assert job.opts.queue == "q" and job.run_on_start is False
    with pytest.raises(AttributeError):
        job.id = "x"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"id": ""}, "PeriodicJob id must not be empty"),
        ({"id": 5}, "PeriodicJob id must be a str"),
        (
            {"schedule": "61 * * * *"},
            "PeriodicJob 'p': invalid schedule '61 * * * *': minute field '61'",
        ),
        ({"schedule": "@every 0s"}, "PeriodicJob 'p': invalid schedule '@every 0s'"),
        ({"timezone": "Mars/Olympus"}, "PeriodicJob 'p': unknown timezone 'Mars/Olympus'"),
        (
            {"timezone": "Europe/Berln"},
            "PeriodicJob 'p': unknown timezone 'Europe/Berln' (did you mean 'Europe/Berlin'?)",
        ),
        ({"args": {"day": "x"}}, "PeriodicJob 'p': args must be a drover.JobArgs instance"),
        ({"opts": {"queue": "q"}}, "PeriodicJob 'p': opts must be a drover.InsertOpts"),
        ({"run_on_start": "yes"}, "PeriodicJob 'p': run_on_start must be True or False"),
        ({"args": Report(day="nul\x00")}, "PeriodicJob 'p': cannot encode args"),
    ],
)
def test_a_bad_entry_is_refused_naming_it(kwargs: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {"id": "p", "schedule": "@hourly", "args": Report(), **kwargs}
    with pytest.raises(drover.InvalidArgument) as raised:
        drover.PeriodicJob(**fields)  # type: ignore[arg-type]
    assert message in str(raised.value)


def test_duplicate_ids_are_refused_naming_both_positions() -> None:
    jobs = [
        drover.PeriodicJob("a", "@hourly", Report()),
        drover.PeriodicJob("b", "@daily", Report()),
        drover.PeriodicJob("a", "@weekly", Report()),
    ]
    with pytest.raises(drover.ConfigError) as raised:
        drover.plugins.Periodic(jobs=jobs)
    assert str(raised.value) == ("plugin 'periodic': jobs[2] duplicates id 'a' of jobs[0]")
    assert isinstance(raised.value, drover.InvalidArgument)
    # The deprecated field names itself, as it always did.
    with (
        pytest.warns(DeprecationWarning, match="Config.periodic_jobs is deprecated"),
        pytest.raises(drover.ConfigError) as raised,
    ):
        drover.Config(periodic_jobs=jobs)
    assert str(raised.value) == (
        "Config.periodic_jobs[2] duplicates id 'a' of Config.periodic_jobs[0]"
    )


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ("nightly", "plugin 'periodic': jobs must be a list of drover.PeriodicJob"),
        ([("a", "@hourly")], "plugin 'periodic': jobs[0] must be a drover.PeriodicJob"),
    ],
)
def test_periodic_jobs_must_be_a_list_of_entries(entries: object, message: str) -> None:
    with pytest.raises(drover.ConfigError) as raised:
        drover.plugins.Periodic(jobs=entries)  # type: ignore[arg-type]
    assert message in str(raised.value)


def test_two_entries_may_insert_the_same_kind() -> None:
    config = drover.Config(
        plugins=[
            drover.plugins.Periodic(
                jobs=[
                    drover.PeriodicJob("hourly", "@hourly", Report(day="h")),
                    drover.PeriodicJob("daily", "@daily", Report(day="d")),
                ]
            )
        ]
    )
    periodic = config.plugin("periodic")
    assert isinstance(periodic, drover.plugins.Periodic)
    assert [j.id for j in periodic.jobs] == ["hourly", "daily"]


def test_a_tick_carries_its_key_and_time_and_the_entrys_options() -> None:
    from datetime import UTC, datetime

    fire = datetime(2026, 1, 15, 10, 5, 0, 250000, tzinfo=UTC)
    job = drover.PeriodicJob("tick", "@every 250ms", Report(), drover.InsertOpts(queue="q"))
    opts = tick_opts(job, fire)
    assert opts.unique_key == "tick/2026-01-15T10:05:00.250000Z"
    assert opts.scheduled_at == fire and opts.queue == "q"
    assert tick_key("n", fire.replace(microsecond=0)) == "n/2026-01-15T10:05:00Z"
