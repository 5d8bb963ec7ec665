"""A workflow's jobs in topological layers, shared by ``drover workflow show`` and the status page.

Pure computation over a ``drover.Workflow`` snapshot: no I/O, no third-party
imports (the status page imports it without the CLI's database helpers, and
the CLI without the ``web`` extra).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from drover.workflows import Workflow, WorkflowJob

__all__ = ["id_ranges", "layers", "preview"]


def layers(workflow: Workflow) -> list[list[WorkflowJob]]:
    """The workflow's jobs grouped by their longest path from a root, each layer in id order.

    Layer 0 holds the jobs that wait for nothing inside the workflow (a
    dependency outside it, or one retention deleted, does not count); a job
    sits one layer after the furthest job it waits for, so every job of a
    layer can run once the layers before it completed, and a chord's
    callback comes after its slowest member's chain. O(jobs + edges).
    """
    by_id = {j.row.id: j for j in workflow.jobs}
    inside = {j.row.id: [d for d in j.depends_on if d in by_id] for j in workflow.jobs}
    waiting = {job_id: len(deps) for job_id, deps in inside.items()}
    dependents: dict[int, list[int]] = {job_id: [] for job_id in by_id}
    for job_id, deps in inside.items():
        for dep in deps:
            dependents[dep].append(job_id)
    depth = dict.fromkeys(by_id, 0)
    ready = [job_id for job_id, n in waiting.items() if n == 0]
    placed = 0
    while ready:  # Kahn's order: a job's depth is final once its last dependency is placed
        job_id = ready.pop()
        placed += 1
        for child in dependents[job_id]:
            depth[child] = max(depth[child], depth[job_id] + 1)
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
    if placed < len(by_id):
        # The insert cannot make a cycle; should a hand-written edge make one,
        # its jobs go after everything else rather than vanish from the view.
        last = max(depth.values(), default=0) + 1
        for job_id, n in waiting.items():
            if n:
                depth[job_id] = last
    grouped: dict[int, list[WorkflowJob]] = {}
    for job in workflow.jobs:  # id order, kept within each layer
        grouped.setdefault(depth[job.row.id], []).append(job)
    return [grouped[d] for d in sorted(grouped)]


def id_ranges(ids: Iterable[int]) -> str:
    """Ids sorted, runs of consecutive ids folded: ``41-43, 45`` (a group's members are one run)."""
    runs: list[list[int]] = []
    for value in sorted(set(ids)):
        if runs and value == runs[-1][1] + 1:
            runs[-1][1] = value
        else:
            runs.append([value, value])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def preview(result: Any, width: int = 60) -> str:
    """A result as compact JSON on one line, cut to ``width`` characters with an ellipsis.

    ``json.dumps`` escapes newlines and control characters inside strings, so
    the preview never breaks a line or sends a terminal an escape sequence.
    """
    text = json.dumps(result, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    text = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in text)
    return text if len(text) <= width else text[: width - 1] + "\u2026"
