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
            "drover._hints",
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
            # The kernel's store protocol: what a store must do, no I/O (ADR 0045).
            "drover._kernel.store",
        ],
    ),
    ("database", [r"drover\._db(\..+)?"]),
    ("insert side", [r"drover\._insert(\..+)?"]),
    ("kernel", [r"drover\._kernel(?!\.store$)(\..+)?"]),
    ("configuration", ["drover.periodic", "drover.plugins", "drover.config"]),
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


# The surfaces reach the database through the facade (Client, Inspector) and
# the Store, never a pool (ADR 0048): no import of drover._db.pool (its
# borrow, its dedicated connections), and no `.pool` or `._pool` of a
# Client, an Inspector or a Store. The source is read, not the objects, so any
# attribute of that name counts; an application's own pool, built from
# psycopg_pool, is not drover's and may be named anything else.
_POOL_MODULE = "drover._db.pool"
_POOL_ATTRIBUTES = frozenset({"pool", "_pool"})


def _is_surface(module: str) -> bool:
    return LAYERS[_layer(module)][0] == "surfaces"


def _pool_uses(module: str, path: Path) -> Iterator[str]:
    """``"<module>:<line> ..."`` for each use of a pool in ``path``: the import or the attribute."""
    for target, line in _imports(module, path):
        if target == _POOL_MODULE:
            yield f"{module}:{line} imports {_POOL_MODULE}"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in _POOL_ATTRIBUTES:
            yield f"{module}:{node.lineno} uses .{node.attr}"


def test_no_surface_touches_a_pool() -> None:
    uses = [
        use
        for module, path in MODULES.items()
        if _is_surface(module)
        for use in _pool_uses(module, path)
    ]
    assert not uses, (
        "a surface reaches for a pool; go through the Client, the Inspector or the "
        "Store (Store.operator) instead:\n" + "\n".join(uses)
    )


def test_the_pool_rule_finds_a_planted_use(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from drover._db.pool import borrow\n"
        "from drover._db import pool\n"
        "def f(client, store):\n"
        "    target = client.pool.conninfo\n"
        "    with borrow(store._pool, 'x') as conn:\n"
        "        return target, conn\n"
    )
    assert sorted(_pool_uses("drover.cli.planted", planted)) == [
        "drover.cli.planted:1 imports drover._db.pool",
        "drover.cli.planted:2 imports drover._db.pool",
        "drover.cli.planted:4 uses .pool",
        "drover.cli.planted:5 uses ._pool",
    ]
    clean = tmp_path / "clean.py"
    clean.write_text(
        "import logging\n"
        "from drover._db.store import Store\n"
        "logging.getLogger('psycopg.pool')\n"
        "def f(store: Store):\n    return store.operator.job_counts()\n"
    )
    assert list(_pool_uses("drover.cli.clean", clean)) == []
    assert _is_surface("drover.cli.planted") and _is_surface("drover.web.app")
    assert not _is_surface("drover.client")


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


# drover's own fault suite and soak (faults/) and the developer tools (tools/)
# live in the repository, outside the package and the wheel (ADR 0049).
REPOSITORY_ONLY = ("faults", "tools")


