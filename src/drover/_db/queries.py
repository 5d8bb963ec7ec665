"""Loads the SQL shipped with drover: named runtime queries and numbered migrations.

The canonical files live in the repository's top-level ``sql/`` directory. A
wheel carries them as ``drover/sql``; an editable install or a bare checkout
reads them straight from ``sql/``. This module is the one place text from those
files becomes a query, so it is the one place the ``LiteralString`` cast lives.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import LiteralString

from drover._db.namespace import DEFAULT, Namespace
from drover._db.qualify import qualify
from drover._db.rows import JOB_COLUMNS
from drover._records import Migration
from drover.errors import MigrationError
from drover.job import STATE_SETS

__all__ = [
    "drover_objects",
    "expand_job_columns",
    "expand_state_sets",
    "load_migrations",
    "parse_migration_name",
    "parse_queries",
    "query",
    "render_migration",
    "sql_root",
]

_NAME_LINE = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$")
_STATE_SET = re.compile(r"\{\{states:([a-z_]+)\}\}")
_JOB_COLUMNS = re.compile(r"\{\{job_columns(?::([a-z_]+))?\}\}")
_JOB_REFUSED = re.compile(r"\{\{job_refused:([a-z_]+)\}\}")
_MIGRATION_FILE = re.compile(r"^(\d+)_([A-Za-z0-9_]+)\.sql$")
# What drover's own SQL creates, by kind. A TEMP table is not matched ("CREATE
# TEMP TABLE"): it lives in pg_temp and must stay unqualified.
_CREATES = re.compile(
    r"\bCREATE\s+(?:OR\s+REPLACE\s+)?(TABLE|SEQUENCE|VIEW|TYPE|FUNCTION|PROCEDURE)\s+"
    r"(?:IF\s+NOT\s+EXISTS\s+)?(drover_[a-z0-9_]+)",
    re.IGNORECASE,
)
_IDENTITY = re.compile(r"^\s*([a-z_][a-z0-9_]*)\s+\w+\s+GENERATED\s+\w+(?:\s+\w+)?\s+AS\s+IDENTITY")


def sql_root() -> Traversable:
    """The directory holding ``migrations/`` and ``queries/``."""
    packaged = files("drover") / "sql"
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parents[3] / "sql"
    if checkout.is_dir():
        return checkout
    raise RuntimeError(
        "drover's SQL files are missing from this installation "
        "(expected drover/sql in the wheel, or sql/ in a checkout)"
    )


def _strip_comments(block: str) -> LiteralString:
    # Full-line comments stay in the files for readers but are not sent: they
    # would cost bytes per call and psycopg would parse any % inside them.
    lines = [ln for ln in block.splitlines() if not ln.lstrip().startswith("--")]
    text: LiteralString = "\n".join(lines).strip().rstrip(";").strip()
    return text


def expand_state_sets(sql: LiteralString, source: str) -> LiteralString:
    """Replace each ``{{states:<name>}}`` with that set's quoted states, comma-separated.

    The sets are ``drover.job.STATE_SETS``, so a predicate such as
    ``state IN ({{states:waiting}})`` always lists the states Python means.
    """

    def quoted(match: re.Match[str]) -> str:
        states = STATE_SETS.get(match.group(1))
        if states is None:
            known = ", ".join(sorted(STATE_SETS))
            raise RuntimeError(f"{source}: unknown state set {match.group(0)!r}; known: {known}")
        return ", ".join(f"'{state.value}'" for state in states)

    # The replacement text is drover's own enum values, never input.
    expanded: LiteralString = _STATE_SET.sub(quoted, sql)
    return expanded


def expand_job_columns(sql: LiteralString) -> LiteralString:
    """Replace each ``{{job_columns}}`` (or ``{{job_columns:j}}``, qualified by ``j``)
    with ``drover._db.rows.JOB_COLUMNS``: what every query returning jobs returns;
    ``{{job_nulls}}`` with one NULL per column; and ``{{job_refused:d}}`` with
    NULLs but for ``d.id`` and ``d.attempt`` in their places."""

    def columns(match: re.Match[str]) -> str:
        prefix = f"{match.group(1)}." if match.group(1) else ""
        return ", ".join(prefix + column for column in JOB_COLUMNS)

    # The replacement text is drover's own column list, never input.
    expanded: LiteralString = _JOB_COLUMNS.sub(columns, sql)
    # A row of as many NULLs: job_claim's "take the limited claim" marker.
    nulls: LiteralString = ", ".join(["NULL"] * len(JOB_COLUMNS))
    expanded = expanded.replace("{{job_nulls}}", nulls)
    # job_claim's refused completion: NULLs but for the claim's id and attempt.
    return _JOB_REFUSED.sub(_refused_columns, expanded)


def _refused_columns(match: re.Match[str]) -> str:
    source = match.group(1)
    return ", ".join(
        f"{source}.{column}" if column in ("id", "attempt") else "NULL"
        for column in (c.partition("::")[0] for c in JOB_COLUMNS)
    )


def _expand(sql: LiteralString, source: str) -> LiteralString:
    return expand_job_columns(expand_state_sets(sql, source))


def parse_queries(text: str, source: str) -> dict[str, LiteralString]:
    """Split a queries file into ``{name: sql}`` on ``-- name: x`` lines."""
    named: dict[str, LiteralString] = {}
    current: str | None = None
    body: list[str] = []
    for line in text.splitlines():
        match = _NAME_LINE.match(line.strip())
        if match:
            if current is not None:
                named[current] = _expand(_strip_comments("\n".join(body)), source)
            current = match.group(1)
            if current in named:
                raise RuntimeError(f"{source}: query {current!r} is defined twice")
            body = []
        elif current is not None:
            body.append(line)
    if current is not None:
        named[current] = _expand(_strip_comments("\n".join(body)), source)
    return named


@functools.cache
def _all_queries() -> Mapping[str, LiteralString]:
    merged: dict[str, LiteralString] = {}
    for entry in sorted((sql_root() / "queries").iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        for name, sql in parse_queries(entry.read_text(encoding="utf-8"), entry.name).items():
            if name in merged:
                raise RuntimeError(f"query {name!r} is defined in more than one file")
            merged[name] = sql
    return merged


def query(name: str, ns: Namespace = DEFAULT) -> LiteralString:
    """The SQL text of the named runtime query, for the installation ``ns``.

    ``DEFAULT`` gets the text as written (unqualified, as drover always ran
    it); any other schema gets it rewritten by ``drover._db.qualify`` once and
    cached per (schema, name). Every call site in ``_db`` passes the
    namespace it was given: ``query("x", ns)``.
    """
    try:
        # Every value comes from drover's own files, never from input; mypy
        # treats LiteralString as str, so no cast is needed to say so.
        text = _all_queries()[name]
    except KeyError:
        raise RuntimeError(f"drover has no query named {name!r}") from None
    if ns.schema is None:
        return text
    return _rendered(ns, name)


@functools.cache
def _rendered(ns: Namespace, name: str) -> LiteralString:
    relations, routines = drover_objects()
    assert ns.schema is not None
    # The schema is checked (lowercase letters, digits, _) and quoted; the rest
    # of the text is drover's own, so the result is as literal as the file.
    text: LiteralString = qualify(_all_queries()[name], ns.schema, ns.channel, relations, routines)
    return text


def render_migration(sql: str, ns: Namespace = DEFAULT) -> str:
    """A migration's text for ``ns``: as written by default; in a schema of its own,
    with its notification channels (objects need no qualifying: migrations run
    with ``search_path`` set to the schema, and their functions are pinned to it)."""
    if ns.schema is None:
        return sql
    return qualify(sql, ns.schema, ns.channel)


@functools.cache
def drover_objects() -> tuple[frozenset[str], frozenset[str]]:
    """The names of drover's relations (tables, sequences, views) and of its other
    objects (types, functions), as its migrations and queries create them.

    Identity columns add their implicit sequences (``<table>_<column>_seq``).
    ``tests/db/test_schemas.py`` checks the result against the catalog of a
    migrated schema, so a migration that creates something this misses fails
    there.
    """
    texts = [m.sql for m in load_migrations()]
    texts += [
        entry.read_text(encoding="utf-8")
        for entry in (sql_root() / "queries").iterdir()
        if entry.name.endswith(".sql")
    ]
    relations: set[str] = set()
    routines: set[str] = set()
    for text in texts:
        table: str | None = None
        for line in text.splitlines():
            if line.lstrip().startswith("--"):
                continue
            for match in _CREATES.finditer(line):
                kind, name = match.group(1).upper(), match.group(2)
                if kind in ("TABLE", "SEQUENCE", "VIEW"):
                    relations.add(name)
                else:
                    routines.add(name)
                table = name if kind == "TABLE" else None
            column = _IDENTITY.match(line)
            if column and table is not None:
                relations.add(f"{table}_{column.group(1)}_seq")
    return frozenset(relations), frozenset(routines)


def parse_migration_name(filename: str) -> tuple[int, str]:
    """``0001_create_jobs.sql`` → ``(1, "create_jobs")``; anything else is an error."""
    match = _MIGRATION_FILE.match(filename)
    if not match:
        raise MigrationError(
            f"migration file name {filename!r} must look like 0001_description.sql"
        )
    return int(match.group(1)), match.group(2)


def load_migrations(directory: Traversable | None = None) -> tuple[Migration, ...]:
    """Every migration, sorted by version; duplicate versions are an error."""
    folder = directory if directory is not None else sql_root() / "migrations"
    found: dict[int, Migration] = {}
    for entry in folder.iterdir():
        if not entry.name.endswith(".sql"):
            continue
        version, name = parse_migration_name(entry.name)
        if version < 1:
            raise MigrationError(f"migration {entry.name!r}: versions start at 1")
        if version in found:
            raise MigrationError(
                f"migrations {found[version].label!r} and {entry.name!r} share version {version}"
            )
        found[version] = Migration(version, name, entry.read_text(encoding="utf-8"))
    return tuple(found[v] for v in sorted(found))
