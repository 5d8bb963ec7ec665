"""The workflow view: a layered layout computed here and drawn as inline SVG (no JavaScript).

Layers come from ``drover.cli.graph.layers`` (longest path from the roots),
drawn left to right as columns: a chain reads forwards along the page, a
group's members stack in one column, a chord's callback sits right of its
members. Within a column, jobs are ordered by the mean row of the jobs they
wait for (one barycentre pass), which untangles chains of groups without an
iterative crossing minimisation. At most ``MAX_DRAWN`` jobs and
``MAX_EDGES`` edges are drawn, so a page of a 100,000-job workflow costs what
one of 300 does; the table under the drawing lists up to ``MAX_LISTED``.

Kinds are user data: every string reaches the SVG through ``escape``.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from markupsafe import Markup, escape

from drover.cli.graph import id_ranges, layers
from drover.errors import NotFound
from drover.inspector import Inspector
from drover.job import JobRow, JobState
from drover.workflows import Workflow, WorkflowJob

__all__ = [
    "MAX_DRAWN",
    "MAX_EDGES",
    "MAX_LISTED",
    "JobLinks",
    "job_links",
    "result_text",
    "workflow_context",
    "workflow_svg",
]

MAX_DRAWN = 300
"""The most jobs the drawing shows (the first ones, layer by layer)."""
MAX_EDGES = 3000
"""The most dependency lines drawn (a group followed by a group has members squared)."""
MAX_LISTED = 1000
"""The most jobs the table under the drawing lists."""

_NODE_W, _NODE_H = 180, 44
_GAP_X, _GAP_Y = 56, 14
_PAD = 16
_KIND_CHARS = 24


class _Placed(NamedTuple):
    job: WorkflowJob
    x: int
    y: int


def _layout(workflow: Workflow) -> tuple[list[_Placed], int, int, int]:
    """The drawn jobs with their boxes' top-left corners, the width, the height, jobs left out."""
    drawn: list[list[WorkflowJob]] = []
    budget = MAX_DRAWN
    for layer in layers(workflow):
        if budget <= 0:
            break
        drawn.append(layer[:budget])
        budget -= len(drawn[-1])
    row_of: dict[int, float] = {}
    columns: list[list[WorkflowJob]] = []
    for layer in drawn:

        def centre(job: WorkflowJob) -> tuple[float, int]:
            rows = [row_of[d] for d in job.depends_on if d in row_of]
            return (sum(rows) / len(rows) if rows else -1.0, job.row.id)

        ordered = sorted(layer, key=centre)
        for index, job in enumerate(ordered):
            row_of[job.row.id] = index
        columns.append(ordered)
    tallest = max((len(c) for c in columns), default=0)
    step_y = _NODE_H + _GAP_Y
    placed: list[_Placed] = []
    for number, column in enumerate(columns):
        # Centre each column on the tallest one: a chord's callback sits
        # level with the middle of its members.
        offset = (tallest - len(column)) * step_y // 2
        x = _PAD + number * (_NODE_W + _GAP_X)
        placed.extend(
            _Placed(job, x, _PAD + offset + index * step_y) for index, job in enumerate(column)
        )
    width = _PAD * 2 + max(len(columns) * (_NODE_W + _GAP_X) - _GAP_X, 0)
    height = _PAD * 2 + max(tallest * step_y - _GAP_Y, 0)
    return placed, width, height, len(workflow.jobs) - len(placed)


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def workflow_svg(workflow: Workflow, base: str) -> tuple[Markup, int, int]:
    """The drawing, how many jobs it leaves out and how many dependency lines.

    Each job is a box (kind, id, state, attempt) coloured by its state and
    linking to its job page; each dependency inside the drawing a curve from
    the job waited for to the job waiting, ending in an arrow.
    """
    placed, width, height, hidden = _layout(workflow)
    at = {p.job.row.id: p for p in placed}
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="workflow" role="img" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        'aria-labelledby="workflow-title">',
        f'<title id="workflow-title">Workflow {workflow.id}: its jobs by dependency layer</title>',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#78909c"/>'
        "</marker></defs>",
    ]
    edges = 0
    for p in placed:
        for dep in sorted(p.job.depends_on):
            source = at.get(dep)
            if source is None:
                continue
            edges += 1
            if edges > MAX_EDGES:
                continue
            x1, y1 = source.x + _NODE_W, source.y + _NODE_H // 2
            x2, y2 = p.x, p.y + _NODE_H // 2
            bend = (x2 - x1) // 2
            parts.append(
                f'<path class="edge" data-from="{dep}" data-to="{p.job.row.id}" '
                f'd="M{x1},{y1} C{x1 + bend},{y1} {x2 - bend},{y2} {x2},{y2}" '
                'fill="none" stroke="#90a4ae" stroke-width="1.2" marker-end="url(#arrow)"/>'
            )
    for p in placed:
        row = p.job.row
        state = row.state.value
        tries = f" \u00b7 try {row.attempt}" if row.attempt > 1 else ""
        href = f"{escape(base)}/jobs/{row.id}"
        kind = escape(_short(row.kind, _KIND_CHARS))
        parts.append(
            f'<a class="node state-{state}" data-job="{row.id}" href="{href}">'
            f"<title>{escape(row.kind)} (job {row.id}): {state}, attempt {row.attempt}</title>"
            f'<rect x="{p.x}" y="{p.y}" width="{_NODE_W}" height="{_NODE_H}" rx="5"/>'
            f'<text x="{p.x + 8}" y="{p.y + 18}" class="kind">{kind}</text>'
            f'<text x="{p.x + 8}" y="{p.y + 35}" class="meta">#{row.id} \u00b7 {state}{tries}'
            "</text></a>"
        )
    parts.append("</svg>")
    # Every string above is a number, a fixed word, a state name or escaped.
    return Markup("".join(parts)), hidden, max(edges - MAX_EDGES, 0)  # noqa: S704


