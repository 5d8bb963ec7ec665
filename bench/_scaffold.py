"""What every benchmark here needs: a server to run on and a scratch database on it.

Imported by the scripts as ``from _scaffold import ...`` (``python bench/x.py``
puts ``bench/`` first on ``sys.path``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

import drover

__all__ = ["scratch_database", "server"]


@contextlib.contextmanager
def server(url: str | None, *, tune_for_tests: bool = False) -> Iterator[str]:
    """``url`` when given, else an embedded PostgreSQL for the duration.

    The embedded server keeps ``fsync``, ``synchronous_commit`` and
    ``full_page_writes`` on, as in production, unless ``tune_for_tests``.
    """
    if url:
        yield url
        return
    from drover._db.embedded import embedded_postgres

    with embedded_postgres(tune_for_tests=tune_for_tests) as embedded:
        yield embedded


@contextlib.contextmanager
def scratch_database(
    server_url: str, prefix: str, *, migrate: bool = False, no_flush: bool = False
) -> Iterator[str]:
    """A database of its own named ``<prefix>_<pid>``, dropped (forcibly) on exit.

    ``migrate`` applies drover's migrations; ``no_flush`` sets the
    database's ``synchronous_commit = off``.
    """
    name = f"{prefix}_{os.getpid()}"
    ident = sql.Identifier(name)
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(ident))
        if no_flush:
            conn.execute(sql.SQL("ALTER DATABASE {} SET synchronous_commit = off").format(ident))
    try:
        url = make_conninfo(server_url, dbname=name)
        if migrate:
            drover.migrate(url)
        yield url
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
