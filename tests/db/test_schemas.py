"""drover in a schema of its own: migrations, names, the caller's connection (ADR 0043)."""

from __future__ import annotations

import asyncio
from contextlib import closing
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from werkzeug.test import Client as WsgiClient

import drover
from drover._db.namespace import DEFAULT, namespace_for
from drover._db.queries import _all_queries, drover_objects, load_migrations, query
from drover.migrations import migration_status
from drover.testing import Jobs
from drover.web import make_app

Conn = psycopg.Connection[tuple[Any, ...]]


class Note(drover.JobArgs, kind="schemas_note"):
    text: str


def _tables(conn: Conn, schema: str) -> set[str]:
    rows = conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind = 'r'",
        (schema,),
    ).fetchall()
    return {str(r[0]) for r in rows}


def test_each_schema_is_migrated_and_versioned_on_its_own(empty_db_url: str) -> None:
    applied = drover.migrate(empty_db_url, schema="tenant_a")
    assert [m.version for m in applied] == [m.version for m in load_migrations()]
    assert migration_status(empty_db_url, schema="tenant_a").up_to_date
    # The other schema and public are untouched: nothing applied, nothing created.
    assert migration_status(empty_db_url, schema="tenant_b").applied == ()
    assert migration_status(empty_db_url).applied == ()
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        assert "drover_jobs" in _tables(conn, "tenant_a")
        assert _tables(conn, "public") == set()
        assert conn.execute("SELECT to_regnamespace('tenant_b')").fetchone() == (None,)
        before = conn.execute(
            "SELECT version, applied_at FROM tenant_a.drover_schema_version ORDER BY version"
        ).fetchall()
    # Migrating the second schema applies everything there and nothing in the first.
    second = drover.migrate(empty_db_url, schema="tenant_b")
    assert [m.version for m in second] == [m.version for m in applied]
    assert drover.migrate(empty_db_url, schema="tenant_a") == []
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        after = conn.execute(
            "SELECT version, applied_at FROM tenant_a.drover_schema_version ORDER BY version"
        ).fetchall()
        assert after == before


def test_an_existing_empty_schema_is_used_as_it_is(empty_db_url: str) -> None:
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA jobs_here")
    assert drover.migrate(empty_db_url, schema="jobs_here")
    assert migration_status(empty_db_url, schema="jobs_here").up_to_date


def test_public_named_explicitly_is_the_default_installation(db_url: str) -> None:
    assert namespace_for("public") is DEFAULT
    assert drover.migrate(db_url, schema="public") == []
    with closing(drover.Client(db_url, drover.Config(schema="public"))) as client:
        row = client.insert(Note(text="x"))
    with drover.Inspector(db_url) as inspector:
        assert inspector.get_job(row.id).id == row.id


@pytest.mark.parametrize(
    ("schema", "needle"),
    [
        ("Tenant", "lowercase"),
        ("pg_jobs", "pg_"),
        ("a-b", "lowercase"),
        ("1abc", "digit"),
        ("x" * 64, "63"),
        ("", "lowercase"),
        ('a"; DROP TABLE x; --', "lowercase"),
        (7, "lowercase"),
    ],
)
def test_a_bad_schema_name_is_refused_naming_it_and_changes_nothing(
    empty_db_url: str, schema: Any, needle: str
) -> None:
    with pytest.raises(drover.InvalidArgument, match=needle) as raised:
        drover.migrate(empty_db_url, schema=schema)
    assert "schema" in str(raised.value)
    with pytest.raises(drover.ConfigError, match="Config.schema"):
        drover.Config(schema=schema)
    with pytest.raises(drover.InvalidArgument, match="Inspector schema"):
        drover.Inspector(empty_db_url, schema=schema)
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        created = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%' "
            "AND nspname NOT IN ('public', 'information_schema')"
        ).fetchone()
        assert created == (0,)


def test_a_client_of_an_unmigrated_schema_names_the_schema(empty_db_url: str) -> None:
    drover.migrate(empty_db_url, schema="ready")
    workers = drover.Workers()

    @workers.register
    def note(job: drover.Job[Note]) -> None:
        pass

    client = drover.Client(empty_db_url, drover.Config(schema="missing", workers=workers))
    try:
        with pytest.raises(drover.SchemaMissing, match="schema missing"):
            client.start()
    finally:
        client.close()


