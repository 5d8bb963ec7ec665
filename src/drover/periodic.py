"""Periodic jobs: what to insert on a schedule, and what operators see of it."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from drover._insert.encode import encode_insert
from drover._records import PeriodicInfo
from drover.errors import InvalidArgument, InvalidJobArgs
from drover.job import InsertOpts, JobArgs, _check_name
from drover.schedule import Schedule

__all__ = ["PeriodicInfo", "PeriodicJob", "tick_key", "tick_opts"]

MAX_PERIODIC_ID_LENGTH = 200


class PeriodicJob:
    """Insert ``args`` every time ``schedule`` fires, from whichever client leads.

    - ``id``: names this entry everywhere (the unique key of each tick, the
      watermark row, metrics, ``drover periodic list``). Keep it stable
      across deploys: a new id starts a new history. Two entries may insert
      the same kind.
    - ``schedule``: a cron expression or ``@every <duration>``
      (see ``drover.Schedule``), evaluated in ``timezone``.
    - ``args`` and ``opts``: what each tick inserts. ``opts`` may set the
      queue and ``max_attempts``; its ``unique_key`` and ``scheduled_at`` are
      replaced per tick (the key is ``f"{id}/{fire time in UTC, ISO 8601}"``
      and the job is due at its fire time).
    - ``run_on_start``: also insert one tick whenever a client becomes the
      leader (at start, and after a failover), in addition to the schedule.

    Every field is checked when the entry is built; a bad one raises
    ``drover.InvalidArgument`` naming the entry. Immutable.
    """

    __slots__ = ("args", "id", "opts", "run_on_start", "schedule")

    id: str
    schedule: Schedule
    args: JobArgs
    opts: InsertOpts
    run_on_start: bool

    def __init__(
        self,
        id: str,
        schedule: str | Schedule,
        args: JobArgs,
        opts: InsertOpts | None = None,
        timezone: str | ZoneInfo = "UTC",
        run_on_start: bool = False,
    ) -> None:
        try:
            checked_id = _check_name(id, "PeriodicJob id", MAX_PERIODIC_ID_LENGTH)
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(str(exc)) from None
        where = f"PeriodicJob {checked_id!r}"
        if isinstance(schedule, Schedule):
            parsed = schedule
        else:
            try:
                parsed = Schedule(schedule, timezone)
            except InvalidArgument as exc:
                raise InvalidArgument(f"{where}: {exc}") from None
        if not isinstance(args, JobArgs):
            raise InvalidArgument(
                f"{where}: args must be a drover.JobArgs instance, not {type(args).__qualname__}"
            )
        if opts is not None and not isinstance(opts, InsertOpts):
            raise InvalidArgument(f"{where}: opts must be a drover.InsertOpts, not {opts!r}")
        if not isinstance(run_on_start, bool):
            raise InvalidArgument(f"{where}: run_on_start must be True or False")
        try:
            # Encoded once now, so args that cannot be stored fail the deploy,
            # not every tick.
            encode_insert(args, opts)
        except InvalidJobArgs as exc:
            raise InvalidArgument(f"{where}: {exc}") from None
        for name, value in (
            ("id", checked_id),
            ("schedule", parsed),
            ("args", args),
            ("opts", opts or InsertOpts()),
            ("run_on_start", run_on_start),
        ):
            object.__setattr__(self, name, value)

    @property
    def timezone(self) -> ZoneInfo:
        """The zone the schedule is evaluated in."""
        return self.schedule.timezone

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("PeriodicJob is immutable")

    def __repr__(self) -> str:
        return (
            f"PeriodicJob({self.id!r}, {self.schedule.spec!r}, kind={self.args.kind!r}, "
            f"timezone={self.timezone.key!r})"
        )


def tick_key(periodic_id: str, fire: datetime) -> str:
    """The unique key of the tick of ``periodic_id`` firing at ``fire``.

    ``nightly/2026-01-15T02:30:00Z``; sub-second fire times keep their
    microseconds, so ``@every 250ms`` ticks never collide.
    """
    text = fire.astimezone(UTC).isoformat()
    return f"{periodic_id}/{text.removesuffix('+00:00')}Z"


def tick_opts(job: PeriodicJob, fire: datetime) -> InsertOpts:
    """The insert options of ``job``'s tick at ``fire``: its own, with the tick's key and time."""
    return InsertOpts(
        queue=job.opts.queue,
        max_attempts=job.opts.max_attempts,
        priority=job.opts.priority,
        scheduled_at=fire,
        unique_key=tick_key(job.id, fire),
        tags=job.opts.tags,
        meta=job.opts.meta,
    )
