"""What :func:`drover.migrate` and :func:`drover.migration_status` report.

Plain immutable records with no database access, so they can be imported
anywhere (the functions that produce them live with the rest of drover's SQL
in ``drover._db``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

__all__ = ["AppliedMigration", "Migration", "MigrationStatus"]


@dataclass(frozen=True, slots=True)
class Migration:
    """One numbered schema migration file shipped with drover."""

    __module__ = "drover"

    version: int
    name: str
    sql: str

    @property
    def label(self) -> str:
        """``0001_create_jobs``: how logs and errors name the migration."""
        return f"{self.version:04d}_{self.name}"


@dataclass(frozen=True, slots=True)
class AppliedMigration:
    """A migration recorded in ``drover_schema_version``."""

    __module__ = "drover"

    version: int
    name: str
    applied_at: datetime


@dataclass(frozen=True, slots=True)
class MigrationStatus:
    """Which migrations a database has, and which it still needs."""

    __module__ = "drover"

    applied: tuple[AppliedMigration, ...]
    pending: tuple[Migration, ...]

    @property
    def current_version(self) -> int:
        """The highest applied version (0 on a database drover never touched)."""
        return max((m.version for m in self.applied), default=0)

    @property
    def up_to_date(self) -> bool:
        """True when nothing is pending."""
        return not self.pending
