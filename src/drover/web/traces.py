"""Tracebacks as the job page shows them: the user's frames open, drover's own folded away."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib.resources import files

__all__ = ["TraceSegment", "fold_trace", "is_drover_frame"]

_FRAME = re.compile(r'^  File "(?P<path>[^"]+)", line \d+')


@dataclass(frozen=True, slots=True)
class TraceSegment:
    """A run of a traceback's lines: either drover's own frames (``frames`` > 0) or the rest."""

    text: str
    frames: int = 0
    """How many of drover's frames the segment holds; 0 for the user's lines."""

    @property
    def folded(self) -> bool:
        """True for drover's frames, which the page shows closed."""
        return self.frames > 0


@functools.cache
def _drover_path() -> re.Pattern[str]:
    # drover's own modules and packages by name, so a user's project that
    # happens to live in a folder called "drover" is not mistaken for it.
    names = sorted(
        entry.name.removesuffix(".py")
        for entry in files("drover").iterdir()
        if entry.name.endswith(".py") or (entry.is_dir() and not entry.name.startswith("__"))
    )
    alternatives = "|".join(re.escape(n) for n in names)
    return re.compile(rf"[\\/]drover[\\/](?:{alternatives})(?:\.py$|[\\/])")


def is_drover_frame(path: str) -> bool:
    """True when ``path`` (a traceback's ``File "..."``) is one of drover's own modules."""
    return _drover_path().search(path) is not None


def fold_trace(trace: str) -> list[TraceSegment]:
    """Split a formatted Python traceback into segments, drover's consecutive frames in one.

    A frame is its ``  File "...", line N, in f`` line and the indented
    source and caret lines under it. Everything else (the header, the
    exception lines, chained-exception notes) stays with the user's lines,
    unchanged, so joining the segments' text gives the trace back.
    """
    segments: list[TraceSegment] = []
    lines = trace.splitlines()
    i = 0
    plain: list[str] = []
    folded: list[str] = []
    frames = 0

    def flush_plain() -> None:
        if plain:
            segments.append(TraceSegment("\n".join(plain)))
            plain.clear()

    def flush_folded() -> None:
        nonlocal frames
        if folded:
            segments.append(TraceSegment("\n".join(folded), frames))
            folded.clear()
            frames = 0

    while i < len(lines):
        match = _FRAME.match(lines[i])
        if match is None:
            flush_folded()
            plain.append(lines[i])
            i += 1
            continue
        frame = [lines[i]]
        i += 1
        while i < len(lines) and lines[i].startswith("    ") and not _FRAME.match(lines[i]):
            frame.append(lines[i])
            i += 1
        if is_drover_frame(match.group("path")):
            flush_plain()
            folded.extend(frame)
            frames += 1
        else:
            flush_folded()
            plain.extend(frame)
    flush_plain()
    flush_folded()
    return segments
