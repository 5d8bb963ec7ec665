"""drover's own fault-injection suite: its workload of jobs and the orchestrator that runs it.

``.workload`` is the worker process (a seeded mix of fast, slow, flaky,
snoozing, cancelling and poison jobs, and jobs of a kind under cluster-wide
concurrency limits, each recording its side effects);
``.run`` starts the cluster, the proxy and the workers, injects faults
(the nemesis) and checks the history with the harness's checker.
"""

from __future__ import annotations

__all__: list[str] = []
