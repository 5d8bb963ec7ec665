"""The fault harness: what any workload needs to be tested under faults.

A throwaway PostgreSQL cluster on a loopback TCP port (``.cluster``), a
loopback proxy that cuts or blackholes connections (``.proxy``), the
history model that handlers and the database are recorded into
(``.history``, its files ``.jsonl``), and the checker that judges a history
(``.checker``, its ``.report`` and the error ``.entries`` it reads, with
``.limit_check`` for concurrency limits).
None of it knows drover's own test workload: ``drover.faults.suite`` does.
"""

from __future__ import annotations

__all__: list[str] = []
