"""``sql/schema.sql`` is exactly what the migrations build (ADR 0049).

The file is generated (``python -m tools.schema_dump --write``); these tests
fail, with a diff and that command, when a migration changes the schema and
the file was not regenerated. Two comparisons: the catalog of a migrated
database against the catalog of a database built from the file (any
server), and the file against a fresh dump (when the server's major version
is ``pg_dump``'s, as with the embedded server).
"""

from __future__ import annotations

import difflib
import re
import subprocess
from typing import Any

import psycopg
import pytest
from psycopg import sql

import drover
from drover._db.namespace import namespace_for
from drover._db.queries import load_migrations
from tools.schema_dump import COMMAND, SCHEMA_FILE, dump, pg_dump_path, stale_diff

Conn = psycopg.Connection[tuple[Any, ...]]

# Every kind of object a migration can leave behind, one query per kind. Each
# row is (key, text): the key names the object, the text is what PostgreSQL
# says it is. {ns} is the schema's OID (filled in: no parameters, so the
# queries keep format()'s % as they are).
_CATALOG: dict[str, str] = {
    "relation": """
        SELECT c.relname, format('kind %s persistence %s options %s row_security %s',
               c.relkind, c.relpersistence, coalesce(c.reloptions::text, '{}'), c.relrowsecurity)
        FROM pg_class c WHERE c.relnamespace = {ns}""",
    "column": """
        SELECT format('%s.%s', c.relname, a.attname),
               format('#%s %s%s%s%s%s%s', row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum),
                      format_type(a.atttypid, a.atttypmod),
                      CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END,
                      ' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid),
                      ' IDENTITY ' || NULLIF(a.attidentity::text, ''),
                      ' GENERATED ' || NULLIF(a.attgenerated::text, ''),
                      ' COLLATE ' || co.collname)
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        LEFT JOIN pg_collation co ON co.oid = a.attcollation AND co.collname <> 'default'
        WHERE c.relnamespace = {ns} AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'c')
          AND a.attnum > 0 AND NOT a.attisdropped""",
    "constraint": """
        SELECT format('%s.%s', coalesce(c.relname, t.typname), con.conname),
               format('%s %s', con.contype, pg_get_constraintdef(con.oid))
        FROM pg_constraint con
        LEFT JOIN pg_class c ON c.oid = con.conrelid
        LEFT JOIN pg_type t ON t.oid = con.contypid
        WHERE con.connamespace = {ns}""",
    "index": """
        SELECT c.relname, pg_get_indexdef(i.indexrelid)
        FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        WHERE c.relnamespace = {ns}""",
    "sequence": """
        SELECT c.relname,
               format('%s start %s increment %s min %s max %s cache %s cycle %s owned by %s',
                      format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement, s.seqmin,
                      s.seqmax, s.seqcache, s.seqcycle,
                      (SELECT format('%s.%s %s', o.relname, a.attname, d.deptype)
                       FROM pg_depend d JOIN pg_class o ON o.oid = d.refobjid
                       JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
                       WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                         AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')))
        FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
        WHERE c.relnamespace = {ns}""",
    "type": """
        SELECT t.typname,
               format('type %s%s%s', t.typtype,
                      ' (' || (SELECT string_agg(quote_literal(e.enumlabel), ', '
                                                 ORDER BY e.enumsortorder)
                               FROM pg_enum e WHERE e.enumtypid = t.oid) || ')',
                      ' over ' || format_type(NULLIF(t.typbasetype, 0), t.typtypmod)
                          || CASE WHEN t.typnotnull THEN ' NOT NULL' ELSE '' END
                          || coalesce(' DEFAULT ' || t.typdefault, ''))
        FROM pg_type t LEFT JOIN pg_class c ON c.oid = t.typrelid
        WHERE t.typnamespace = {ns}
          AND (t.typrelid = 0 OR c.relkind = 'c')
          AND NOT (t.typcategory = 'A' AND t.typelem <> 0)""",
    "function": """
        SELECT p.oid::regprocedure::text,
               CASE WHEN p.prokind IN ('f', 'p', 'w') THEN pg_get_functiondef(p.oid)
                    ELSE format('aggregate returning %s', format_type(p.prorettype, NULL)) END
        FROM pg_proc p WHERE p.pronamespace = {ns}""",
    "trigger": """
        SELECT format('%s.%s', c.relname, tg.tgname), pg_get_triggerdef(tg.oid)
        FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid
        WHERE c.relnamespace = {ns} AND NOT tg.tgisinternal""",
    "policy": """
        SELECT format('%s.%s', tablename, policyname),
               format('%s %s %s using %s check %s', permissive, roles, cmd, qual, with_check)
        FROM pg_policies WHERE schemaname = (SELECT nspname FROM pg_namespace WHERE oid = {ns})""",
    "comment": """
        SELECT pg_describe_object(d.classoid, d.objoid, d.objsubid), d.description
        FROM pg_description d,
             LATERAL pg_identify_object(d.classoid, d.objoid, d.objsubid) AS o
        WHERE o.schema = (SELECT nspname FROM pg_namespace WHERE oid = {ns})""",
}


