"""Every page's examples run as written, and .ci/run runs the README's two commands.

Each page (README.md, docs/*.md) runs in a fresh interpreter against a fresh
test database: its python blocks in order, in one namespace, as a reader
pasting them one after another would. A block marked ``<!-- not run: REASON -->``
is compiled, not run, and reported as a skip with its reason (see
tests/README.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from docs_blocks import README, ROOT, Block, blocks, page_id, pages, python_blocks

# Django settings are process-global, so each page runs in a fresh interpreter
# that configures Django for the test database first, as a project's settings
# would; the pages' Django examples then use django.db.connection as they are.
_RUNNER = """
import os, sys
import django, psycopg
from django.conf import settings

p = psycopg.conninfo.conninfo_to_dict(os.environ["DATABASE_URL"])
settings.configure(
    USE_TZ=True,
    DATABASES={"default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": p.get("dbname", ""), "HOST": p.get("host", ""), "PORT": p.get("port", ""),
        "USER": p.get("user", ""), "PASSWORD": p.get("password", ""),
    }},
)
django.setup()
namespace = {"__name__": "__docs__"}
blocks = sys.argv[2:]
for pair in zip(blocks[::2], blocks[1::2]):
    where, source = pair
    exec(compile(source, where, "exec"), namespace)
from django.db import connections
connections.close_all()
print(f"ran {len(blocks) // 2} blocks of {sys.argv[1]}", file=sys.stderr)
"""

_RUNNABLE = {page_id(p): p for p in pages() if any(b.not_run is None for b in python_blocks(p))}
_NOT_RUN = [b for p in pages() for b in python_blocks(p) if b.not_run is not None]


def _run(
    label: str, page: Path, database_url: str, tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    argv: list[str] = []
    for block in python_blocks(page):
        if block.not_run is None:
            argv += [str(block.page), block.source()]
    return subprocess.run(
        [sys.executable, "-c", _RUNNER, label, *argv],
        env={**os.environ, "DATABASE_URL": database_url},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.mark.parametrize("page", list(_RUNNABLE.values()), ids=list(_RUNNABLE))
def test_page_examples_run(page: Path, db_url: str, tmp_path: Path) -> None:
    result = _run(page_id(page), page, db_url, tmp_path)
    assert result.returncode == 0, f"{page_id(page)}:\n{result.stdout}\n{result.stderr}"
    runnable = [b for b in python_blocks(page) if b.not_run is None]
    assert f"ran {len(runnable)} blocks of {page_id(page)}" in result.stderr


@pytest.mark.parametrize("block", _NOT_RUN, ids=[b.id for b in _NOT_RUN])
def test_not_run_blocks_compile(block: Block) -> None:
    compile(block.source(), str(block.page), "exec")
    pytest.skip(f"{block.id} not run: {block.not_run} (compiled only)")


def test_the_pages_have_examples_to_run() -> None:
    assert page_id(README) in _RUNNABLE
    assert len(_RUNNABLE) >= 10
    total = sum(len(python_blocks(p)) for p in pages())
    assert len(_NOT_RUN) * 5 < total, "most blocks must run; mark only what cannot"


def test_a_failing_block_fails_its_page(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```python\nx = 1\n```\n\ntext\n\n```python\nassert x == 2, 'boom'\n```\n")
    result = _run("page.md", page, "postgresql:///unused", tmp_path)
    assert result.returncode != 0
    assert f'File "{page}", line 8' in result.stderr
    assert "AssertionError: boom" in result.stderr


def test_ci_runs_the_readme_commands() -> None:
    setup = [b.code.strip() for b in blocks(README) if b.language == "sh"]
    install = 'python3 -m venv .venv && .venv/bin/pip install -e ".[dev]"'
    commands = [c for c in setup if c.startswith(install) or c == ".venv/bin/python -m pytest"]
    assert len(commands) == 2, setup
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    for command in commands:
        assert command in ci
