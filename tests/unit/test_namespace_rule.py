"""Every statement in ``_db`` names its installation (ADR 0043, docs/architecture.md).

A ``query("x")`` without the namespace would run the default installation's
SQL for a client configured with a schema: against ``public``'s tables, or
failing where there are none. This reads the source, so a new call site that
forgets it fails here with its file and line, before any database test.
"""

from __future__ import annotations

import ast
from pathlib import Path

DB = Path(__file__).resolve().parents[2] / "src" / "drover" / "_db"

# Statements that touch no drover object: the same text in every installation.
_SCHEMA_FREE = {
    "bench_create_database",
    "bench_drop_database",
    "server_settings",
    "schema_exists",
    "schema_create",
    "schema_search_path",
    "pooler_backend_pid",  # the PgBouncer probe (ADR 0040 on main): SELECT pg_backend_pid()
}


def test_every_query_call_in_the_database_layer_passes_a_namespace() -> None:
    missing: list[str] = []
    for path in sorted(DB.glob("*.py")):
        if path.name == "queries.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "query"
            ):
                continue
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and first.value in _SCHEMA_FREE:
                continue
            if len(node.args) < 2 and not any(k.arg == "ns" for k in node.keywords):
                missing.append(f"{path.name}:{node.lineno}")
    assert not missing, (
        "query(...) without the namespace (write query(name, ns) and take "
        f"ns: Namespace = DEFAULT): {missing}"
    )
