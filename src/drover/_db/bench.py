"""What ``drover bench`` runs on the server besides drover's API, each on a connection of its own.

A throwaway database per burst run, the planner's statistics refreshed
before a drain, and the server's version and durability settings for the
report. Each function opens one autocommit connection from ``conninfo``
(libpq's connect timeout applies) and closes it before returning, so the
command needs no pool and sees none. Thread-safe: nothing is shared.
"""

from __future__ import annotations

from psycopg import sql
from psycopg.rows import tuple_row

from drover._db.errors import translate
from drover._db.namespace import DEFAULT, Namespace
from drover._db.pool import borrow
from drover._db.queries import query

__all__ = ["analyze_jobs", "create_database", "drop_database", "server_settings"]


def create_database(conninfo: str, name: str) -> None:
    """Create database ``name`` (quoted as an identifier) on ``conninfo``'s server."""
    with (
        borrow(conninfo, "create a benchmark database") as conn,
        translate(f"create database {name}"),
    ):
        conn.execute(sql.SQL(query("bench_create_database")).format(name=sql.Identifier(name)))


def drop_database(conninfo: str, name: str) -> None:
    """Drop database ``name`` on ``conninfo``'s server, disconnecting whoever is still in it."""
    with (
        borrow(conninfo, "drop the benchmark database") as conn,
        translate(f"drop database {name}"),
    ):
        conn.execute(sql.SQL(query("bench_drop_database")).format(name=sql.Identifier(name)))


def analyze_jobs(conninfo: str, *, ns: Namespace = DEFAULT) -> None:
    """Refresh the planner's statistics for ``drover_jobs``."""
    with (
        borrow(conninfo, "analyze drover_jobs") as conn,
        translate("analyze drover_jobs"),
        conn.cursor() as cur,
    ):
        cur.execute(query("stats_analyze", ns))


def server_settings(conninfo: str) -> dict[str, str]:
    """Version and durability settings of the server, for benchmark reports."""
    with (
        borrow(conninfo, "read server settings") as conn,
        translate("read server settings"),
        conn.cursor(row_factory=tuple_row) as cur,
    ):
        cur.execute(query("server_settings"))
        return {str(name): str(value) for name, value in cur.fetchall()}