def test_drover_objects_are_exactly_what_a_migrated_schema_holds(empty_db_url: str) -> None:
    """The qualifying rule's list of names, against the catalog: a migration that
    creates an object the rule does not know fails here."""
    drover.migrate(empty_db_url, schema="catalog")
    relations, routines = drover_objects()
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        rels = conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'catalog' AND c.relkind IN ('r', 'S', 'v', 'm', 'p')"
        ).fetchall()
        types = conn.execute(
            "SELECT t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace "
            "WHERE n.nspname = 'catalog' AND t.typtype IN ('e', 'd', 'r')"
            "   OR (n.nspname = 'catalog' AND t.typtype = 'c' AND t.typrelid IN ("
            "       SELECT oid FROM pg_class WHERE relkind = 'c'))"
        ).fetchall()
        functions = conn.execute(
            "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = 'catalog'"
        ).fetchall()
    assert {str(r[0]) for r in rels} == relations
    assert {str(r[0]) for r in types} | {str(r[0]) for r in functions} == routines


def test_functions_are_pinned_to_their_schema_and_immutable_ones_stay_inlinable(
    empty_db_url: str,
) -> None:
    drover.migrate(empty_db_url, schema="pinned")
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT p.proname, p.provolatile, p.proconfig FROM pg_proc p "
            "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'pinned'"
        ).fetchall()
    assert rows
    for name, volatility, config in rows:
        if volatility == "i":
            assert config is None, name
        else:
            assert "search_path=pinned" in (config or []), name


def test_the_default_schema_runs_the_files_text_unchanged() -> None:
    """No schema: every query is exactly the file's text (same plans, same cost)."""
    for name, text in _all_queries().items():
        assert query(name) is text
        assert query(name, DEFAULT) is text


def test_inserts_in_the_callers_transaction_ignore_the_callers_search_path(
    empty_db_url: str,
) -> None:
    """insert_tx, unique inserts (a plpgsql function) and complete_tx run on the caller's
    connection, whose search_path is the caller's: the qualified text and the pinned
    functions put everything in the client's schema anyway."""
    drover.migrate(empty_db_url, schema="mine")
    drover.migrate(empty_db_url, schema="theirs")
    with closing(drover.Client(empty_db_url, drover.Config(schema="mine"))) as client:
        with psycopg.connect(empty_db_url) as caller:
            caller.execute("SET search_path = theirs")
            plain = client.insert_tx(caller, Note(text="plain"))
            unique = client.insert_tx(
                caller, Note(text="u"), drover.InsertOpts(unique=drover.Unique(by_args=True))
            )
            again = client.insert_tx(
                caller, Note(text="u"), drover.InsertOpts(unique=drover.Unique(by_args=True))
            )
            # Debounce goes through drover_insert_unique, a plpgsql function.
            debounced = client.insert_tx(
                caller,
                Note(text="d"),
                drover.InsertOpts(
                    debounce=timedelta(seconds=30), unique=drover.Unique(by_args=True)
                ),
            )
            many = client.insert_many_tx(caller, [Note(text="m1"), Note(text="m2")])
            caller.commit()
        assert again.duplicate and again.id == unique.id
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        mine = conn.execute("SELECT id FROM mine.drover_jobs ORDER BY id").fetchall()
        theirs = conn.execute("SELECT count(*) FROM theirs.drover_jobs").fetchone()
    assert [r[0] for r in mine] == sorted(
        [plain.id, unique.id, debounced.id] + [r.id for r in many]
    )
    assert theirs == (0,)


def test_a_long_schema_name_gets_channels_postgresql_accepts(empty_db_url: str) -> None:
    schema = "s" * 63
    ns = namespace_for(schema)
    channels = {ns.channel(base) for base in ("drover", "drover_cancel", "drover_done")}
    assert len(channels) == 3 and all(len(c.encode()) <= 63 for c in channels)
    drover.migrate(empty_db_url, schema=schema)
    with closing(drover.Client(empty_db_url, drover.Config(schema=schema))) as client:
        row = client.insert(Note(text="long"))
        assert client.get_job(row.id).id == row.id


