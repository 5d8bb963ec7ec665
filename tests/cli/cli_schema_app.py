"""An APP whose client names its schema (``$CLI_APP_SCHEMA``), for ``test_cli_schemas.py``."""

from __future__ import annotations

import os

from cli_app import workers

import drover

client = drover.Client(
    os.environ["DATABASE_URL"], drover.Config(workers=workers, schema=os.environ["CLI_APP_SCHEMA"])
)
