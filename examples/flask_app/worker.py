"""The worker process: ``drover worker worker:make_client`` (with ``DATABASE_URL`` set)."""

from __future__ import annotations

import os

from jobs import receipt_worker, workers

import drover


def make_client() -> drover.Client:
    """A client working the shop's queues on ``$DATABASE_URL``."""
    url = os.environ["DATABASE_URL"]
    receipt_worker(url)
    return drover.Client(
        url, drover.Config(workers=workers, queues={"default": 1, "mail": 1}, poll_interval=0.2)
    )
