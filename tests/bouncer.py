"""A real PgBouncer in transaction mode in front of the test server (ADR 0040).

``Bouncer`` writes a configuration into a private directory, starts Debian's
``pgbouncer`` binary on a loopback port the kernel chose, waits until it
answers, and can be killed and started again on the same port (the fault
test). PgBouncer refuses to run as root, so under root it runs as the user
that owns the server's socket directory (the embedded server's system user)
or as ``nobody`` for a TCP server; its directory is handed to that user.

Without the binary, tests that need it are skipped, unless
``DROVER_REQUIRE_PGBOUNCER=1`` (set by ``.ci/run`` once it installed the
package) turns the absence into a failure.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
import pytest

__all__ = ["Bouncer", "pgbouncer_binary", "require_pgbouncer"]


def pgbouncer_binary() -> str | None:
    """The path of the pgbouncer binary (Debian puts it in /usr/sbin), or None."""
    return shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/bin")


def require_pgbouncer() -> str:
    """The binary's path; skips without one (fails with ``DROVER_REQUIRE_PGBOUNCER=1``)."""
    binary = pgbouncer_binary()
    if binary is None:
        reason = "pgbouncer is not installed (apt-get install pgbouncer)"
        if os.environ.get("DROVER_REQUIRE_PGBOUNCER") == "1":
            pytest.fail(f"{reason}, and DROVER_REQUIRE_PGBOUNCER=1")
        pytest.skip(reason)
    return binary


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


class Bouncer:
    """One pgbouncer process in ``pool_mode = transaction`` in front of ``server_url``'s server.

    Every database of that server is reachable through it by name (the ``*``
    wildcard), logged into as the server URL's user (``auth_type = any``).
    """

    def __init__(self, binary: str, server_url: str, *, pool_size: int = 20) -> None:
        self._binary = binary
        params = psycopg.conninfo.conninfo_to_dict(server_url)
        self.user = str(params.get("user") or "postgres")
        host = str(params.get("host") or "localhost")
        target = [f"host={host}", f"port={params.get('port') or 5432}", f"user={self.user}"]
        if params.get("password"):
            target.append(f"password={params['password']}")
        self.root = Path(tempfile.mkdtemp(prefix="drover-pgbouncer-"))
        self.port = _free_port()
        self._log = self.root / "pgbouncer.log"
        self._ini = self.root / "pgbouncer.ini"
        self._ini.write_text(
            "[databases]\n"
            f"* = {' '.join(target)}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = any\n"
            "pool_mode = transaction\n"
            "max_client_conn = 1000\n"
            f"default_pool_size = {pool_size}\n"
            # Two server sessions per database from the start, used in turn: a
            # client's consecutive transactions land on different sessions, as
            # on a busy production pooler, so session state cannot pass unseen.
            "min_pool_size = 2\n"
            "server_round_robin = 1\n"
            "server_reset_query =\n"
            "ignore_startup_parameters = extra_float_digits\n"
            f"logfile = {self._log}\n"
        )
        self._run_as: str | None = None
        if os.geteuid() == 0:
            # pgbouncer will not run as root: run it as the user who can reach the server.
            owner = os.stat(host).st_uid if host.startswith("/") else pwd.getpwnam("nobody").pw_uid
            entry = pwd.getpwuid(owner)
            self._run_as = entry.pw_name
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
            for path in (self._ini,):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        self._proc: subprocess.Popen[bytes] | None = None

    def url(self, dbname: str) -> str:
        """A conninfo URL for ``dbname`` through this pgbouncer."""
        return psycopg.conninfo.make_conninfo(
            "", host="127.0.0.1", port=str(self.port), dbname=dbname, user=self.user
        )

    def start(self, timeout: float = 10.0) -> None:
        """Start pgbouncer (on the same port as before) and wait until it accepts connections."""
        command = [self._binary, str(self._ini)]
        if self._run_as is not None:
            command[1:1] = ["-u", self._run_as]
        self._proc = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + timeout
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"pgbouncer exited with {self._proc.returncode}: {self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"pgbouncer did not listen in {timeout}s: {self.log()}"
                    ) from None
                time.sleep(0.02)  # polling a port with a deadline

    def kill(self) -> None:
        """SIGKILL pgbouncer: every client and server connection it held drops at once."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)

    def stop(self) -> None:
        """Stop pgbouncer (SIGTERM: immediate shutdown) and delete its directory."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        shutil.rmtree(self.root, ignore_errors=True)

    def log(self) -> str:
        """The tail of pgbouncer's log, for failure messages."""
        try:
            return self._log.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"
