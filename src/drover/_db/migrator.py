"""Applies drover's numbered migrations, one transaction each, under an advisory lock."""

from __future__ import annotations

import logging

from psycopg import pq
from psycopg.rows import tuple_row

from drover._db import Connection
from drover._db.errors import redact, translate
from drover._db.pool import PoolOrConninfo, borrow
from drover._db.queries import load_migrations, query
from drover._records import AppliedMigration, Migration, MigrationStatus
from drover.errors import MigrationError, SchemaMissing

__all__ = ["apply_pending", "read_status", "require_current_schema"]

logger = logging.getLogger("drover.migrate")


def _applied(conn: Connection) -> tuple[AppliedMigration, ...]:
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("schema_version_exists"))
        row = cur.fetchone()
        if row is None or not row[0]:
            return ()
        cur.execute(query("schema_versions"))
        return tuple(AppliedMigration(v, n, at) for v, n, at in cur.fetchall())


def read_status(source: PoolOrConninfo | Connection) -> MigrationStatus:
    """What ``drover.migrations.migration_status`` reports (it creates no table)."""
    migrations = load_migrations()
    with borrow(source, "read migration status") as conn, translate("read migration status"):
        was_idle = conn.info.transaction_status == pq.TransactionStatus.IDLE
        applied = _applied(conn)
        if was_idle and not conn.autocommit:
            conn.rollback()  # we only read; leave the connection as idle as we found it
    done = {m.version for m in applied}
    return MigrationStatus(applied, tuple(m for m in migrations if m.version not in done))


def require_current_schema(conn: Connection, target: str, action: str) -> None:
    """Raise ``drover.SchemaMissing`` unless every migration is applied on ``conn``.

    The message names `target` (`host:port/db`), both versions when the
    schema is behind, and the remedy (`drover migrate`; see `SchemaMissing.with_remedy`).
    """
    status = read_status(conn)
    if status.up_to_date:
        return
    if not status.applied:
        raise SchemaMissing(f"{action}: drover's schema is missing from {target}")
    raise SchemaMissing(
        f"{action}: the schema at {target} is at version {status.current_version} but this "
        f"drover needs {status.pending[-1].version}"
    )


def _apply_next(conn: Connection, migrations: tuple[Migration, ...]) -> Migration | None:
    """In one transaction: lock, find the first pending migration, apply and record it."""
    with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
        with translate("lock the schema for migration"):
            cur.execute(query("schema_lock"))
            cur.execute(query("schema_version_table"))
        # Re-read under the lock: another process may have migrated while we waited.
        done = {m.version for m in _applied(conn)}
        pending = [m for m in migrations if m.version not in done]
        if not pending:
            return None
        migration = pending[0]
        try:
            cur.execute(migration.sql.encode())
        except Exception as exc:
            raise MigrationError(
                f"apply migration {migration.label}: {redact(str(exc).strip())}"
            ) from exc
        with translate(f"record migration {migration.label}"):
            cur.execute(
                query("schema_version_record"),
                {"version": migration.version, "name": migration.name},
            )
        return migration


def apply_pending(source: PoolOrConninfo | Connection) -> list[Migration]:
    """``drover.migrations.migrate``: each pending migration in its own transaction."""
    migrations = load_migrations()
    applied: list[Migration] = []
    with borrow(source, "migrate") as conn:
        if conn.info.transaction_status != pq.TransactionStatus.IDLE:
            raise MigrationError(
                "migrate needs a connection outside any transaction: each migration commits"
            )
        while (migration := _apply_next(conn, migrations)) is not None:
            logger.info(
                "applied migration %s",
                migration.label,
                extra={"migration": migration.label},
            )
            applied.append(migration)
    return applied
