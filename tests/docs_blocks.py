"""The python blocks of the documentation pages, as the docs tests read them.

A page is ``README.md`` or a top-level ``docs/*.md`` (the ADRs under
``docs/adr/`` are records, not pages of examples). A block is a fenced block
whose info string starts with ``python``. Every block runs, except one whose
opening fence comes right after an HTML comment ``<!-- not run: REASON -->``
(blank lines between them allowed): that block is only compiled, and the test
reports it as skipped with its reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")
_NOT_RUN = re.compile(r"^[ \t]*<!--\s*not run:\s*(?P<reason>.*?)\s*-->[ \t]*$")


def pages() -> list[Path]:
    """README.md, then docs/*.md in name order."""
    return [README, *sorted(DOCS.glob("*.md"))]


def page_id(page: Path) -> str:
    """``README.md`` or ``docs/tutorial.md``: a page's path from the repository root."""
    return page.relative_to(ROOT).as_posix()


@dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    page: Path
    line: int
    """1-based line number of the block's first line of code (after the fence)."""
    info: str
    """The fence's info string: ``python``, ``python title="settings.py"``, ``sh``, ..."""
    code: str
    not_run: str | None
    """The reason from ``<!-- not run: REASON -->`` before the fence, else ``None``."""

    @property
    def language(self) -> str:
        return self.info.split(maxsplit=1)[0] if self.info.strip() else ""

    @property
    def is_python(self) -> bool:
        return self.language == "python"

    @property
    def id(self) -> str:
        return f"{page_id(self.page)}:{self.line}"

    def source(self) -> str:
        """The code padded with blank lines, so tracebacks give the page's own line numbers."""
        return "\n" * (self.line - 1) + self.code


def _parse(page: Path) -> tuple[list[Block], list[int]]:
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    dangling: list[int] = []
    marker: tuple[int, str] | None = None
    index = 0
    while index < len(lines):
        line = lines[index]
        opening = _FENCE.match(line)
        if opening is None:
            comment = _NOT_RUN.match(line)
            if marker is not None and (comment is not None or line.strip()):
                dangling.append(marker[0])
                marker = None
            if comment is not None:
                marker = (index + 1, comment["reason"])
            index += 1
            continue
        indent, fence, info = opening["indent"], opening["fence"], opening["info"].strip()
        body: list[str] = []
        index += 1
        while index < len(lines):
            closing = lines[index].strip()
            if closing.startswith(fence[0] * len(fence)) and not closing.strip(fence[0]):
                break
            text = lines[index]
            body.append(text[len(indent) :] if text.startswith(indent) else text.lstrip())
            index += 1
        reason = marker[1] if marker is not None else None
        block = Block(page, index - len(body) + 1, info, "\n".join(body) + "\n", reason)
        if marker is not None and not block.is_python:
            dangling.append(marker[0])
        found.append(block)
        marker = None
        index += 1
    if marker is not None:
        dangling.append(marker[0])
    return found, dangling


def blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, in order."""
    return _parse(page)[0]


def dangling_markers(page: Path) -> list[int]:
    """Lines of ``<!-- not run: ... -->`` markers that no python block follows."""
    return _parse(page)[1]


def python_blocks(page: Path) -> list[Block]:
    """The page's python blocks, in order."""
    return [block for block in blocks(page) if block.is_python]
