"""The fault suite's workflows: chains and chords of ``FaultStep`` jobs, and how they are inserted.

``build`` draws a seeded list of workflows of a few shapes:

=============== ===== =================================================================
shape           share what it is
=============== ===== =================================================================
chain           50 %  2-4 steps, one after another
chord           25 %  a group of 2-4 members, then a callback
chord + step    15 %  a chord whose callback is followed by one more step
failing chord   10 %  a chord with one ``poison`` member (2 attempts): it ends dead, so
                      its callback and the step after it must be cancelled, never run
=============== ===== =================================================================

One step in seven fails its first attempt (a retry before the release).
Steps run 5-30 ms. ``feed`` inserts them as the suite inserts other jobs:
every other workflow with ``client.insert`` (one transaction of drover's),
the rest with ``client.insert_tx`` inside a transaction of the feeder's own,
retrying while the nemesis has the database down. An insert whose commit
was unknown may be retried and so inserted twice: that is two workflows,
each judged on its own.
"""

from __future__ import annotations

import contextlib
import random
import time
from typing import Any

import psycopg

import drover
from drover.workflows import Step, flatten
from faults.suite.workload import FaultStep

__all__ = ["STEP_ATTEMPTS", "SuiteWorkflow", "build", "feed", "steps_of"]

SuiteWorkflow = drover.Chain | drover.Group
"""What ``build`` makes and ``feed`` inserts."""

STEP_ATTEMPTS = 8
"""A step's ``max_attempts``: faults spend attempts (each rescue is one), as for ``flaky`` jobs."""

_POISON_ATTEMPTS = 2

_SHAPES = (("chain", 0.50), ("chord", 0.25), ("chord_step", 0.15), ("failing_chord", 0.10))


def _step(rng: random.Random, workload: str = "step") -> Step:
    fails = 1 if workload == "step" and rng.random() < 1 / 7 else 0
    attempts = _POISON_ATTEMPTS if workload == "poison" else STEP_ATTEMPTS
    return (
        FaultStep(workload=workload, seconds=rng.uniform(0.005, 0.03), fail_times=fails),
        drover.InsertOpts(max_attempts=attempts),
    )


def build(rng: random.Random, count: int) -> list[SuiteWorkflow]:
    """``count`` workflows drawn with ``rng`` (seeded by the caller)."""
    names = [name for name, _ in _SHAPES]
    weights = [share for _, share in _SHAPES]
    out: list[SuiteWorkflow] = []
    for _ in range(count):
        shape = rng.choices(names, weights)[0]
        if shape == "chain":
            out.append(drover.chain(*(_step(rng) for _ in range(rng.randint(2, 4)))))
            continue
        members = [_step(rng) for _ in range(rng.randint(2, 4))]
        if shape == "failing_chord":
            members[rng.randrange(len(members))] = _step(rng, "poison")
        chord = drover.group(*members).then(_step(rng))
        out.append(chord.then(_step(rng)) if shape != "chord" else chord)
    return out


def steps_of(workflows: list[SuiteWorkflow]) -> int:
    """How many jobs ``workflows`` insert."""
    return sum(len(flatten(w)[0].jobs) for w in workflows)


def feed(client: drover.Client, dsn: str, workflows: list[SuiteWorkflow]) -> None:
    """Insert ``workflows``, alternating ``insert`` and ``insert_tx``; retry through faults."""
    for n, workflow in enumerate(workflows):
        deadline = time.monotonic() + 60
        while True:
            try:
                if n % 2 == 0:
                    client.insert(workflow)
                else:
                    _insert_tx(client, dsn, workflow)
                break
            except (drover.DatabaseError, psycopg.OperationalError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


def _insert_tx(client: drover.Client, dsn: str, workflow: SuiteWorkflow) -> None:
    conn: psycopg.Connection[Any] = psycopg.connect(dsn, connect_timeout=5)
    with contextlib.closing(conn), conn.transaction():
        client.insert_tx(conn, workflow)
