"""A worker application for the tests of cancelling running jobs (``test_cancel_running.py``).

Two ways to run it, with ``tests/engine`` as the working directory:

* ``python cancel_app.py URL notify|poll [LEASE]``: one worker process (its
  lease is 3 s unless given, so its heartbeat runs every second; ``poll``
  turns notifications off);
* ``python -m drover worker cancel_app:client ...`` (``DATABASE_URL`` set):
  the same client for ``drover worker --processes N``.

Every handler reports through files in the directory its args name, never
through the test's memory: ``<id>.<attempt>.started`` holds the pid of the
process running it, ``<id>.<attempt>.seen`` the ``time.time()`` at which the
handler saw its cancellation signal. ``<dir>/release`` lets the waiting
handlers return.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import drover


class Cooperative(drover.JobArgs, kind="cancel_cooperative"):
    """Waits on its cancellation signal, then returns."""

    dir: str


class Ignoring(drover.JobArgs, kind="cancel_ignoring"):
    """Notes its cancellation signal but keeps working until released, then returns a value."""

    dir: str


class Raising(drover.JobArgs, kind="cancel_raising", max_attempts=5):
    """Waits on its cancellation signal, then raises."""

    dir: str


class Stuck(drover.JobArgs, kind="cancel_stuck"):
    """Never returns before released, whatever happens (what a hard cancel is for)."""

    dir: str


class Other(drover.JobArgs, kind="cancel_other"):
    """Another job of the same process: waits until released, then returns."""

    dir: str


workers = drover.Workers()


def _note(job: drover.Job[Any], folder: str, what: str, text: str) -> None:
    path = Path(folder) / f"{job.id}.{job.attempt}.{what}"
    scratch = path.with_suffix(".tmp")
    scratch.write_text(text)
    scratch.replace(path)  # whole, or not at all, for the test polling it


def _started(job: drover.Job[Any], folder: str) -> None:
    _note(job, folder, "started", str(os.getpid()))


def _until_released(folder: str, job: drover.Job[Any] | None = None) -> None:
    release = Path(folder) / "release"
    pause = threading.Event()
    seen = False
    while not release.exists():
        if job is not None and not seen and job.context.cancelled:
            seen = True
            _note(job, folder, "seen", repr(time.time()))
        pause.wait(0.01)


@workers.register
def cooperative(job: drover.Job[Cooperative]) -> None:
    _started(job, job.args.dir)
    job.context.wait()
    _note(job, job.args.dir, "seen", repr(time.time()))


@workers.register
def ignoring(job: drover.Job[Ignoring]) -> str:
    _started(job, job.args.dir)
    _until_released(job.args.dir, job)
    return "finished anyway"


@workers.register
def raising(job: drover.Job[Raising]) -> None:
    _started(job, job.args.dir)
    job.context.wait()
    _note(job, job.args.dir, "seen", repr(time.time()))
    raise RuntimeError("gave up after the cancel")


@workers.register
def stuck(job: drover.Job[Stuck]) -> None:
    _started(job, job.args.dir)
    _until_released(job.args.dir, job)


@workers.register
def other(job: drover.Job[Other]) -> None:
    _started(job, job.args.dir)
    _until_released(job.args.dir)


def config(notify: bool = True, lease: float = 3) -> drover.Config:
    return drover.Config(
        workers=workers,
        concurrency=4,
        lease_duration=lease,
        rescue_interval=0.5,
        poll_interval=0.1,
        notify=notify,
        shutdown_timeout=5,
    )


def make_client() -> drover.Client:
    """The APP of ``drover worker cancel_app:make_client``."""
    return drover.Client(os.environ["DATABASE_URL"], config())


def main(url: str, mode: str, lease: str = "3") -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
    client = drover.Client(url, config(notify=mode == "notify", lease=float(lease)))
    client.run()


if __name__ == "__main__":
    main(*sys.argv[1:])
