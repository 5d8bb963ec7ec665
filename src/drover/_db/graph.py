"""Inserting jobs with dependencies, and reading workflows back (``workflows.sql``)."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from psycopg.rows import tuple_row

from drover._db import Connection
from drover._db.errors import translate
from drover._db.insert import decoration
from drover._db.namespace import DEFAULT, Namespace
from drover._db.plans import ALL, Execute, Plan, atomic, run
from drover._db.queries import query
from drover._db.rows import decode_json, new_row, row_from_db
from drover._records import EncodedGraph
from drover.errors import InvalidInsertOpts
from drover.job import JobRow, JobState
from drover.workflows import WorkflowJob, WorkflowSummary

__all__ = [
    "GRAPH_ACTION",
    "ParentResult",
    "graph_plan",
    "job_insert_graph",
    "job_parent_results",
    "workflow_jobs",
]

_ENDED_BADLY = frozenset({JobState.DEAD.value, JobState.CANCELLED.value})


def _json_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def job_insert_graph(
    conn: Connection,
    graph: EncodedGraph,
    *,
    notify: bool,
    own_transaction: bool = False,
    ns: Namespace = DEFAULT,
) -> tuple[list[JobRow], int | None]:
    """Insert ``graph`` on ``conn``, inside its open transaction (or, with
    ``own_transaction``, one of its own); rows in input order.

    ``graph_plan`` carried out on ``conn`` (``drover._db.aio`` carries out the
    same plan on an async connection). Returns the rows and the workflow id
    (``None`` when ``graph.workflow`` is false).
    """
    plan = graph_plan(graph, notify=notify, ns=ns)
    return run(conn, atomic(plan) if own_transaction else plan, GRAPH_ACTION)


GRAPH_ACTION = "insert jobs with dependencies"
"""What an error of ``graph_plan`` says drover was doing."""


def graph_plan(
    graph: EncodedGraph, *, notify: bool, ns: Namespace = DEFAULT
) -> Plan[tuple[list[JobRow], int | None]]:
    """The writes of a graph, in the caller's (or an ``Atomic``'s) transaction.

    First locks the existing jobs it depends on (raising
    ``drover.InvalidInsertOpts``, before anything is written, for one that
    does not exist or ended dead or cancelled) and flags them as having
    dependents; then one statement inserts the jobs and the edges.
    """
    external = sorted({job_id for _, job_id in graph.external})
    completed: set[int] = set()
    if external:
        found = yield Execute(query("job_lock_dependencies", ns), {"ids": external}, ALL)
        states = {int(id_): str(state) for id_, state in found}
        for job_id in external:
            state = states.get(job_id)
            if state is None:
                raise InvalidInsertOpts(f"depends on job {job_id}, which does not exist")
            if state in _ENDED_BADLY:
                raise InvalidInsertOpts(
                    f"depends on job {job_id}, which ended {state} and will not complete"
                )
            if state == JobState.COMPLETED.value:
                completed.add(job_id)
        live = [i for i in external if i not in completed]
        if live:
            yield Execute(query("job_mark_has_dependents", ns), {"ids": live})
    pending = [0] * len(graph.params)
    has_dependents = [False] * len(graph.params)
    for waiting, waited_for in graph.edges:
        pending[waiting] += 1
        has_dependents[waited_for] = True
    for waiting, job_id in graph.external:
        if job_id not in completed:
            pending[waiting] += 1
    nodes = ",".join(
        f"[{_json_string(p.kind)},{_json_string(p.queue)},{p.args_json},{p.max_attempts},"
        f"{'null' if p.scheduled_at is None else _json_string(p.scheduled_at.isoformat())},"
        f"{p.priority},{pending[i]},{'true' if has_dependents[i] else 'false'}"
        f"{decoration(p) if p.tags or p.meta is not None else ''}]"
        for i, p in enumerate(graph.params)
    )
    # 1-based ordinals, as WITH ORDINALITY numbers the nodes.
    child = [c + 1 for c, _ in graph.edges] + [c + 1 for c, _ in graph.external]
    parent: list[int | None] = [p + 1 for _, p in graph.edges]
    parent += [None] * len(graph.external)
    ext: list[int | None] = [None] * len(graph.edges)
    ext += [job_id for _, job_id in graph.external]
    found = yield Execute(
        query("job_insert_graph", ns),
        {
            "nodes": f"[{nodes}]",
            "workflow": graph.workflow,
            "child": child,
            "parent": parent,
            "external": ext,
            "notify": notify,
        },
        ALL,
    )
    rows = [
        new_row(p, id_, created_at, JobState(state), scheduled_at)
        for p, (id_, created_at, state, scheduled_at, _) in zip(graph.params, found, strict=True)
    ]
    workflow_id = found[0][4] if found else None
    return rows, None if workflow_id is None else int(workflow_id)


class ParentResult(NamedTuple):
    """A dependency of a job: its id, state and stored result (parsed JSON)."""

    id: int
    state: str
    result: Any


def job_parent_results(
    conn: Connection, job_id: int, *, ns: Namespace = DEFAULT
) -> list[ParentResult]:
    """The dependencies of ``job_id`` that still exist, in id order."""
    with (
        translate(f"read the dependencies of job {job_id}"),
        conn.cursor(row_factory=tuple_row) as cur,
    ):
        cur.execute(query("job_parent_results", ns), {"id": job_id})
        return [
            ParentResult(int(i), str(s), None if r is None else decode_json(r))
            for i, s, r in cur.fetchall()
        ]


def workflow_jobs(
    conn: Connection, workflow_or_job_id: int, *, ns: Namespace = DEFAULT
) -> tuple[int, list[WorkflowJob]] | None:
    """The workflow of a job (or with that id): its id and jobs in id order; ``None``
    when the job does not exist or belongs to no workflow."""
    with translate("read a workflow"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("job_workflow_id", ns), {"id": workflow_or_job_id})
        found = cur.fetchone()
        if found is None or found[0] is None:
            return None
        workflow_id = int(found[0])
        cur.execute(query("workflow_jobs", ns), {"id": workflow_id})
        jobs = [
            WorkflowJob(
                row_from_db(r),
                tuple(int(d) for d in r[-1]),
                None if r[-2] is None else decode_json(r[-2]),
            )
            for r in cur.fetchall()
        ]
    return workflow_id, jobs


def workflow_list(
    conn: Connection, limit: int, before: int | None, *, ns: Namespace = DEFAULT
) -> list[WorkflowSummary]:
    """The ``limit`` newest workflows (ids below ``before``), newest first, with their jobs
    counted by state."""
    with translate("list workflows"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("workflow_list", ns), {"limit": limit, "before": before})
        rows = cur.fetchall()
    return [WorkflowSummary(int(r[0]), r[1], r[2], *(int(n) for n in r[3:])) for r in rows]
