"""How the suite runs in parallel: how many xdist workers, and in what order they take the tests.

Hooks imported by ``conftest.py`` (ADR 0017):

- **Workers sized to the machine.** ``addopts`` asks for ``-n auto``, and
  `pytest_xdist_auto_num_workers` answers `WORKERS_PER_CPU` per usable CPU, at
  least `MIN_WORKERS`, at most `MAX_WORKERS` and at most one per `MEMORY_PER_WORKER`
  of available memory. ``-n N`` on the command line, or
  ``PYTEST_XDIST_AUTO_NUM_WORKERS``, still decides.
- **Longest first.** In the workers the collected tests are sorted by how long
  each took last time (kept in pytest's cache under `DURATIONS_KEY`; a test never
  timed counts as `GUESS_SLOW` seconds when marked ``slow``, else `GUESS`). For
  ``--dist load`` (``addopts``) `pytest_xdist_make_scheduler` hands out every test
  as a unit of its own to the next free worker in that order (xdist's own ``load``
  hands out consecutive chunks of a hundred), so the long tests start first and
  the short ones fill in at the end, instead of one worker finishing a long test
  alone.
- **Timing-sensitive tests not side by side.** The fault suite, the soak and the
  races between worker processes judge their own processes' timing (a drain's
  deadline, a freed slot refilled within a poll); run all at once on two cores
  they starved each other. The tests of each file of `TIMING_GROUPS` form one
  unit with the other files of their group, run one after another on one worker,
  and the groups are handed out first. (xdist's ``loadgroup`` cannot do it with
  pytest 9: it renames the tests' ids through an attribute pytest no longer reads.)
- **Bytecode once.** With ``PYTHONDONTWRITEBYTECODE`` set (as on some shared and
  CI machines), every worker compiled and rewrote the whole suite again (4 of its
  6 s of collection), and every subprocess (the CLI, Django, worker processes:
  hundreds of them) compiled drover's sources again. `keep_bytecode` has the
  suite's own processes write their caches (``__pycache__``, ignored by git), and
  the controller compiles drover's sources once for the subprocesses
  (`compile_sources`), which still read them.
"""

from __future__ import annotations

import compileall
import importlib
import os
import sys
from pathlib import Path
from typing import Any

import pytest

import drover

__all__ = [
    "DURATIONS_KEY",
    "GUESS",
    "GUESS_SLOW",
    "MAX_WORKERS",
    "MEMORY_PER_WORKER",
    "MIN_WORKERS",
    "TIMING_GROUPS",
    "WORKERS_PER_CPU",
    "compile_sources",
    "keep_bytecode",
    "pytest_collection_modifyitems",
    "pytest_runtest_logreport",
    "pytest_sessionfinish",
    "pytest_xdist_auto_num_workers",
    "pytest_xdist_make_scheduler",
    "unit_of",
    "workers_for",
]

WORKERS_PER_CPU = 2
"""The tests wait a lot (on threads, subprocesses, deadlines), so two share a CPU. On
the 2-core machine 4, 6 and 8 workers took the same wall time (the run is CPU-bound
there since the embedded servers moved to memory) and each pair of workers more cost
about 30 s more CPU; 3 took longer (ADR 0017)."""
MIN_WORKERS = 2
MAX_WORKERS = 16
MEMORY_PER_WORKER = 1024**3
"""A worker's pytest, its server (on ``/dev/shm``) and the subprocesses its tests start."""

TIMING_GROUPS = {
    "tests/faults/test_fault_suite.py": "timing-1",
    "tests/faults/test_fault_suite_workflows.py": "timing-1",
    "tests/faults/test_soak.py": "timing-2",
    "tests/faults/test_limit_races.py": "timing-2",
    "tests/faults/test_workflow_races.py": "timing-2",
    # Its faults wait a few seconds for a job in flight, then strike anyway.
    "tests/faults/test_faults_app.py": "timing-2",
}
"""Test files whose tests must not run beside each other, by group (two groups, so
that neither becomes the run's longest pole)."""

DURATIONS_KEY = "drover/durations"
GUESS = 1.0
GUESS_SLOW = 30.0

_measured: dict[str, float] = {}


def workers_for(cpus: int, available_memory: int | None) -> int:
    """How many xdist workers a machine with ``cpus`` usable CPUs and that much free memory gets."""
    count = max(MIN_WORKERS, min(MAX_WORKERS, WORKERS_PER_CPU * cpus))
    if available_memory is not None:
        count = min(count, max(MIN_WORKERS, available_memory // MEMORY_PER_WORKER))
    return count


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _available_memory() -> int | None:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: `workers_for` this machine (``PYTEST_XDIST_AUTO_NUM_WORKERS`` wins)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's own hook reads it
    return workers_for(_usable_cpus(), _available_memory())


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """In xdist workers, the longest tests first (every worker sorts alike: xdist checks)."""
    if not hasattr(config, "workerinput"):
        return
    known = _durations(config)

    def cost(item: pytest.Item) -> float:
        seconds = known.get(item.nodeid)
        if seconds is None:
            return GUESS_SLOW if item.get_closest_marker("slow") else GUESS
        return seconds

    order = {item.nodeid: n for n, item in enumerate(items)}
    items.sort(key=lambda item: (-cost(item), order[item.nodeid]))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add up each test's setup, call and teardown (in the controller, or a serial run)."""
    _measured[report.nodeid] = _measured.get(report.nodeid, 0.0) + report.duration


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """For ``--dist load``: xdist's scope scheduler, each test a unit but for the groups.

    The scope scheduler hands a free worker the next unit, the units in the
    collection's order but the groups (units of several tests) first; a worker
    gets another unit when two of its tests are left.
    """
    if config.getvalue("dist") != "load":
        return None
    scheduling: Any = importlib.import_module("xdist.scheduler")
    scheduler = scheduling.LoadScopeScheduling(config, log)
    scheduler._split_scope = unit_of
    return scheduler


def unit_of(nodeid: str) -> str:
    """The unit a test is handed out in: its file's timing group, or itself."""
    return TIMING_GROUPS.get(nodeid.split("::", 1)[0], nodeid)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Keep this run's durations for the next run's order (the controller writes them)."""
    config = session.config
    cache = getattr(config, "cache", None)  # none with -p no:cacheprovider
    if hasattr(config, "workerinput") or not _measured or cache is None:
        return
    durations = {**_durations(config), **{k: round(v, 2) for k, v in _measured.items()}}
    cache.set(DURATIONS_KEY, durations)


def _durations(config: pytest.Config) -> dict[str, float]:
    cache = getattr(config, "cache", None)
    if cache is None:
        return {}
    stored: Any = cache.get(DURATIONS_KEY, {})
    if not isinstance(stored, dict):
        return {}
    return {str(k): float(v) for k, v in stored.items() if isinstance(v, int | float)}


def keep_bytecode() -> None:
    """Let this process write bytecode caches whatever ``PYTHONDONTWRITEBYTECODE`` says.

    Called by ``conftest.py`` as it is imported, before any test module is.
    """
    sys.dont_write_bytecode = False


def compile_sources() -> None:
    """Compile drover's own sources once, for the subprocesses (up to date ones are skipped)."""
    compileall.compile_dir(Path(drover.__file__).parent, quiet=2)
