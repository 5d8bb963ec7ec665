"""Workflows: chains and groups of jobs, inserted together, run in dependency order.

``chain(a, b, c)`` runs ``b`` after ``a`` completed and ``c`` after ``b``;
``group(a, b, c)`` runs its members side by side; ``group(...).then(cb)``
runs ``cb`` once every member completed (Celery's chord). Steps nest: a chain
of groups, a group of chains. A workflow is a value; nothing is written until
``Client.insert`` (or ``insert_tx``) inserts every job of it in one
transaction, each job that waits for others ``pending`` (ADR 0029).

This module only describes and flattens workflows; it does no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple, TypeAlias

from drover.errors import InvalidArgument, InvalidInsertOpts, InvalidJobArgs
from drover.job import InsertOpts, JobArgs, JobRow, JobState

__all__ = [
    "MAX_WORKFLOW_EDGES",
    "MAX_WORKFLOW_JOBS",
    "Chain",
    "Graph",
    "Group",
    "InsertedWorkflow",
    "Step",
    "Workflow",
    "WorkflowJob",
    "WorkflowSummary",
    "chain",
    "flatten",
    "group",
]

MAX_WORKFLOW_JOBS = 100_000
"""The most jobs one workflow may hold (one insert statement carries them all)."""

MAX_WORKFLOW_EDGES = 1_000_000
"""The most dependencies one workflow may hold: a group followed by a group
makes every job of the second wait for every job of the first."""


class Chain:
    """Steps that run one after another: each starts once the previous one completed.

    A step is a ``JobArgs``, an ``(args, InsertOpts)`` pair, a ``Group`` or
    another ``Chain``. After a group, the next step waits for every member.
    Immutable; ``then`` returns a longer chain.
    """

    __slots__ = ("steps",)

    def __init__(self, steps: Sequence[Step]) -> None:
        if not steps:
            raise InvalidArgument("a chain needs at least one step")
        self.steps: tuple[Step, ...] = tuple(_checked(s, "chain") for s in steps)

    def then(self, *steps: Step) -> Chain:
        """This chain followed by ``steps``."""
        return Chain((*self.steps, *steps))

    def __repr__(self) -> str:
        return f"chain({', '.join(_name(s) for s in self.steps)})"


class Group:
    """Members that run side by side; what follows a group waits for all of them.

    ``group(...).then(callback)`` is a chord: ``callback`` runs once every
    member completed, and ``job.parent_results()`` gives it their results in
    member order. Immutable.
    """

    __slots__ = ("members",)

    def __init__(self, members: Sequence[Step]) -> None:
        if not members:
            raise InvalidArgument("a group needs at least one member")
        self.members: tuple[Step, ...] = tuple(_checked(m, "group") for m in members)

    def then(self, *steps: Step) -> Chain:
        """A chain: this group, then ``steps`` (the first of them waits for every member)."""
        return Chain((self, *steps))

    def __repr__(self) -> str:
        return f"group({', '.join(_name(m) for m in self.members)})"


Step: TypeAlias = "JobArgs | tuple[JobArgs, InsertOpts | None] | Chain | Group"
"""One element of a chain or group."""


def chain(*steps: Step) -> Chain:
    """Steps that run one after another (see ``Chain``)."""
    return Chain(steps)


def group(*members: Step) -> Group:
    """Members that run side by side (see ``Group``)."""
    return Group(members)


class Graph(NamedTuple):
    """A workflow flattened: its jobs in order and the edges between them."""

    jobs: list[tuple[JobArgs, InsertOpts | None]]
    edges: list[tuple[int, int]]
    """``(job, dependency)`` pairs of indexes into ``jobs``."""


class WorkflowJob(NamedTuple):
    """One job of a workflow, as read back: its row, the ids of the jobs it waits
    for, and its stored result (``None`` for none, or not completed yet)."""

    row: JobRow
    depends_on: tuple[int, ...]
    result: Any = None


class Workflow(NamedTuple):
    """A workflow as ``Inspector.workflow`` reads it: its id and its jobs in id order.

    A snapshot of one statement. ``state`` sums it up: ``completed`` when
    every job completed, ``failed`` when one ended dead or cancelled (its
    pending dependents were cancelled with it), else ``running``.
    """

    id: int
    jobs: tuple[WorkflowJob, ...]

    @property
    def state(self) -> str:
        """``completed``, ``failed`` or ``running`` (see the class)."""
        states = {j.row.state for j in self.jobs}
        if states <= {JobState.COMPLETED}:
            return "completed"
        if states & {JobState.DEAD, JobState.CANCELLED}:
            return "failed"
        return "running"


class WorkflowSummary(NamedTuple):
    """One workflow as ``Inspector.workflows`` lists it: its id (its first job's), when it
    was inserted, its first job's kind (``None`` once retention deleted it), and its jobs
    by state (``waiting`` includes ``pending``)."""

    id: int
    created_at: datetime
    first_kind: str | None
    jobs: int
    completed: int
    running: int
    waiting: int
    dead: int
    cancelled: int

    @property
    def state(self) -> str:
        """``completed``, ``failed`` or ``running``, as ``Workflow.state`` says it."""
        if self.completed == self.jobs:
            return "completed"
        if self.dead or self.cancelled:
            return "failed"
        return "running"


class InsertedWorkflow(NamedTuple):
    """What ``Client.insert`` returns for a workflow.

    ``id`` is the workflow's id (its first job's id; every job's
    ``workflow_id``); ``jobs`` are the rows in the order the workflow lists
    them, depth first; ``last`` are the jobs nothing in the workflow waits for
    (a chain's final step, a group's members), whose results end the workflow.
    """

    id: int
    jobs: tuple[JobRow, ...]
    last: tuple[JobRow, ...]


def _checked(step: object, where: str) -> Step:
    if isinstance(step, JobArgs | Chain | Group):
        return step
    if (
        isinstance(step, tuple)
        and len(step) == 2
        and isinstance(step[0], JobArgs)
        and (step[1] is None or isinstance(step[1], InsertOpts))
    ):
        return step
    raise InvalidJobArgs(
        f"a {where} step must be a drover.JobArgs, an (args, InsertOpts) pair, a chain or a "
        f"group, not {type(step).__qualname__}"
    )


def _name(step: Step) -> str:
    if isinstance(step, JobArgs):
        return type(step).__qualname__
    if isinstance(step, tuple):
        return type(step[0]).__qualname__
    return repr(step)


def flatten(workflow: Chain | Group) -> tuple[Graph, list[int]]:
    """The jobs and edges of ``workflow``, and the indexes of its last jobs.

    Raises ``drover.InvalidInsertOpts`` for a job with a unique key (a
    workflow's jobs cannot be deduplicated one by one) and for more than
    ``MAX_WORKFLOW_JOBS`` jobs.
    """
    jobs: list[tuple[JobArgs, InsertOpts | None]] = []
    edges: list[tuple[int, int]] = []

    def add(step: Step, after: list[int]) -> list[int]:
        if isinstance(step, Chain):
            for inner in step.steps:
                after = add(inner, after)
            return after
        if isinstance(step, Group):
            ends: list[int] = []
            for member in step.members:
                ends.extend(add(member, after))
            return ends
        args, opts = (step, None) if isinstance(step, JobArgs) else step
        if opts is not None and opts.unique_key:
            raise InvalidInsertOpts(
                f"workflow job {len(jobs)} ({type(args).__qualname__}) has a unique_key; "
                "jobs of a workflow cannot have one"
            )
        if len(jobs) >= MAX_WORKFLOW_JOBS:
            raise InvalidInsertOpts(f"a workflow holds at most {MAX_WORKFLOW_JOBS} jobs")
        index = len(jobs)
        jobs.append((args, opts))
        edges.extend((index, parent) for parent in after)
        if len(edges) > MAX_WORKFLOW_EDGES:
            raise InvalidInsertOpts(
                f"a workflow holds at most {MAX_WORKFLOW_EDGES} dependencies; put a step "
                "between two large groups"
            )
        return [index]

    if not isinstance(workflow, Chain | Group):
        raise InvalidJobArgs(f"not a workflow: {type(workflow).__qualname__}")
    last = add(workflow, [])
    return Graph(jobs, edges), last