def catalog(conn: Conn, schema: str = "public") -> list[str]:
    """What ``schema`` holds, one object after another in a fixed order, as text lines.

    Names in ``schema`` are printed unqualified (its search_path is set to it
    for the reading), so two schemas built by the same SQL read the same.
    """
    conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
    row = conn.execute("SELECT oid FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
    assert row is not None, f"no schema {schema}"
    qualified = re.compile(rf'(?<![\w."]){re.escape(schema)}\.|"{re.escape(schema)}"\.')
    entries: list[tuple[str, str, str]] = []
    for kind, text in _CATALOG.items():
        query = text.replace("{ns}", str(int(row[0])))
        for key, description in conn.execute(query.encode()).fetchall():
            entries.append((kind, qualified.sub("", str(key)), qualified.sub("", str(description))))
    conn.execute("RESET search_path")
    lines: list[str] = []
    for kind, key, description in sorted(entries):
        lines += f"{kind} {key}: {description.strip()}".splitlines()
    return lines


def _differences(expected: list[str], actual: list[str], to: str) -> str:
    diff = difflib.unified_diff(expected, actual, "sql/schema.sql", to, lineterm="")
    return "\n".join(diff)


def _build_from_file(url: str, extra: str = "") -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute((SCHEMA_FILE.read_text(encoding="utf-8") + extra).encode())


def _assert_same_catalog(migrated_url: str, file_url: str) -> None:
    with psycopg.connect(migrated_url, autocommit=True) as a, psycopg.connect(file_url) as b:
        migrated, from_file = catalog(a), catalog(b)
    if migrated != from_file:
        pytest.fail(
            f"sql/schema.sql is stale: the migrations build another schema. Regenerate it "
            f"with `{COMMAND}`.\nCatalog of a database built from sql/schema.sql (-) and of a "
            "migrated one (+):\n" + _differences(from_file, migrated, "the migrations"),
            pytrace=False,
        )


def test_the_file_builds_the_schema_the_migrations_build(db_url: str, empty_db_url: str) -> None:
    _build_from_file(empty_db_url)
    _assert_same_catalog(db_url, empty_db_url)


def test_a_schema_change_the_file_lacks_fails_with_a_readable_diff(
    db_url: str, empty_db_url: str
) -> None:
    # As a new migration would: the migrated side has one column and one index more.
    change = (
        "ALTER TABLE drover_jobs ADD COLUMN probe integer NOT NULL DEFAULT 7;"
        "CREATE INDEX drover_jobs_probe_idx ON drover_jobs (probe) WHERE probe > 0;"
    )
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(change)
    _build_from_file(empty_db_url)
    with pytest.raises(pytest.fail.Exception) as failed:
        _assert_same_catalog(db_url, empty_db_url)
    message = str(failed.value)
    assert COMMAND in message
    added = {line for line in message.splitlines() if line.startswith("+") and "probe" in line}
    # (PostgreSQL 18 adds the NOT NULL constraint's own line.)
    assert {
        "+column drover_jobs.probe: #31 integer NOT NULL DEFAULT 7",
        "+index drover_jobs_probe_idx: CREATE INDEX drover_jobs_probe_idx ON drover_jobs "
        "USING btree (probe) WHERE (probe > 0)",
        "+relation drover_jobs_probe_idx: kind i persistence p options {} row_security f",
    } <= added, message
    removed = [
        ln for ln in message.splitlines() if ln.startswith("-") and ln != "--- sql/schema.sql"
    ]
    assert not removed, message


def test_the_header_names_the_last_migration() -> None:
    # Also true of a migration that changes no object (data only): the file
    # must still be regenerated, so that it says which migration it reflects.
    text = SCHEMA_FILE.read_text(encoding="utf-8")
    last = load_migrations()[-1].label
    assert f"-- through migration {last},\n" in text, f"regenerate it with `{COMMAND}`"
    assert COMMAND in text


def _pg_dump_major() -> int | None:
    try:
        out = subprocess.run(
            [str(pg_dump_path()), "--version"], capture_output=True, text=True, check=True
        ).stdout
    except (SystemExit, OSError, subprocess.CalledProcessError):
        return None
    found = re.search(r"(\d+)(?:\.\d+)*", out)
    return int(found.group(1)) if found else None


def test_the_file_is_what_the_command_writes(db_url: str, conn: Conn) -> None:
    row = conn.execute("SELECT current_setting('server_version_num')::int / 10000").fetchone()
    server, tool = (row[0] if row else None), _pg_dump_major()
    if tool is None or tool != server:
        pytest.skip(f"pg_dump {tool} cannot dump the PostgreSQL {server} server byte for byte")
    problem = stale_diff(SCHEMA_FILE.read_text(encoding="utf-8"), dump(db_url))
    if problem:
        pytest.fail(problem, pytrace=False)


def test_a_schema_of_its_own_differs_only_by_pinned_functions_and_channels(
    db_url: str, empty_db_url: str
) -> None:
    """What the file's header says of Config.schema (ADR 0043) holds."""
    ns = namespace_for("tenant")
    drover.migrate(empty_db_url, schema="tenant")
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        tenant = catalog(conn, "tenant")
        pinned = conn.execute(
            "SELECT p.proname, p.provolatile, p.proconfig FROM pg_proc p "
            "WHERE p.pronamespace = 'tenant'::regnamespace ORDER BY 1"
        ).fetchall()
    with psycopg.connect(db_url, autocommit=True) as conn:
        public = catalog(conn)
    assert pinned, "no function in the schema"
    for name, volatility, config in pinned:
        # IMMUTABLE functions read no table and stay inlinable: never pinned.
        assert ("search_path=tenant" in (config or [])) == (volatility != "i"), name
    channels = {
        f"'{ns.channel(base)}'": f"'{base}'" for base in ("drover", "drover_cancel", "drover_done")
    }
    unpinned = []
    for line in tenant:
        if line.strip() == "SET search_path TO 'tenant'":
            continue
        for theirs, ours in channels.items():
            line = line.replace(theirs, ours)
        unpinned.append(line)
    assert unpinned != tenant, "nothing was pinned or renamed"
    assert public == unpinned, _differences(public, unpinned, "schema tenant")
