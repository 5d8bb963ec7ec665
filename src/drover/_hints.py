"""The "did you mean" hint every misspelled name gets."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["did_you_mean"]


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the known name closest to ``name``, or ``""`` when none is
    close enough (``difflib``'s default cutoff)."""
    close = difflib.get_close_matches(name, sorted(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
