"""The job kinds of the `manage.py drover worker` tests: one that fails, every time."""

from __future__ import annotations

import drover

__all__ = ["DjBoom", "workers"]


class DjBoom(drover.JobArgs, kind="dj_boom"):
    """Fails on every attempt."""


workers = drover.Workers()


@workers.register
def boom(job: drover.Job[DjBoom]) -> None:
    """Fail: the worker logs it."""
    raise RuntimeError("dj boom")
