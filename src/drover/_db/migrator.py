"""Applies drover's numbered migrations, one transaction each, under an advisory lock."""

from __future__ import annotations

import logging

from psycopg import pq, sql
from psycopg.rows import tuple_row

from drover._db import Connection
from drover._db.errors import redact, translate
from drover._db.namespace import DEFAULT, Namespace
from drover._db.pool import PoolOrConninfo, borrow
from drover._db.queries import load_migrations, query, render_migration
from drover._records import AppliedMigration, Migration, MigrationStatus
from drover.errors import MigrationError, SchemaMissing

__all__ = ["MIGRATION_LOCK", "apply_pending", "read_status", "require_current_schema"]

MIGRATION_LOCK = 7237970105436602370
"""The migrators' advisory-lock key in the default schema: "drover" then 0x0002."""

logger = logging.getLogger("drover.migrate")


def _applied(conn: Connection, ns: Namespace = DEFAULT) -> tuple[AppliedMigration, ...]:
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("schema_version_exists", ns))
        row = cur.fetchone()
        if row is None or not row[0]:
            return ()
        cur.execute(query("schema_versions", ns))
        return tuple(AppliedMigration(v, n, at) for v, n, at in cur.fetchall())


def read_status(source: PoolOrConninfo | Connection, ns: Namespace = DEFAULT) -> MigrationStatus:
    """What ``drover.migrations.migration_status`` reports (it creates no table);
    a schema that does not exist reads as nothing applied."""
    migrations = load_migrations()
    with borrow(source, "read migration status") as conn, translate("read migration status"):
        was_idle = conn.info.transaction_status == pq.TransactionStatus.IDLE
        applied = _applied(conn, ns)
        if was_idle and not conn.autocommit:
            conn.rollback()  # we only read; leave the connection as idle as we found it
    done = {m.version for m in applied}
    return MigrationStatus(applied, tuple(m for m in migrations if m.version not in done))


def require_current_schema(
    conn: Connection, target: str, action: str, ns: Namespace = DEFAULT
) -> None:
    """Raise ``drover.SchemaMissing`` unless every migration is applied on ``conn``.

    The message names `target` (`host:port/db`), both versions when the
    schema is behind, and the remedy (`drover migrate`; see `SchemaMissing.with_remedy`).
    """
    status = read_status(conn, ns)
    if status.up_to_date:
        return
    where = target if ns.default else f"{target} (schema {ns.label})"
    if not status.applied:
        raise SchemaMissing(f"{action}: drover's schema is missing from {where}")
    raise SchemaMissing(
        f"{action}: the schema at {where} is at version {status.current_version} but this "
        f"drover needs {status.pending[-1].version}"
    )


def _enter_schema(conn: Connection, ns: Namespace = DEFAULT) -> None:
    """Create ``ns``'s schema if missing and put it alone on this transaction's search_path."""
    assert ns.schema is not None
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("schema_exists"), {"schema": ns.schema})
        row = cur.fetchone()
        if row is None or not row[0]:
            statement = sql.SQL(query("schema_create")).format(schema=sql.Identifier(ns.schema))
            cur.execute(statement)
        path = sql.Identifier(ns.schema).as_string(conn)
        cur.execute(query("schema_search_path"), {"path": path})


def _apply_next(
    conn: Connection, migrations: tuple[Migration, ...], ns: Namespace = DEFAULT
) -> Migration | None:
    """In one transaction: lock, find the first pending migration, apply and record it.

    In a schema of drover's own (``ns``), the schema is created if missing,
    the migration runs with it alone on the search_path, and the functions
    it created are pinned to it (``schema_pin_functions``).
    """
    with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
        with translate(f"lock schema {ns.label} for migration"):
            cur.execute(query("schema_lock", ns), {"key": ns.lock_key(MIGRATION_LOCK)})
            if not ns.default:
                _enter_schema(conn, ns)
            cur.execute(query("schema_version_table", ns))
        # Re-read under the lock: another process may have migrated while we waited.
        done = {m.version for m in _applied(conn, ns)}
        pending = [m for m in migrations if m.version not in done]
        if not pending:
            return None
        migration = pending[0]
        try:
            cur.execute(render_migration(migration.sql, ns).encode())
            if not ns.default:
                cur.execute(query("schema_pin_functions", ns))
        except Exception as exc:
            raise MigrationError(
                f"apply migration {migration.label}: {redact(str(exc).strip())}"
            ) from exc
        with translate(f"record migration {migration.label}"):
            cur.execute(
                query("schema_version_record", ns),
                {"version": migration.version, "name": migration.name},
            )
        return migration


def apply_pending(source: PoolOrConninfo | Connection, ns: Namespace = DEFAULT) -> list[Migration]:
    """``drover.migrations.migrate``: each pending migration in its own transaction."""
    migrations = load_migrations()
    applied: list[Migration] = []
    with borrow(source, "migrate") as conn:
        if conn.info.transaction_status != pq.TransactionStatus.IDLE:
            raise MigrationError(
                "migrate needs a connection outside any transaction: each migration commits"
            )
        while (migration := _apply_next(conn, migrations, ns)) is not None:
            logger.info(
                "applied migration %s",
                migration.label,
                extra={"migration": migration.label},
            )
            applied.append(migration)
    return applied
