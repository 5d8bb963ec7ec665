"""``cli_app``'s client, from an application that configures logging itself when imported.

`drover worker cli_app_logging:client` must leave this configuration alone:
every line on standard error then starts with ``APP``.
"""

from __future__ import annotations

import logging

from cli_app import client

__all__ = ["client"]

logging.basicConfig(format="APP %(levelname)s %(name)s %(message)s", level=logging.INFO)
