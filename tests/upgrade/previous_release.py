"""The previous release for the upgrade test: drover as it was before the newest migration.

The previous release is the newest commit on the first-parent history of
``HEAD`` whose migrations are a strict prefix (same file names, in order) of
the checkout's ``sql/migrations``: the last state of the main line whose schema
today's ``drover migrate`` can bring forward by applying only newer files.

Why not "the parent of the commit that added the newest migration file": the
lead renumbers migrations at merge, so files arrive by rename (0014 and 0015
have no adding commit) and out of numeric order (0012 was added, on a side
branch, after 0015). On the main line the parent of 0015's merge holds
0001-0011, 0013 and a 0015 that is today's 0014, a set no database was ever
upgraded from. The prefix rule picks a commit today's files extend, and
follows new migrations (0016, ...) with no change here.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["NoHistory", "PreviousRelease", "extract", "find_previous_release"]

ROOT = Path(__file__).resolve().parents[2]
"""The checkout: tests/upgrade/ is two levels below it."""

MIGRATIONS = "sql/migrations"


class NoHistory(Exception):
    """The checkout has no usable git history (an sdist, a shallow clone): the test skips."""


@dataclass(frozen=True)
class PreviousRelease:
    """A commit of the previous release and the migrations it ships (file names, in order)."""

    commit: str
    migrations: tuple[str, ...]
    current: tuple[str, ...]

    @property
    def version(self) -> int:
        """The schema version the previous release migrates a fresh database to."""
        return int(self.migrations[-1][:4])

    @property
    def newer(self) -> tuple[str, ...]:
        """The migrations today's ``drover migrate`` applies on top of the previous release's."""
        return self.current[len(self.migrations) :]


def _git(*args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False, timeout=60
    )
    if done.returncode != 0:
        raise NoHistory(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def _migrations_at(commit: str) -> tuple[str, ...]:
    try:
        out = _git("ls-tree", "--name-only", f"{commit}:{MIGRATIONS}")
    except NoHistory:
        return ()  # a commit from before sql/migrations existed
    return tuple(sorted(n for n in out.split() if n.endswith(".sql")))


def _candidates() -> Iterator[str]:
    """HEAD, then the parent of each first-parent commit that changed sql/migrations, newest first.

    HEAD first: a migration being written, not yet committed, upgrades from HEAD.
    Between two commits that changed sql/migrations (a merge compared with its
    first parent) the files do not change, so each one's parent is the last
    state before that change.
    """
    yield _git("rev-parse", "HEAD").strip()
    for change in _git("rev-list", "--first-parent", "HEAD", "--", MIGRATIONS).split():
        try:
            yield _git("rev-parse", "--verify", "--quiet", f"{change}^1").strip()
        except NoHistory:
            return  # the root commit, or a shallow clone's boundary


def find_previous_release() -> PreviousRelease:
    """The previous release's commit (see the module docstring).

    Raises:
        NoHistory: no git, no repository at the checkout, or no commit in the
            history whose migrations are a strict prefix of today's (a shallow
            clone, or a single-commit history).
    """
    if shutil.which("git") is None:
        raise NoHistory("git is not installed")
    if not (ROOT / ".git").exists():
        raise NoHistory(f"{ROOT} is not a git checkout (installed from an sdist?)")
    current = tuple(sorted(p.name for p in (ROOT / MIGRATIONS).glob("*.sql")))
    for candidate in _candidates():
        before = _migrations_at(candidate)
        if before and len(before) < len(current) and current[: len(before)] == before:
            return PreviousRelease(candidate, before, current)
    shallow = _git("rev-parse", "--is-shallow-repository").strip() == "true"
    why = "the clone is shallow" if shallow else "no such commit in the history"
    raise NoHistory(
        f"no commit before HEAD ships a strict prefix of today's {len(current)} migrations ({why})"
    )


def extract(commit: str, into: Path) -> Path:
    """``git archive <commit> src sql`` unpacked into ``into``; returns its ``src`` directory.

    That drover reads its SQL from the ``sql/`` beside ``src/`` (a bare checkout).
    """
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, "src", "sql"],
        capture_output=True,
        check=True,
        timeout=120,
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True, timeout=120)
    return into / "src"
