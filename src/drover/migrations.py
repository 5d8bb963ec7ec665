"""Schema migrations: bring a database's drover schema up to date, and report where it stands.

drover's schema is a series of numbered SQL files shipped with the package.
``migrate`` applies the pending ones; ``migration_status`` reports
which are applied. ``drover migrate`` and ``manage.py migrate`` (with the
Django app) call the same code.
"""

from __future__ import annotations

from drover._db import Connection
from drover._db.migrator import apply_pending, read_status
from drover._db.namespace import namespace_for
from drover._db.pool import PoolOrConninfo
from drover._records import AppliedMigration, Migration, MigrationStatus

__all__ = ["AppliedMigration", "Migration", "MigrationStatus", "migrate", "migration_status"]


def migrate(source: PoolOrConninfo | Connection, *, schema: str | None = None) -> list[Migration]:
    """Bring the database's drover schema up to date; return the migrations applied.

    ``schema`` installs drover in that PostgreSQL schema (created if missing)
    instead of the connection's ``search_path`` (normally ``public``); each
    schema is migrated and versioned on its own, under a lock of its own, and
    migrating one never touches another. ``None`` and ``"public"`` are the
    default installation, exactly as before schemas existed (docs/schemas.md).

    ``source`` is a ``psycopg_pool.ConnectionPool``, a conninfo string or URL, or
    an open psycopg connection that is not inside a transaction. Each migration
    runs in its own transaction together with its ``drover_schema_version`` row,
    so a failure leaves the database at the last good version. A
    transaction-level advisory lock serialises concurrent migrators (several
    processes deploying at once): the others wait, then find nothing left to
    do. Idempotent: a second call applies nothing and returns ``[]``.

    Raises:
        drover.MigrationError: a migration failed (it was rolled back), or
            ``source`` is a connection already inside a transaction.
        drover.InvalidArgument: ``schema`` is not a plain lowercase name (nothing
            was changed).
        drover.DatabaseError: the database could not be reached.
    """
    return apply_pending(source, namespace_for(schema))


def migration_status(
    source: PoolOrConninfo | Connection, *, schema: str | None = None
) -> MigrationStatus:
    """Report which of drover's migrations the database has applied and which are pending.

    ``source`` is a ``psycopg_pool.ConnectionPool``, a conninfo string or URL (a
    connection is opened and closed), or an open psycopg connection. Read-only:
    it never creates the bookkeeping table. Safe to call while another process
    migrates; it sees the versions committed so far. ``schema`` reads that
    schema's installation (as ``migrate``); a schema that does not exist
    reports every migration pending.

    Raises:
        drover.InvalidArgument: ``schema`` is not a plain lowercase name.
        drover.DatabaseError: the database could not be reached or queried.
    """
    return read_status(source, namespace_for(schema))
