"""The fault harness: what any workload needs to be tested under faults.

A throwaway PostgreSQL cluster on a loopback TCP port (:mod:`.cluster`), a
loopback proxy that cuts or blackholes connections (:mod:`.proxy`), the
history model that handlers and the database are recorded into
(:mod:`.history`), and the checker that judges a history (:mod:`.checker`).
None of it knows drover's own test workload: :mod:`drover.faults.suite` does.
"""

from __future__ import annotations

__all__: list[str] = []