def workflow_context(workflow: Workflow, base: str) -> dict[str, Any]:
    """What ``workflow.html`` renders: the drawing, state counts and the job table."""
    svg, hidden, edges_hidden = workflow_svg(workflow, base)
    counts = {s.value: 0 for s in JobState}
    for job in workflow.jobs:
        counts[job.row.state.value] += 1
    layer_of = {j.row.id: n for n, layer in enumerate(layers(workflow), start=1) for j in layer}
    listed = sorted(workflow.jobs, key=lambda j: (layer_of[j.row.id], j.row.id))[:MAX_LISTED]
    return {
        "workflow": workflow,
        "svg": svg,
        "hidden": hidden,
        "edges_hidden": edges_hidden,
        "drawn": len(workflow.jobs) - hidden,
        "counts": {s: n for s, n in counts.items() if n},
        "listed": [(j, layer_of[j.row.id], id_ranges(j.depends_on)) for j in listed],
        "unlisted": len(workflow.jobs) - len(listed),
    }


class JobLinks(NamedTuple):
    """A job's place in its workflow, for the job page."""

    workflow_id: int
    waits_for: tuple[int, ...]
    needed_by: tuple[int, ...]


def job_links(inspector: Inspector, row: JobRow) -> JobLinks | None:
    """The job's workflow and its neighbours in it; ``None`` for a job in no workflow.

    Reads the whole workflow (one statement): the job page of a job in a very
    large workflow costs that read on each refresh.
    """
    try:
        workflow = inspector.workflow(row.id)
    except NotFound:
        return None
    waits: tuple[int, ...] = ()
    needed: list[int] = []
    for job in workflow.jobs:
        if job.row.id == row.id:
            waits = tuple(sorted(job.depends_on))
        elif row.id in job.depends_on:
            needed.append(job.row.id)
    return JobLinks(workflow.id, waits, tuple(needed))


def result_text(inspector: Inspector, row: JobRow) -> str | None:
    """A completed job's result as indented JSON, ``"null"`` for none; ``None`` if not completed."""
    if row.state is not JobState.COMPLETED:
        return None
    try:
        result = inspector.get_result(row.id)
    except NotFound:  # deleted by retention since the page read the row
        return None
    return json.dumps(result, indent=2, ensure_ascii=False, sort_keys=True)
