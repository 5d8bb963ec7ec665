"""drover's exception tree.

Every error a caller can catch from drover derives from :class:`DroverError`;
drover never lets a bare psycopg or pydantic exception escape its public API.
Where an error is also naturally a ``ValueError`` or ``TypeError`` it subclasses
that too, so ``except ValueError`` keeps working::

    DroverError                      never raised directly
    ├── ConfigError                  (ValueError) a structural mistake in configuration
    ├── InvalidJobArgs               (TypeError)  args that are not a JobArgs or cannot be encoded
    ├── InvalidInsertOpts            (ValueError) a bad queue, time, unique key or attempt count
    ├── UnsupportedConnection        (TypeError)  insert_tx given something it cannot use
    ├── NotInTransaction             insert_tx on an autocommit connection
    ├── DuplicateJob                 a non-terminal job already holds the unique key
    ├── MigrationError               a migration file is malformed or failed to apply
    └── DatabaseError                the database refused or could not be reached
        └── SchemaMissing            drover's tables do not exist: run drover.migrate()

Validation errors are raised before anything touches the database, so a
rejected call has written nothing.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "DatabaseError",
    "DroverError",
    "DuplicateJob",
    "InvalidInsertOpts",
    "InvalidJobArgs",
    "MigrationError",
    "NotInTransaction",
    "SchemaMissing",
    "UnsupportedConnection",
]


class DroverError(Exception):
    """Root of every exception drover raises. Do not raise it directly."""

    __module__ = "drover"


class ConfigError(DroverError, ValueError):
    """A structural configuration mistake, e.g. a worker registered twice for one kind."""

    __module__ = "drover"


class InvalidJobArgs(DroverError, TypeError):
    """The job arguments are not a :class:`drover.JobArgs` instance or cannot be encoded.

    Raised before anything is written; the message names the kind (and, for a
    batch, the item index).
    """

    __module__ = "drover"


class InvalidInsertOpts(DroverError, ValueError):
    """An insert option is invalid: an empty queue, a naive datetime, a bad unique key."""

    __module__ = "drover"


class UnsupportedConnection(DroverError, TypeError):
    """``insert_tx`` was given an object it cannot resolve to a psycopg 3 connection."""

    __module__ = "drover"


class NotInTransaction(DroverError):
    """``insert_tx`` was called on a connection in autocommit mode.

    The insert would commit on its own, which defeats the point of inserting
    inside the caller's transaction. Open one (``with conn.transaction():``,
    Django's ``transaction.atomic()``, SQLAlchemy's ``session.begin()``) or use
    :meth:`drover.Client.insert`.
    """

    __module__ = "drover"


class DuplicateJob(DroverError):
    """A job with the same ``(queue, kind, unique_key)`` is still waiting or running.

    The insert wrote nothing. In ``insert_tx`` the caller's transaction is left
    usable: drover detects the conflict without raising inside the database.
    """

    __module__ = "drover"

    def __init__(self, message: str, *, queue: str, kind: str, unique_key: str) -> None:
        super().__init__(message)
        self.queue = queue
        self.kind = kind
        self.unique_key = unique_key


class MigrationError(DroverError):
    """A migration file is malformed, or applying one failed (it was rolled back)."""

    __module__ = "drover"


class DatabaseError(DroverError):
    """The database refused a statement or could not be reached.

    The original psycopg exception is chained as ``__cause__``. Messages never
    contain the connection password.
    """

    __module__ = "drover"


class SchemaMissing(DatabaseError):
    """drover's tables are missing from this database; run :func:`drover.migrate` first."""

    __module__ = "drover"
