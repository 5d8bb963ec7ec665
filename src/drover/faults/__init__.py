"""Fault injection, kept apart from the library: nothing else in ``drover`` imports it.

``drover.faults.harness`` is the reusable part (a throwaway cluster, a
loopback proxy, the history model and its checker); ``drover.faults.suite``
is drover's own workload and orchestrator, ``python -m drover.faults`` (see
docs/reliability.md and ADR 0014); ``drover.faults.soak`` runs many jobs
under periodic faults and checks that nothing grows,
``python -m drover.faults soak`` (ADR 0041).
"""

from __future__ import annotations

__all__: list[str] = []
