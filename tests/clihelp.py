"""Running the ``drover`` CLI from tests: in-process (typer's CliRunner) and as a real process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from typer.testing import CliRunner, Result

import drover.cli

__all__ = ["cli", "invoke", "ok", "one_line", "refused", "run"]


def invoke(args: Sequence[str], env: dict[str, str | None] | None = None) -> Result:
    """Run the CLI in-process as ``main`` would, with no database URL in the environment."""
    full_env: dict[str, str | None] = {"DROVER_DATABASE_URL": None, "DATABASE_URL": None}
    full_env.update(env or {})
    return CliRunner().invoke(drover.cli.app, drover.cli.hoist_globals(list(args)), env=full_env)


def cli(url: str, *args: str) -> Result:
    return invoke(["--database", url, *args])


def run(
    *args: str, url: str | None = None, cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``python -m drover ARGS`` as a real process; ``url`` goes in ``DATABASE_URL``."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DROVER_DATABASE_URL")}
    if url is not None:
        env["DATABASE_URL"] = url
    return subprocess.run(
        [sys.executable, "-m", "drover", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def ok(result: Result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
    assert result.stderr == ""
    return result.stdout


def refused(result: Result, code: int) -> str:
    """The command failed with ``code``, printed nothing on stdout, and one line on stderr."""
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    assert result.stdout == ""
    assert result.stderr.strip(), "a refusal must say why"
    return result.stderr


def one_line(text: str) -> str:
    assert text.endswith("\n")
    assert text.count("\n") == 1, text
    assert text.startswith("drover: "), text
    return text
