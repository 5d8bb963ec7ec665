"""The ``drover`` command line (``python -m drover``, or the ``drover`` script).

:mod:`~drover.cli.app` holds the typer application and the operator
commands; :mod:`~drover.cli.run` the ``worker``, ``demo`` and ``bench``
commands, with the multi-process :mod:`~drover.cli.supervisor`;
:mod:`~drover.cli.web` the status page's server; :mod:`~drover.cli.common`
and :mod:`~drover.cli.output` what they share.
"""

from __future__ import annotations

from drover.cli.app import app, hoist_globals, main

__all__ = ["app", "hoist_globals", "main"]
