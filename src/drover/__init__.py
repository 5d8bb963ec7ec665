"""drover: a PostgreSQL-backed job queue for Python.

Jobs are rows in PostgreSQL. Insert them inside your own transaction with
:meth:`Client.insert_tx` and they exist if and only if that transaction
commits. Delivery is at-least-once: handlers must be idempotent.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from drover._db.migrator import AppliedMigration, MigrationStatus, migrate, migration_status
from drover._db.queries import Migration
from drover._durations import Duration
from drover.client import Client, InsertItem
from drover.context import JobContext
from drover.errors import (
    ConfigError,
    DatabaseError,
    DroverError,
    DuplicateJob,
    InvalidInsertOpts,
    InvalidJobArgs,
    MigrationError,
    NotInTransaction,
    SchemaMissing,
    UnsupportedConnection,
)
from drover.job import InsertOpts, Job, JobArgs, JobRow, JobState
from drover.worker import Worker, Workers

try:
    __version__ = version("drover")
except PackageNotFoundError:  # a bare checkout on sys.path, not installed
    __version__ = "0+unknown"

__all__ = [
    "AppliedMigration",
    "Client",
    "ConfigError",
    "DatabaseError",
    "DroverError",
    "DuplicateJob",
    "Duration",
    "InsertItem",
    "InsertOpts",
    "InvalidInsertOpts",
    "InvalidJobArgs",
    "Job",
    "JobArgs",
    "JobContext",
    "JobRow",
    "JobState",
    "Migration",
    "MigrationError",
    "MigrationStatus",
    "NotInTransaction",
    "SchemaMissing",
    "UnsupportedConnection",
    "Worker",
    "Workers",
    "__version__",
    "migrate",
    "migration_status",
]
