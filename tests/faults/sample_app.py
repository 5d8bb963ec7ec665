"""A sample application for ``drover faults --app`` (tests/faults/test_faults_app.py).

Two handlers write one row per job to the throwaway database the run gives
them (``DROVER_FAULTS_DATABASE_URL``), then keep working a moment, so a fault
that lands while they run lands after their effect:

- ``sample_upsert`` is idempotent: ``ON CONFLICT DO NOTHING`` keyed by the job id;
- ``sample_append`` is not: a plain ``INSERT`` per run, so a re-run repeats it.

``sample_flaky`` fails its first attempt (a ValueError the report counts as
raised) and has no effect check; ``sample_async`` is an ``async def``
handler; ``sample_unsampled`` gets no args at all.
"""

from __future__ import annotations

import asyncio
import os
import random
from typing import Any

import psycopg

import drover
from drover.faults.app import SampledJob

HOLD = 0.4
"""Seconds a handler keeps working after its effect: the window a fault hits."""

APPEND_HOLD = 2.0
"""``sample_append`` holds longer, so every process fault finds one in flight (the test's
verdict must not depend on the draw): it outlives a round, the upserts do not."""

DDL = """
CREATE TABLE IF NOT EXISTS sample_upserts (job_id bigint PRIMARY KEY);
CREATE TABLE IF NOT EXISTS sample_appends (job_id bigint NOT NULL);
"""


class Upsert(drover.JobArgs, kind="sample_upsert"):
    n: int


class Append(drover.JobArgs, kind="sample_append", queue="sample.appends"):
    n: int


class Flaky(drover.JobArgs, kind="sample_flaky"):
    n: int


class Pause(drover.JobArgs, kind="sample_async"):
    n: int


class Unsampled(drover.JobArgs, kind="sample_unsampled"):
    n: int


workers = drover.Workers()


def _effects_db() -> psycopg.Connection[tuple[Any, ...]]:
    # Read when a handler runs: the variable is set for the worker processes.
    return psycopg.connect(os.environ["DROVER_FAULTS_DATABASE_URL"], autocommit=True)


@workers.register
def upsert(job: drover.Job[Upsert]) -> None:
    with _effects_db() as conn:
        conn.execute(
            "INSERT INTO sample_upserts (job_id) VALUES (%s) ON CONFLICT DO NOTHING", (job.id,)
        )
    job.context.wait(HOLD)


@workers.register
def append(job: drover.Job[Append]) -> None:
    with _effects_db() as conn:
        conn.execute("INSERT INTO sample_appends (job_id) VALUES (%s)", (job.id,))
    job.context.wait(APPEND_HOLD)


@workers.register
def flaky(job: drover.Job[Flaky]) -> None:
    if job.attempt == 1:
        raise ValueError("the first attempt always fails")


@workers.register
async def pause(job: drover.Job[Pause]) -> None:
    """An async handler: the run records it through the middleware's async form."""
    await asyncio.sleep(0.01)


@workers.register
def unsampled(job: drover.Job[Unsampled]) -> None:
    """Never inserted: the report lists the kind as not sampled."""


def setup(database_url: str) -> None:
    """``--setup``: create the tables the handlers write to."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(DDL.encode())


_SAMPLED: dict[str, type[Upsert | Append | Flaky | Pause]] = {
    "sample_upsert": Upsert,
    "sample_append": Append,
    "sample_flaky": Flaky,
    "sample_async": Pause,
}

_COUNTS = {
    "sample_upsert": "SELECT count(*) FROM sample_upserts WHERE job_id = %s",
    "sample_append": "SELECT count(*) FROM sample_appends WHERE job_id = %s",
}


def sample_args(kind: str, rng: random.Random) -> drover.JobArgs | None:
    """``--args``: args for every kind but ``sample_unsampled`` (None: not sampled)."""
    args_type = _SAMPLED.get(kind)
    return None if args_type is None else args_type(n=rng.randrange(1_000_000))


def effects(job: SampledJob) -> int:
    """``--effects``: how many rows the job's handler left (upserts and appends)."""
    with _effects_db() as conn:
        row = conn.execute(_COUNTS[job.kind].encode(), (job.id,)).fetchone()
    return int(row[0]) if row else 0


BAD_ARGS = {"sample_upsert": 3}
"""Not an args source: a kind mapped to neither a callable nor a list."""


def broken_args(kind: str, rng: random.Random) -> drover.JobArgs:
    """An args factory with a bug."""
    raise KeyError(kind)


EFFECTS = {"sample_upsert": effects, "sample_append": effects}
"""The effect checks as a mapping: sample_flaky has none."""
