"""The migration policy, checked on the text of sql/migrations (ADR 0038, docs/upgrading.md).

A release's migrations must keep the previous release's code working: it runs
against the migrated schema until its workers are rolled. So a migration may
add (tables, nullable columns, columns with a default, functions, indexes) but
not take away or change what the previous release reads, writes or calls. A
statement that does (a contract step) is allowed only one release after the
last release that used the object, and must say so in a comment in the
statement's own comment block::

    -- contract: leased_by unused since drover 1.4.0
    ALTER TABLE drover_jobs DROP COLUMN leased_by;

This is a static check: ``tests/upgrade`` runs the previous release's workers
against today's migrations for what text cannot show.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

MIGRATIONS = Path(__file__).resolve().parents[2] / "sql" / "migrations"

MARKER = re.compile(r"--\s*contract:.*\bunused since drover \d+\.\d+(?:\.\d+)?\b", re.IGNORECASE)
"""The comment that allows a contract step: what, and the release that stopped using it."""

# A statement that takes away or changes something an older release may use.
CONTRACT = {
    "DROP COLUMN": re.compile(r"\bDROP\s+COLUMN\b"),
    "RENAME": re.compile(r"\bRENAME\b"),
    "DROP FUNCTION": re.compile(r"\bDROP\s+(?:FUNCTION|PROCEDURE)\b"),
    "DROP TABLE": re.compile(r"\bDROP\s+TABLE\b"),
    "DROP TYPE": re.compile(r"\bDROP\s+TYPE\b"),
    "ALTER COLUMN ... TYPE": re.compile(r"\bALTER\s+COLUMN\s+\w+\s+(?:SET\s+DATA\s+)?TYPE\b"),
    "SET NOT NULL": re.compile(r"\bSET\s+NOT\s+NULL\b"),
}

_DOLLAR_BODY = re.compile(r"\$(\w*)\$.*?\$\1\$", re.DOTALL)
_COMMENT = re.compile(r"--[^\n]*")
_ADD_COLUMN = re.compile(r"\bADD\s+COLUMN\b", re.IGNORECASE)


def _code(statement: str) -> str:
    """The statement without its comments, upper-cased, on one line."""
    lines = (line.split("--", 1)[0] for line in statement.splitlines())
    return " ".join(" ".join(lines).split()).upper()


def _statements(text: str) -> list[str]:
    """Each statement with the comment block above it; function bodies blanked out."""
    # A function's body is not DDL: its words (an UPDATE's SET, a RENAME in a
    # string) are none of this check's business.
    text = _DOLLAR_BODY.sub("$$ $$", text)
    # A semicolon in a comment ends no statement.
    text = _COMMENT.sub(lambda m: m.group(0).replace(";", ","), text)
    return [s for s in text.split(";") if _code(s)]


def _clauses_after(code: str, start: int) -> str:
    """``code`` from ``start`` to the first comma outside parentheses (one ALTER TABLE clause)."""
    depth = 0
    for i in range(start, len(code)):
        if code[i] == "(":
            depth += 1
        elif code[i] == ")":
            depth -= 1
        elif code[i] == "," and depth == 0:
            return code[start:i]
    return code[start:]


def violations(text: str) -> list[str]:
    """What in a migration's text breaks the previous release, one line per problem."""
    found: list[str] = []
    created_index = False
    for statement in _statements(text):
        code = _code(statement)
        marked = MARKER.search(statement) is not None
        head = code[:70]
        if "CONCURRENTLY" in code:
            # Each migration runs in one transaction, where PostgreSQL refuses it.
            found.append(f"CONCURRENTLY cannot run inside the migration's transaction: {head}")
        if re.search(r"\bCREATE\s+(?:UNIQUE\s+)?INDEX\b", code):
            created_index = True
        if re.search(r"\bDROP\s+INDEX\b", code) and not created_index and not marked:
            found.append(f"DROP INDEX without a replacement built first in this migration: {head}")
        for what, pattern in CONTRACT.items():
            if pattern.search(code) and not marked:
                found.append(
                    f"{what} without a '-- contract: ... unused since drover X.Y' line: {head}"
                )
        for match in _ADD_COLUMN.finditer(code):
            clause = _clauses_after(code, match.end())
            if re.search(r"\bNOT\s+NULL\b", clause) and "DEFAULT" not in clause and not marked:
                found.append(
                    "ADD COLUMN ... NOT NULL without a DEFAULT (the previous release's inserts "
                    f"do not name it): {clause.strip()[:60]}"
                )
    return found


@pytest.mark.parametrize("path", sorted(MIGRATIONS.glob("*.sql")), ids=lambda p: p.name)
def test_shipped_migrations_keep_the_previous_release_working(path: Path) -> None:
    assert violations(path.read_text()) == []


@pytest.mark.parametrize(
    "sql",
    [
        "ALTER TABLE drover_jobs DROP COLUMN leased_by;",
        "ALTER TABLE drover_jobs\n    DROP COLUMN IF EXISTS leased_by;",
        "ALTER TABLE drover_jobs RENAME COLUMN leased_by TO holder;",
        "ALTER TABLE drover_clients RENAME TO drover_workers;",
        "ALTER FUNCTION drover_claim_limited(text, integer) RENAME TO drover_claim;",
        "DROP FUNCTION drover_claim_limited(text, integer, double precision, text);",
        "DROP TABLE drover_limit_starts;",
        "DROP TYPE drover_job_state;",
        "ALTER TABLE drover_jobs ALTER COLUMN priority TYPE integer;",
        "ALTER TABLE drover_jobs ALTER COLUMN leased_by SET NOT NULL;",
        "ALTER TABLE drover_jobs ADD COLUMN owner text NOT NULL;",
        "ALTER TABLE drover_jobs ADD COLUMN a int, ADD COLUMN b numeric(10, 2) NOT NULL;",
        "DROP INDEX drover_jobs_lease_idx;",
        "CREATE INDEX CONCURRENTLY drover_x_idx ON drover_jobs (kind);",
    ],
)
def test_a_step_that_breaks_the_previous_release_is_refused(sql: str) -> None:
    assert len(violations(sql)) >= 1


@pytest.mark.parametrize(
    "sql",
    [
        "ALTER TABLE drover_jobs ADD COLUMN owner text;",
        "ALTER TABLE drover_jobs ADD COLUMN tags text[] NOT NULL DEFAULT '{}';",
        "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;",
        # Words inside a function's body are not statements of the migration.
        "CREATE FUNCTION f() RETURNS void LANGUAGE plpgsql AS $body$\n"
        "BEGIN UPDATE t SET x = 1; DROP TABLE tmp; END\n$body$;",
        "CREATE INDEX drover_x_v2_idx ON drover_jobs (kind, id);\nDROP INDEX drover_x_idx;",
        # A contract step one release after the last use, with its marker.
        "-- The holder moved to drover_leases (migration 0020).\n"
        "-- contract: leased_by unused since drover 1.4.0\n"
        "ALTER TABLE drover_jobs DROP COLUMN leased_by;",
    ],
)
def test_an_expand_step_passes(sql: str) -> None:
    assert violations(sql) == []


def test_a_marker_covers_its_own_statement_only() -> None:
    sql = (
        "-- contract: a unused since drover 1.4.0\n"
        "ALTER TABLE t DROP COLUMN a;\n"
        "ALTER TABLE t DROP COLUMN b;\n"
    )
    assert len(violations(sql)) == 1


def test_a_marker_must_name_the_release() -> None:
    sql = "-- contract: leased_by is unused now\nALTER TABLE drover_jobs DROP COLUMN leased_by;"
    assert len(violations(sql)) == 1
