"""The worker: ``drover worker worker:make_client`` (from this directory, ``DATABASE_URL`` set)."""

from __future__ import annotations

import os

from jobs import workers

import drover


def make_client() -> drover.Client:
    """A client working the shop's queues on ``$DATABASE_URL``."""
    config = drover.Config(workers=workers, queues={"default": 1, "mail": 1}, poll_interval=0.2)
    return drover.Client(os.environ["DATABASE_URL"], config)
