"""The fault harness: what any workload needs to be tested under faults.

A throwaway PostgreSQL cluster on a loopback TCP port (``.cluster``), a
loopback proxy that cuts or blackholes connections (``.proxy``), the worker
processes and the nemesis that hits them (``.fleet``), what every worker
process shares (``.worker``), the history model that handlers and the
database are recorded into (``.history``, its files ``.jsonl``), and the
checker that judges a history (``.checker``, its ``.report`` and the error
``.entries`` it reads, with ``.limit_check`` for concurrency limits and
``.workflow_check`` for dependencies).
None of it knows a workload: ``drover faults --app`` (``drover.faults.app``)
brings the user's, and drover's own suite and soak live in a clone of the
repository (``faults/``), outside the package (ADR 0049).
"""

from __future__ import annotations

__all__: list[str] = []
