"""No log call in drover passes an ``extra`` key that LogRecord reserves.

``logging`` raises KeyError for such a key at the moment of logging, which in a
background loop's error path would kill the loop it was meant to report on.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "drover"
RESERVED = set(vars(logging.LogRecord("n", 0, "p", 0, "m", (), None))) | {"message", "asctime"}


def test_extra_keys_never_collide_with_log_record_attributes() -> None:
    offenders = []
    for path in SRC.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for block in re.findall(r"extra=\{([^}]*)\}", text, re.S):
            offenders += [
                f"{path.name}: {key}"
                for key in re.findall(r'"([A-Za-z_]+)":', block)
                if key in RESERVED
            ]
    assert offenders == []
