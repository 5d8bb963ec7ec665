"""The import graph: no cycle between modules, and no layer importing one above it.

Every ``import`` and ``from ... import`` in ``src/drover`` counts, wherever
it is written: at module level, inside a function, or under
``TYPE_CHECKING`` (a deferred import still ties the two modules together).
The layers are listed lowest first in ``LAYERS``; docs/architecture.md
draws the same map. Importing a package does not count as importing its
``__init__``'s contents, only the modules named.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

# Lowest first. A module may import modules of its own layer or of lower ones.
LAYERS: list[tuple[str, list[str]]] = [
    (
        "model: data, validation, no I/O",
        [
            "drover.errors",
            "drover._version",
            "drover._durations",
            "drover._address",
            "drover.context",
            "drover.unique",
            "drover.ledger",
            "drover.cancel_request",
            "drover._job_args",
            "drover._job_exec",
            "drover.job",
            "drover._records",
            "drover.queues",
            "drover.limits",
            "drover.results",
            "drover.progress",
            "drover.insert_middleware",
            "drover.workflows",
            "drover.schedule",
            "drover.retry",
            "drover.retention",
            "drover.middleware",
            "drover.worker",
            "drover.log",
            "drover.health",
        ],
    ),
    ("database", [r"drover\._db(\..+)?"]),
    ("insert side", [r"drover\._insert(\..+)?"]),
    ("configuration", ["drover.periodic", "drover.config"]),
    ("observability", [r"drover\.ops(\..+)?"]),
    ("engine", [r"drover\._runtime(\..+)?"]),
    (
        "facade",
        [
            "drover.client",
            "drover._client_inserts",
            "drover.async_client",
            "drover.inspector",
            "drover._operator_writes",
            "drover._jobs_and_queues",
            "drover.migrations",
        ],
    ),
    ("package", ["drover"]),
    (
        "surfaces",
        [
            r"drover\.testing(\..+)?",
            r"drover\.web(\..+)?",
            r"drover\.cli(\..+)?",
            r"drover\.contrib(\..+)?",
            r"drover\.faults(\..+)?",
            "drover.__main__",
        ],
    ),
]


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted((SRC / "drover").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(module: str, path: Path) -> Iterator[tuple[str, int]]:
    """``(imported drover module, line)`` for every import statement in ``path``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "drover" or alias.name.startswith("drover."):
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            if base != "drover" and not base.startswith("drover."):
                continue
            for alias in node.names:
                target = f"{base}.{alias.name}"
                yield (target if target in MODULES else base), node.lineno


def _graph() -> dict[str, dict[str, int]]:
    graph: dict[str, dict[str, int]] = {m: {} for m in MODULES}
    for module, path in MODULES.items():
        for target, line in _imports(module, path):
            assert target in MODULES, f"{module}:{line} imports {target}, which does not exist"
            if target != module:
                graph[module].setdefault(target, line)
    return graph


GRAPH = _graph()


def _layer(module: str) -> int:
    for index, (_, patterns) in enumerate(LAYERS):
        if any(re.fullmatch(p, module) for p in patterns):
            return index
    raise AssertionError(f"module {module} is in no layer: add it to LAYERS")


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_every_module_is_in_exactly_one_layer() -> None:
    for module in MODULES:
        matches = [
            name for name, patterns in LAYERS if any(re.fullmatch(p, module) for p in patterns)
        ]
        assert len(matches) == 1, f"{module} matches layers {matches}"


def test_no_import_cycle_between_modules() -> None:
    cycles = _cycles(GRAPH)
    described = [
        " -> ".join(f"{m} ({', '.join(t for t in GRAPH[m] if t in c)})" for m in c) for c in cycles
    ]
    assert not cycles, "import cycles:\n" + "\n".join(described)


def test_no_layer_imports_a_higher_one() -> None:
    upward = [
        f"{module}:{line} ({LAYERS[_layer(module)][0]}) imports {target} "
        f"({LAYERS[_layer(target)][0]})"
        for module, targets in GRAPH.items()
        for target, line in targets.items()
        if _layer(target) > _layer(module)
    ]
    assert not upward, "imports against the layering:\n" + "\n".join(upward)


# `drover faults --app` is the command that runs a user's handlers under the
# harness (ADR 0039): its module is the one door, and it imports the harness
# inside the command only, so `import drover.cli` still loads none of it.
_FAULTS_DOOR = "drover.cli.faults"


def test_nothing_outside_the_fault_harness_imports_it() -> None:
    importers = [
        f"{module}:{line}"
        for module, targets in GRAPH.items()
        if not module.startswith("drover.faults") and module != _FAULTS_DOOR
        for target, line in targets.items()
        if target.startswith("drover.faults")
    ]
    assert not importers, f"the fault harness is imported by {importers}"


def test_the_cli_loads_no_fault_harness_until_drover_faults_runs() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, drover.cli.app; "
         "print(sorted(m for m in sys.modules if m.startswith('drover.faults')))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert loaded == "[]"


def test_the_fault_harness_knows_nothing_of_drovers_own_suite() -> None:
    # The harness is what a user's handlers can be run under; the suite is
    # drover's own workload on top of it.
    leaks = [
        f"{module}:{line} imports {target}"
        for module, targets in GRAPH.items()
        if module.startswith("drover.faults.harness")
        for target, line in targets.items()
        if target.startswith("drover.faults.suite")
    ]
    assert not leaks, leaks


def test_the_checker_sees_function_level_and_type_checking_imports(tmp_path: Path) -> None:
    # The rules above are only as good as the graph: a deferred import counts.
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from drover.job import JobRow\n"
        "def f():\n    from drover.client import Client\n"
    )
    path = tmp_path / "probe.py"
    path.write_text(source)
    assert sorted(t for t, _ in _imports("drover.probe", path)) == ["drover.client", "drover.job"]


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b": 1}, "b": {"a": 1}}, [["a", "b"]]),
        ({"a": {"b": 1}, "b": {"c": 1}, "c": {}}, []),
        ({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}, [["a", "b", "c"]]),
    ],
)
def test_the_cycle_finder(graph: dict[str, dict[str, int]], expected: list[list[str]]) -> None:
    assert _cycles(graph) == expected
