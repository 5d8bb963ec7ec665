"""The ``drover`` command line (``python -m drover``, or the ``drover`` script).

``app`` holds the typer application and registers the
commands; ``jobs``, ``queues`` and ``periodic`` the operator commands on
jobs, queues and periodic jobs; ``run`` the ``worker``, ``demo`` and ``bench``
commands, with the multi-process ``supervisor``;
``web`` the status page's server; ``common``
and ``output`` what they share.
"""

from __future__ import annotations

from drover.cli.app import app, hoist_globals, main

__all__ = ["app", "hoist_globals", "main"]
