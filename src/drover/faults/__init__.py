"""Fault injection, kept apart from the library: nothing else in ``drover`` imports it.

``drover.faults.harness`` is the reusable part (a throwaway cluster, a
loopback proxy, the worker fleet and the nemesis, the history model and its
checker); ``drover.faults.app`` runs a user's handlers under it, as
``drover faults --app`` (ADR 0039). drover's own fault suite and soak are
not in the package: they live in a clone of the repository, ``python -m
faults`` and ``python -m faults soak`` (docs/reliability.md, ADR 0049).
"""

from __future__ import annotations

__all__: list[str] = []
