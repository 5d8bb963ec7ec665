"""Developer commands run from a clone of drover (``python -m tools.<name>``); not in the wheel."""

from __future__ import annotations
