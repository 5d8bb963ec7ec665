"""The soak: a long run under periodic faults that checks nothing grows.

``python -m faults soak`` runs it, from the root of a clone.

``run`` is the orchestrator, ``figures`` the pure arithmetic of slopes and
bounds, ``gauges`` what is sampled; the worker processes are the fault
suite's workload with a short retention. See docs/reliability.md "Soak" and
ADR 0041.
"""

from __future__ import annotations

__all__: list[str] = []
