"""Reading the soak's gauges: a process's RSS and threads, and the database's view of the run.

The database side goes through one connection of its own (``soak-sampler``,
not ``drover...``, so the nemesis's backend terminations never pick it and it
is not counted among the workers' connections), reconnected after a fault;
while the server is down every database gauge reads None.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

__all__ = ["ARCHIVE_DDL", "Database", "proc_status"]

ARCHIVE_DDL = """
CREATE TABLE soak_archive (LIKE drover_jobs);
CREATE FUNCTION soak_archive_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO soak_archive SELECT * FROM gone;
    RETURN NULL;
END $$;
CREATE TRIGGER soak_archive_deleted AFTER DELETE ON drover_jobs
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION soak_archive_deleted();
"""
"""Every row deleted from the jobs table (retention's pruning) is copied to ``soak_archive``.

The checker needs every job's final row; retention deletes them during the
run. A statement-level trigger with a transition table keeps one insert per
pruning batch, not one per row, and lives in the soak's own database only.
"""


def proc_status(pid: int) -> tuple[int, int] | None:
    """``(rss_bytes, threads)`` of a live process from ``/proc``; None if it is gone."""
    rss = threads = None
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
        elif line.startswith("Threads:"):
            threads = int(line.split()[1])
    if rss is None or threads is None:
        return None  # a zombie has no VmRSS
    return rss, threads


class Database:
    """The sampler's connection: one row per query, None while the database is unreachable."""

    def __init__(self, dsn: str) -> None:
        self._dsn = make_conninfo(dsn, application_name="soak-sampler")
        self._conn: psycopg.Connection[Any] | None = None

    def row(self, sql: str) -> tuple[Any, ...] | None:
        """The first row of ``sql``, or None if the database could not answer."""
        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(self._dsn, autocommit=True, connect_timeout=5)
            return self._conn.execute(sql.encode()).fetchone()
        except psycopg.OperationalError:
            self.close()
            return None

    def backlog(self) -> int | None:
        """Jobs not yet finished (waiting, running, retrying)."""
        row = self.row("SELECT count(*) FROM drover_jobs WHERE finalized_at IS NULL")
        return None if row is None else int(row[0])

    def connections(self) -> int | None:
        """The workers' connections: ``pg_stat_activity`` rows named ``drover...``."""
        row = self.row(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'drover%'"
        )
        return None if row is None else int(row[0])

    def table(self) -> tuple[int, int, int] | None:
        """The jobs table's ``(n_dead_tup, n_live_tup, total bytes)``."""
        row = self.row(
            "SELECT n_dead_tup, n_live_tup, pg_total_relation_size(relid)"
            " FROM pg_stat_user_tables WHERE relname = 'drover_jobs'"
        )
        return None if row is None else (int(row[0]), int(row[1]), int(row[2]))

    def close(self) -> None:
        """Drop the connection (the next query reconnects)."""
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = None
