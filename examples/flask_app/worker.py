"""The worker: ``drover worker worker:make_client``, from this directory with ``DATABASE_URL`` set.

Every job runs inside the application's context (`drover.contrib.flask.app_context`),
so handlers use the shop's models and ``db.session`` as views do.
"""

from __future__ import annotations

import os

from app import create_app
from jobs import workers

import drover
from drover.contrib.flask import app_context


def make_client() -> drover.Client:
    """A client working the shop's queues on ``$DATABASE_URL``."""
    app = create_app()
    config = drover.Config(
        workers=workers,
        queues={"default": 1, "mail": 1},
        poll_interval=0.2,
        middleware=[app_context(app)],
    )
    return drover.Client(os.environ["DATABASE_URL"], config)
