"""``drover workflow show ID``: a workflow's steps in dependency order, with their states.

A workflow is a DAG: a chord's callback waits for every member, a group
after a group makes each of the second wait for each of the first. An
indented tree would repeat every job reached by two paths (a group-to-group
step would print its second group once per member of the first), so the
command prints topological layers instead: each job once, under the layer
of its longest path from a root, with the ids it waits for. A layer's jobs
can run side by side once the layers above it completed; reading down is
reading the workflow forwards. The status page draws the same layers.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import typer

import drover
from drover.cli.common import emit, fail, get_globals, open_inspector, parse_job_id
from drover.cli.graph import id_ranges, layers, preview
from drover.job import JobState
from drover.workflows import Workflow

__all__ = ["workflow_app", "workflow_dict", "workflow_text"]

workflow_app = typer.Typer(
    help="See workflows (chains, groups, chords) and their steps.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

_STATE_ORDER = [s.value for s in JobState]


def _summary(workflow: Workflow) -> str:
    counts = Counter(j.row.state.value for j in workflow.jobs)
    parts = ", ".join(f"{counts[s]} {s}" for s in _STATE_ORDER if counts[s])
    n = len(workflow.jobs)
    return f"workflow {workflow.id}: {workflow.state}, {n} job{'' if n == 1 else 's'} ({parts})"


def workflow_text(workflow: Workflow, results: dict[int, Any]) -> str:
    """The workflow for people: a summary line, then each layer's jobs, one line each.

    A line is the job's id, kind, state and attempt, then what it waits for
    (ids inside the workflow folded into ranges, any outside it named as
    such) and, for a completed job with a result, a one-line preview of it.
    """
    inside = {j.row.id for j in workflow.jobs}
    grouped = layers(workflow)
    lines: list[tuple[str, str, str, str, str]] = []
    heads: dict[int, str] = {}
    for number, layer in enumerate(grouped, start=1):
        heads[len(lines)] = f"layer {number}" + (" (starts first)" if number == 1 else "")
        for job in layer:
            row = job.row
            notes: list[str] = []
            waits = [d for d in job.depends_on if d in inside]
            outside = [d for d in job.depends_on if d not in inside]
            if waits:
                notes.append(f"waits for {id_ranges(waits)}")
            if outside:
                notes.append(f"waits for {id_ranges(outside)} (not in this workflow)")
            if row.id in results and results[row.id] is not None:
                notes.append(f"result {preview(results[row.id])}")
            lines.append(
                (str(row.id), row.kind, row.state.value, f"attempt {row.attempt}", "  ".join(notes))
            )
    widths = [max((len(line[i]) for line in lines), default=0) for i in range(4)]
    out = [_summary(workflow)]
    for index, (job_id, kind, state, attempt, said) in enumerate(lines):
        if index in heads:
            out.append(heads[index])
        cells = [job_id.rjust(widths[0]), kind.ljust(widths[1]), state.ljust(widths[2])]
        cells.append(attempt.ljust(widths[3]))
        out.append(("  " + "  ".join(cells) + "  " + said).rstrip())
    return "\n".join(out)


def workflow_dict(workflow: Workflow, results: dict[int, Any]) -> dict[str, Any]:
    """The workflow as stable snake_case keys (``--json``); ``result`` only on completed jobs."""
    jobs = []
    for job in workflow.jobs:
        row = job.row
        entry: dict[str, Any] = {
            "id": row.id,
            "kind": row.kind,
            "queue": row.queue,
            "state": row.state.value,
            "attempt": row.attempt,
            "depends_on": sorted(job.depends_on),
        }
        if row.state is JobState.COMPLETED:
            entry["result"] = results.get(row.id)
        jobs.append(entry)
    return {"id": workflow.id, "state": workflow.state, "jobs": jobs}


@workflow_app.command("show")
def workflow_show_command(
    ctx: typer.Context,
    job_id: str = typer.Argument(
        ..., metavar="ID", help="The id of any job of the workflow (its first job's is the id)."
    ),
) -> None:
    """A workflow's jobs in dependency layers: state, attempt, what each waits for, results.

    One snapshot of the workflow, then one read per completed job for its
    result: a job that ends meanwhile shows as it was.
    """
    g = get_globals(ctx)
    checked = parse_job_id(job_id)
    with open_inspector(g) as inspector:
        try:
            workflow = inspector.workflow(checked)
        except drover.NotFound:
            try:
                inspector.get_job(checked)
            except drover.NotFound:
                fail(f"job {checked} does not exist")
            fail(f"job {checked} belongs to no workflow (it was inserted on its own)")
        # Read with the workflow, in the same statement.
        results: dict[int, Any] = {
            job.row.id: job.result for job in workflow.jobs if job.row.state is JobState.COMPLETED
        }
    emit(g, workflow_text(workflow, results), workflow_dict(workflow, results))
