"""drover's own fault suite and soak: run from a clone of the repository, never installed.

``python -m faults`` runs one fault-injection scenario and checks it
(``faults.suite``, docs/reliability.md, ADR 0014); ``python -m faults soak``
runs the soak (``faults.soak``, ADR 0041). Both stand on the harness that
ships in the package (``drover.faults.harness``: the cluster, the proxy, the
fleet and the nemesis, the history and its checker), which is also what
``drover faults --app`` runs a user's handlers under. They import drover as
any program would, and nothing in drover imports them (ADR 0049).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["ROOT", "worker_environment"]

ROOT = Path(__file__).resolve().parents[1]
"""The clone's root: what a worker process needs on its path to import ``faults``."""


def worker_environment(**extra: str) -> dict[str, str]:
    """This process's environment for a worker process (``python -m faults.suite.workload``).

    The clone's root goes first on ``PYTHONPATH``, so a worker imports this
    ``faults`` package whatever directory the run was started from.
    """
    path = os.environ.get("PYTHONPATH")
    joined = str(ROOT) if not path else os.pathsep.join([str(ROOT), path])
    return {**os.environ, "PYTHONPATH": joined, **extra}
