"""A tiny application for the ``drover worker APP`` tests in ``test_cli.py``.

``python -m drover worker cli_app:client`` (run with ``tests/cli`` as the
working directory and ``DATABASE_URL`` set) works ``cli_ping`` jobs: each one
completes at once. ``cli_app:make_client`` is the factory form.
``NOT_A_CLIENT`` is an attribute the CLI must refuse as an APP, and
``make_producer`` a factory of a client with no workers. ``cli_mail`` has
class defaults (queue ``mail``, 3 attempts) for ``drover enqueue --app``;
``cli_boom`` always fails, for the tests of what the worker logs.
"""

from __future__ import annotations

import os
import time

import psycopg

import drover

NOT_A_CLIENT = 42


class Ping(drover.JobArgs, kind="cli_ping"):
    """Args of the one job kind this app works."""

    note: str = ""


class Mail(drover.JobArgs, kind="cli_mail", queue="mail", max_attempts=3):
    """A kind with class defaults, for ``drover enqueue --app``."""

    to: str
    template: str = "welcome"


workers = drover.Workers()


@workers.register
def mail(job: drover.Job[Mail]) -> None:
    """Complete at once."""


@workers.register
def ping(job: drover.Job[Ping]) -> None:
    """Complete at once."""


class Boom(drover.JobArgs, kind="cli_boom"):
    """A kind whose every attempt fails."""


@workers.register
def boom(job: drover.Job[Boom]) -> None:
    """Fail: the worker logs the failure, and the death once the attempts run out."""
    raise RuntimeError("boom")


def make_producer() -> drover.Client:
    """A client that only inserts: no Config, so no workers (`drover worker` refuses it)."""
    return drover.Client(os.environ["DATABASE_URL"])


def make_client() -> drover.Client:
    """The factory form of the APP: a fresh client on ``$DATABASE_URL``."""
    return drover.Client(
        os.environ["DATABASE_URL"], drover.Config(workers=workers, poll_interval=0.05)
    )


client = make_client()


class Hold(drover.JobArgs, kind="cli_hold"):
    """Blocks its first attempt (until cancelled or 30 s), completes on a later one."""


@workers.register
def hold(job: drover.Job[Hold]) -> None:
    """The first attempt waits: a test kills its process and sees the job rescued.

    Cancelled by a drain that ran out of budget, it finishes only once the drain
    has handed its job back (or after 10 s). Finishing at once would race the
    hand-back: its own failure, written first, makes the hand-back a refused
    write and the drain look complete, which under load happened.
    """
    if job.attempt == 1:
        if job.context.wait(30):
            _until_handed_back(job.id, job.attempt, timeout=10.0)
        raise RuntimeError("the first attempt was not meant to finish")


def _until_handed_back(job_id: int, attempt: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT state = 'running' AND attempt = %s FROM drover_jobs WHERE id = %s",
                (attempt, job_id),
            ).fetchone()
            if row is None or not row[0]:
                return
            time.sleep(0.01)


def short_lease_client() -> drover.Client:
    """A client whose lease lapses 1 s after its process dies (for the supervisor tests)."""
    return drover.Client(
        os.environ["DATABASE_URL"],
        drover.Config(
            workers=workers,
            poll_interval=0.05,
            lease_duration=1.0,
            heartbeat_interval=0.25,
            rescue_interval=0.25,
            shutdown_timeout=2.0,
        ),
    )


def crashing_client() -> drover.Client:
    """Builds a client in the supervisor, but every supervised worker process dies at once."""
    if os.environ.get("DROVER_SUPERVISED_STATUS"):
        os._exit(1)
    return make_client()


class Stuck(drover.JobArgs, kind="cli_stuck"):
    """Sleeps a million seconds, deaf to ``job.context``: only its process's end ends it."""


@workers.register
def stuck(job: drover.Job[Stuck]) -> None:
    """Block as a handler that ignores cancellation does (the shutdown tests, ADR 0053)."""
    time.sleep(10**6)