def _absolute_imports(path: Path) -> Iterator[tuple[str, int]]:
    """``(module, line)`` for every absolute import in ``path``, wherever it is written."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module, node.lineno


def test_drover_never_imports_the_repositorys_own_suite_or_tools() -> None:
    # The harness is what a user's handlers can be run under; the suite is
    # drover's own workload on top of it, and it is not installed.
    leaks = [
        f"{module}:{line} imports {name}"
        for module, path in MODULES.items()
        for name, line in _absolute_imports(path)
        if name.split(".")[0] in REPOSITORY_ONLY
    ]
    assert not leaks, leaks


def test_drovers_own_suite_uses_drover_as_any_program_would() -> None:
    # The suite and the soak test the package as it ships: its public modules
    # and the fault harness, never a private module (what a user cannot reach
    # without reaching into drover's insides, the suite does not either).
    root = SRC.parent / "faults"
    found = sorted(root.rglob("*.py"))
    assert found, f"no fault suite in {root}"
    private = [
        f"{path.relative_to(root.parent)}:{line} imports {name}"
        for path in found
        for name, line in _absolute_imports(path)
        if name.split(".")[0] == "drover" and any(p.startswith("_") for p in name.split("."))
    ]
    assert not private, private


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


# --- the kernel (ADR 0045) ----------------------------------------------------------------------

# The kernel: claim, dispatch, completion, lease renewal, rescue and hand-back,
# and PostgreSQL's statements for them. It knows no feature: it imports its own
# modules and these, and nothing else (not limits, results, workflows,
# progress, cancels, the ledger, uniqueness, periodic jobs, retention, the
# configuration, the metrics or the engine that attaches them).
KERNEL = re.compile(r"drover\._kernel(\..+)?|drover\._db\.(kernel|doors)")
KERNEL_MAY_IMPORT = frozenset(
    {
        # the model it runs: rows, states, outcomes, errors, the handler's context
        "drover.errors",
        "drover.job",
        "drover._records",
        "drover.context",
        "drover.retry",
        "drover.log",
        "drover.middleware",
        "drover._durations",
        "drover.queues",
        # the database's plumbing: connections, errors, the SQL loader, the
        # caller's transaction, the insert and the read of a row by id
        "drover._db",
        "drover._db.errors",
        "drover._db.pool",
        "drover._db.caller",
        "drover._db.deadline",
        "drover._db.namespace",
        "drover._db.queries",
        "drover._db.rows",
        "drover._db.insert_one",
        "drover._db.admin",
        # where a claim's reads begin (ADR 0059): no feature, and nothing it
        # decides reaches the fence, so it is outside the audited lines
        "drover._db.floors",
        # where the rescuer's sweeps begin (ADR 0059): the same, for the lease index
        "drover._db.sweeps",
    }
)
# The model's public types (a row names every column, the context every
# handler-side call) are data: the kernel may reach them whatever they import.
# Everything else the kernel reaches, however indirectly, is held to the list.
# What the plumbing itself stands on (connections, names, the SQL loader).
_DB_PLUMBING = frozenset({"drover._db.conninfo", "drover._db.qualify"})
MODEL_LEAVES = frozenset(
    {
        "drover.errors",
        "drover.job",
        "drover._records",
        "drover.context",
        "drover.retry",
        "drover.queues",
    }
)


def test_the_kernel_imports_no_feature() -> None:
    kernel = [m for m in MODULES if KERNEL.fullmatch(m)]
    assert "drover._kernel.engine" in kernel and "drover._db.kernel" in kernel
    found = [
        f"{module}:{line} imports {target}"
        for module in kernel
        for target, line in GRAPH[module].items()
        if not KERNEL.fullmatch(target) and target not in KERNEL_MAY_IMPORT
    ]
    assert not found, "the kernel imports a feature (ADR 0045):\n" + "\n".join(found)


def test_what_the_kernel_reaches_indirectly_is_no_feature_either() -> None:
    # Through the plumbing it may import (a loader, the insert of one job, the
    # read of a row), the kernel must not reach a feature's statements or code.
    reached: dict[str, str] = {}
    stack = [m for m in MODULES if KERNEL.fullmatch(m)]
    while stack:
        module = stack.pop()
        if module in MODEL_LEAVES:
            continue
        for target in GRAPH[module]:
            if target not in reached and not KERNEL.fullmatch(target):
                reached[target] = module
                stack.append(target)
    leaks = [
        f"{target} (through {via})"
        for target, via in sorted(reached.items())
        if target not in KERNEL_MAY_IMPORT | _DB_PLUMBING
    ]
    assert not leaks, "the kernel reaches a feature (ADR 0045):\n" + "\n".join(leaks)


def test_the_kernel_rule_sees_a_feature_import(tmp_path: Path) -> None:
    path = tmp_path / "probe.py"
    path.write_text("from drover.limits import Limit\nfrom drover._kernel.kit import Kit\n")
    targets = {t for t, _ in _imports("drover._kernel.probe", path)}
    assert targets - KERNEL_MAY_IMPORT - {"drover._kernel.kit"} == {"drover.limits"}
