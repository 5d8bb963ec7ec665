"""The fault suite with a workflow-heavy workload: chains and chords under process and DB faults.

One scenario of ``python -m faults`` (its own cluster, as in
``test_fault_suite.py``) with more workflows than the default mix: 60 chains
and chords beside 300 jobs, while the nemesis SIGKILLs a worker, SIGSTOPs one
past its lease, crashes PostgreSQL and cuts every connection. The history
checker must find no violation, the workflow checks included: no step started
before a dependency's completion, no rerun of a step that no failure or fault
explains, no step of a failed dependency run, none left ``pending``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faults.suite.run import Scenario, run

pytestmark = pytest.mark.slow

WORKFLOWS = 60


def test_workflows_keep_their_order_and_run_once_unless_a_fault_explains_it(
    tmp_path: Path,
) -> None:
    report, figures = run(
        Scenario(
            jobs=300,
            faults=4,
            kinds=("kill", "stop", "pg_crash", "proxy_cut"),
            workflows=WORKFLOWS,
            seed=26,
            out=tmp_path / "wf",
            log=lambda _line: None,
        )
    )
    assert report.ok, report.summary()
    result = figures["report"]
    assert isinstance(result, dict)
    assert result["faults"] == {"kill": 1, "stop": 1, "pg_crash": 1, "proxy_cut": 1}
    flows = result["workflows"]
    assert isinstance(flows, dict)
    # An insert retried through the crash may have committed twice: never fewer.
    assert flows["workflows"] >= WORKFLOWS
    assert flows["steps"] > 3 * WORKFLOWS
    assert flows["dependents"] > WORKFLOWS
    assert flows["duplicates_unattributed"] == 0
    assert flows["cancelled_by_dependency"] > 0  # the failing chords' callbacks, never run
    assert flows["retried"] > 0  # steps that failed an attempt were retried, then released
    assert result["lost"] == 0
    print(json.dumps(flows, indent=2))
