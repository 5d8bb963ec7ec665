"""Run ``drover web`` as a real process for the tests, and stop it as an operator would."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence

__all__ = ["drover_web"]


@contextlib.contextmanager
def drover_web(
    db_url: str, *args: str, python: Sequence[str] = ("-m", "drover")
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """Start ``python -m drover web ARGS`` on ``db_url``; yield its printed URL and the process.

    ``python`` replaces ``-m drover`` (``("-c", SCRIPT)``: a script that runs
    drover's command line, its arguments starting with ``web``). On exit the
    process gets SIGTERM and must end cleanly within 10 s.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DROVER_DATABASE_URL")}
    env["DATABASE_URL"] = db_url
    process = subprocess.Popen(
        [sys.executable, *python, "web", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()  # blocks until it serves, or exits
        if not url.startswith("http://"):
            _, err = process.communicate(timeout=10)
            raise AssertionError(f"drover web did not start: {url!r} {err}")
        yield url, process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.communicate(timeout=10)  # also closes the pipes
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
