"""The migrated schema, the migrator's bookkeeping and its concurrency safety."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import cast

import psycopg
import pytest

import drover
from drover import Migration
from drover._db import migrator
from drover._db.queries import load_migrations, parse_migration_name

EXPECTED_COLUMNS = {
    # name: (type, nullable, default)
    "id": ("bigint", "NO", None),
    "kind": ("text", "NO", None),
    "queue": ("text", "NO", "'default'::text"),
    "args": ("jsonb", "NO", "'{}'::jsonb"),
    "state": ("drover_job_state", "NO", "'available'::drover_job_state"),
    "attempt": ("integer", "NO", "0"),
    "max_attempts": ("integer", "NO", "25"),
    "errors": ("jsonb", "NO", "'[]'::jsonb"),
    "scheduled_at": ("timestamp with time zone", "NO", "now()"),
    "leased_until": ("timestamp with time zone", "YES", None),
    "created_at": ("timestamp with time zone", "NO", "now()"),
    "finalized_at": ("timestamp with time zone", "YES", None),
    "unique_key": ("text", "YES", None),
    "leased_by": ("text", "YES", None),
    "attempted_at": ("timestamp with time zone", "YES", None),
    "priority": ("smallint", "NO", "0"),
    "result": ("jsonb", "YES", None),
    "awaited": ("boolean", "NO", "false"),
    "pending_deps": ("integer", "NO", "0"),
    "has_dependents": ("boolean", "NO", "false"),
    "workflow_id": ("bigint", "YES", None),
    "progress": ("real", "YES", None),
    "progress_message": ("text", "YES", None),
    "meta": ("jsonb", "NO", "'{}'::jsonb"),
    "tags": ("ARRAY", "NO", "'{}'::text[]"),
    "cancel_request": ("jsonb", "YES", None),
    "unique_hash": ("bytea", "YES", None),
    "unique_bucket": ("bigint", "NO", "0"),
    "unique_states": ("smallint", "NO", "0"),
    "ledger": ("jsonb", "YES", None),
}


def _columns(conn: psycopg.Connection[tuple[object, ...]]) -> dict[str, tuple[object, ...]]:
    rows = conn.execute(
        """SELECT column_name,
                  CASE WHEN data_type = 'USER-DEFINED' THEN udt_name ELSE data_type END,
                  is_nullable, column_default, is_identity, identity_generation
           FROM information_schema.columns WHERE table_name = 'drover_jobs'"""
    ).fetchall()
    return {str(r[0]): tuple(r[1:]) for r in rows}


def _indexes(conn: psycopg.Connection[tuple[object, ...]]) -> dict[str, str]:
    rows = conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'drover_jobs'"
    ).fetchall()
    return {str(name): str(definition) for name, definition in rows}


def test_columns_types_nullability_and_defaults(
    conn: psycopg.Connection[tuple[object, ...]],
) -> None:
    columns = _columns(conn)
    assert set(columns) == set(EXPECTED_COLUMNS)
    for name, (type_, nullable, default) in EXPECTED_COLUMNS.items():
        assert columns[name][:3] == (type_, nullable, default), name
    assert columns["id"][3:] == ("YES", "ALWAYS")


def test_state_enum_labels_in_order(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    labels = conn.execute("SELECT unnest(enum_range(NULL::drover_job_state))::text").fetchall()
    assert [r[0] for r in labels] == [s.value for s in drover.JobState]
    assert [s.value for s in drover.JobState] == [
        "pending", "available", "scheduled", "running", "retryable", "completed", "cancelled",
        "dead",
    ]  # fmt: skip


def test_index_definitions(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    idx = _indexes(conn)
    assert set(idx) == {
        "drover_jobs_pkey",
        "drover_jobs_fetch_v3_idx",
        "drover_jobs_lease_idx",
        "drover_jobs_dead_idx",
        "drover_jobs_unique_active_v2_idx",
        "drover_jobs_finalized_idx",
        "drover_jobs_workflow_idx",
        "drover_jobs_tags_idx",
        "drover_jobs_unique_identity_idx",
    }
    assert "USING gin (tags) WHERE (tags <> '{}'::text[])" in idx["drover_jobs_tags_idx"]
    assert "drover_jobs_fetch_idx" not in idx and "drover_jobs_fetch_v2_idx" not in idx
    assert (
        "(state, finalized_at) WHERE (finalized_at IS NOT NULL)" in idx["drover_jobs_finalized_idx"]
    )
    fetch = idx["drover_jobs_fetch_v3_idx"]
    assert "(queue, priority, scheduled_at, id)" in fetch
    assert "'available'" in fetch and "'retryable'" in fetch and "'scheduled'" in fetch
    assert "running" not in fetch
    assert "(leased_until, id)" in idx["drover_jobs_lease_idx"]
    assert "WHERE (state = 'running'" in idx["drover_jobs_lease_idx"]
    assert "(queue, id)" in idx["drover_jobs_dead_idx"]
    assert "WHERE (state = 'dead'" in idx["drover_jobs_dead_idx"]
    unique = idx["drover_jobs_unique_active_v2_idx"]
    assert unique.startswith("CREATE UNIQUE INDEX")
    assert "(queue, kind, unique_key)" in unique
    assert "unique_key IS NOT NULL" in unique
    for state in ("pending", "available", "scheduled", "retryable", "running"):
        assert f"'{state}'" in unique
    for state in ("completed", "cancelled", "dead"):
        assert f"'{state}'" not in unique
    identity = idx["drover_jobs_unique_identity_idx"]
    assert identity.startswith("CREATE UNIQUE INDEX")
    assert "(unique_hash, unique_bucket)" in identity
    assert "unique_hash IS NOT NULL" in identity
    assert "drover_state_bit(state)" in identity


def test_migrate_fresh_database_then_idempotent(empty_db_url: str) -> None:
    before = drover.migration_status(empty_db_url)
    assert before.applied == ()
    assert before.current_version == 0
    assert [m.version for m in before.pending] == [m.version for m in load_migrations()]
    assert not before.up_to_date

    applied = drover.migrate(empty_db_url)
    assert [m.label for m in applied] == [m.label for m in load_migrations()]
    again = drover.migrate(empty_db_url)
    assert again == []

    after = drover.migration_status(empty_db_url)
    assert after.up_to_date
    assert after.pending == ()
    assert [(a.version, a.name) for a in after.applied] == [
        (m.version, m.name) for m in load_migrations()
    ]
    with psycopg.connect(empty_db_url) as c:
        count = c.execute("SELECT count(*) FROM drover_schema_version").fetchone()
    assert count == (len(load_migrations()),)


def test_migrate_accepts_a_pool(empty_db_url: str) -> None:
    from psycopg_pool import ConnectionPool

    with ConnectionPool(empty_db_url, min_size=1, max_size=1) as pool:
        drover.migrate(pool)
        assert drover.migration_status(pool).up_to_date


def test_migrate_refuses_a_connection_inside_a_transaction(empty_db_url: str) -> None:
    with psycopg.connect(empty_db_url) as c:
        c.execute("SELECT 1")
        with pytest.raises(drover.MigrationError, match="outside any transaction"):
            drover.migrate(c)
    assert drover.migration_status(empty_db_url).applied == ()


def test_concurrent_migrators_serialise(empty_db_url: str) -> None:
    # Without the advisory lock several migrators race on CREATE TYPE and the
    # version rows; with it exactly one applies each migration.
    n = 6
    barrier = threading.Barrier(n)
    results: list[list[Migration]] = []
    failures: list[BaseException] = []
    lock = threading.Lock()

    def run() -> None:
        with psycopg.connect(empty_db_url, autocommit=True) as c:
            barrier.wait(timeout=30)
            try:
                applied = drover.migrate(c)
            except BaseException as exc:
                with lock:
                    failures.append(exc)
                return
        with lock:
            results.append(applied)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert failures == []
    applied_labels = sorted(m.label for r in results for m in r)
    assert applied_labels == sorted(m.label for m in load_migrations())
    assert drover.migration_status(empty_db_url).up_to_date


def test_failed_migration_rolls_back_and_names_the_file(
    empty_db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = load_migrations()
    broken = Migration(
        version=good[-1].version + 1,
        name="broken",
        sql="CREATE TABLE drover_half_done (id int); SELECT no_such_function();",
    )
    monkeypatch.setattr(migrator, "load_migrations", lambda: (*good, broken))
    with pytest.raises(drover.MigrationError, match=r"apply migration \d{4}_broken"):
        drover.migrate(empty_db_url)
    status = drover.migration_status(empty_db_url)
    assert status.current_version == good[-1].version
    assert [m.name for m in status.pending] == ["broken"]
    with psycopg.connect(empty_db_url) as c:
        exists = c.execute("SELECT to_regclass('drover_half_done') IS NOT NULL").fetchone()
    assert exists == (False,)


def test_insert_without_schema_names_migrate(empty_db_url: str) -> None:
    class Ping(drover.JobArgs, kind="ping"):
        pass

    client = drover.Client(empty_db_url)
    try:
        with pytest.raises(drover.SchemaMissing, match="drover.migrate"):
            client.insert(Ping())
    finally:
        client.close()


@pytest.mark.parametrize(
    ("filename", "expected"),
    [("0001_create_jobs.sql", (1, "create_jobs")), ("12_add_x.sql", (12, "add_x"))],
)
def test_migration_file_names_parse(filename: str, expected: tuple[int, str]) -> None:
    assert parse_migration_name(filename) == expected


@pytest.mark.parametrize("filename", ["create_jobs.sql", "x1_a.sql", "0001.sql", "0001_a b.sql"])
def test_malformed_migration_file_names_are_refused(filename: str) -> None:
    with pytest.raises(drover.MigrationError, match="must look like"):
        parse_migration_name(filename)


def test_duplicate_migration_versions_are_refused(tmp_path: Path) -> None:
    (tmp_path / "0001_a.sql").write_text("SELECT 1;")
    (tmp_path / "001_b.sql").write_text("SELECT 1;")
    with pytest.raises(drover.MigrationError, match="share version 1"):
        load_migrations(tmp_path)


def test_shipped_migrations_are_numbered_from_one_without_gaps() -> None:
    versions = [m.version for m in load_migrations()]
    assert versions == list(range(1, len(versions) + 1))


def test_queues_table(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    rows = conn.execute(
        """SELECT column_name, data_type, is_nullable, column_default
           FROM information_schema.columns WHERE table_name = 'drover_queues'
           ORDER BY ordinal_position"""
    ).fetchall()
    assert rows == [
        ("name", "text", "NO", None),
        ("paused_at", "timestamp with time zone", "YES", None),
        ("updated_at", "timestamp with time zone", "NO", "now()"),
    ]
    pk = conn.execute(
        "SELECT indexdef FROM pg_indexes WHERE tablename = 'drover_queues'"
    ).fetchall()
    assert pk == [
        ("CREATE UNIQUE INDEX drover_queues_pkey ON public.drover_queues USING btree (name)",)
    ]


def test_jobs_table_autovacuum_settings(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    row = conn.execute("SELECT reloptions FROM pg_class WHERE relname = 'drover_jobs'").fetchone()
    assert row is not None
    reloptions = cast(list[str], row[0])
    options = dict(o.split("=", 1) for o in reloptions)
    assert options["autovacuum_vacuum_scale_factor"] == "0.02"
    assert options["autovacuum_analyze_scale_factor"] == "0.02"
    assert options["autovacuum_vacuum_insert_scale_factor"] == "0.02"