def test_the_async_client_inserts_and_notifies_in_its_schema(empty_db_url: str) -> None:
    drover.migrate(empty_db_url, schema="aio")
    ns = namespace_for("aio")

    async def main(listener: Conn) -> list[int]:
        async with drover.AsyncClient(empty_db_url, drover.Config(schema="aio")) as client:
            one = await client.insert(Note(text="one"))
            many = await client.insert_many([Note(text="m1"), Note(text="m2")])
            async with await psycopg.AsyncConnection.connect(empty_db_url) as caller:
                tx = await client.insert_tx(caller, Note(text="tx"))
                await caller.commit()
        return [one.id, *(r.id for r in many), tx.id]

    with psycopg.connect(empty_db_url, autocommit=True) as listener:
        listener.execute(
            psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(ns.channel("drover")))
        )
        ids = asyncio.run(main(listener))
        note = next(listener.notifies(timeout=10, stop_after=1))
        assert note.channel == ns.channel("drover") and note.payload == "default"
        mine = listener.execute("SELECT id FROM aio.drover_jobs ORDER BY id").fetchall()
    assert [r[0] for r in mine] == ids


def test_the_doctor_reads_its_own_schemas_tables(empty_db_url: str) -> None:
    drover.migrate(empty_db_url, schema="doc_a")
    drover.migrate(empty_db_url, schema="doc_b")
    relations, _ = drover_objects()
    tables = {r for r in relations if not r.endswith("_seq")}
    with drover.Inspector(empty_db_url, schema="doc_a") as inspector:
        facts = inspector._store.operator.health_facts(drover.HealthThresholds())
        report = inspector.health()
    # Each table once: doc_b's tables of the same names are not counted.
    assert sorted(t.table for t in facts.tables) == sorted(tables)
    assert report.healthy, [f.line() for f in report.findings]


def test_the_test_helpers_see_and_drain_only_their_schemas_jobs(empty_db_url: str) -> None:
    drover.migrate(empty_db_url, schema="t_a")
    drover.migrate(empty_db_url, schema="t_b")
    seen: list[str] = []
    workers = drover.Workers()

    @workers.register
    def note(job: drover.Job[Note]) -> None:
        seen.append(job.args.text)

    a = drover.Client(empty_db_url, drover.Config(schema="t_a", workers=workers))
    b = drover.Client(empty_db_url, drover.Config(schema="t_b", workers=workers))
    try:
        jobs_a = Jobs(a)
        b.insert(Note(text="b"))
        a.insert(Note(text="a"))
        jobs_a.assert_enqueued(kind="schemas_note", count=1)
        worked = jobs_a.drain()
        assert [w.job.args["text"] for w in worked] == ["a"] and seen == ["a"]
        assert [r.args["text"] for r in Jobs(b, after=0).enqueued(kind="schemas_note")] == ["b"]
    finally:
        a.close()
        b.close()


def test_the_status_page_shows_its_schemas_installation(empty_db_url: str) -> None:
    drover.migrate(empty_db_url, schema="web_a")
    drover.migrate(empty_db_url, schema="web_b")
    with closing(drover.Client(empty_db_url, drover.Config(schema="web_a"))) as client:
        row = client.insert(Note(text="shown"), drover.InsertOpts(queue="only_in_a"))
    pages = {}
    for schema in ("web_a", "web_b"):
        with drover.Inspector(empty_db_url, schema=schema) as inspector:
            page = WsgiClient(make_app(inspector, read_only=True))
            for path in ("/", "/jobs?state=all", f"/jobs/{row.id}", "/limits", "/health"):
                response = page.get(path, headers={"Host": "status.example"})
                pages[(schema, path)] = (response.status_code, response.text)
    assert pages[("web_a", "/")][0] == 200 and "only_in_a" in pages[("web_a", "/")][1]
    assert "only_in_a" not in pages[("web_b", "/")][1]
    assert pages[("web_a", f"/jobs/{row.id}")][0] == 200
    assert pages[("web_b", f"/jobs/{row.id}")][0] == 404
    assert all(code == 200 for (s, p), (code, _) in pages.items() if not p.startswith("/jobs/"))
