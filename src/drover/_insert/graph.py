"""Encoding jobs that depend on other jobs: workflows, and inserts with ``depends_on``.

Everything is validated and encoded before any connection is touched, as for
plain inserts; the graph then goes to ``drover._db.graph`` in one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence

from drover._insert.encode import encode_insert
from drover._insert.identity import needs_identity
from drover._records import EncodedGraph
from drover.errors import InvalidInsertOpts
from drover.job import InsertOpts, JobArgs
from drover.workflows import Chain, Group, flatten

__all__ = ["encode_dependent", "encode_workflow", "has_dependencies"]


def has_dependencies(opts: object) -> bool:
    """True for insert options that name jobs to wait for."""
    return isinstance(opts, InsertOpts) and bool(opts.depends_on)


def _encode(
    jobs: Sequence[tuple[JobArgs, InsertOpts | None]],
    edges: list[tuple[int, int]],
    *,
    workflow: bool,
    where: str,
) -> EncodedGraph:
    params = []
    external: list[tuple[int, int]] = []
    for index, (args, opts) in enumerate(jobs):
        prefix = f"{where} {index}: " if where else ""
        if needs_identity(opts):
            # Jobs with dependencies are inserted together, unconditionally: a
            # job among them cannot be returned instead of inserted.
            raise InvalidInsertOpts(
                f"{prefix or 'a job with depends_on: '}unique, debounce and throttle cannot be "
                "used in a workflow or in a batch where an item has depends_on"
            )
        params.append(encode_insert(args, opts, prefix))
        if opts is not None:
            # InsertOpts stores depends_on as sorted ids; rows only come in.
            external.extend((index, d if isinstance(d, int) else d.id) for d in opts.depends_on)
    return EncodedGraph(params, edges, external, workflow)


def encode_workflow(workflow: Chain | Group) -> tuple[EncodedGraph, list[int]]:
    """A workflow's jobs and edges, encoded; and the indexes of its last jobs."""
    graph, last = flatten(workflow)
    return _encode(graph.jobs, graph.edges, workflow=True, where="workflow job"), last


def encode_dependent(
    items: Sequence[tuple[JobArgs, InsertOpts | None]], where: str = ""
) -> EncodedGraph:
    """Jobs inserted on their own (not a workflow), some waiting for existing jobs."""
    return _encode(items, [], workflow=False, where=where)
