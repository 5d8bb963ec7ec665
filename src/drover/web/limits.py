"""The status page's limits: the page's data, its set and clear forms, and their messages.

`StatusPage` routes `GET /limits` and the `POST /limits/set` and
`/limits/clear` forms here, after its own checks (read-only, same origin,
form token). Every change goes through the Inspector, so it holds from each
client's next claim and wakes the listening ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drover.errors import InvalidLimit
from drover.inspector import Inspector
from drover.limits import (
    MAX_LIMIT,
    LimitKey,
    LimitState,
    check_override,
    parse_limit_key,
    parse_period,
    period_text,
)

__all__ = [
    "LIMIT_FLASHES",
    "LIMIT_POSTS",
    "limit_action",
    "limits_context",
    "valid_key_text",
]

LIMIT_POSTS = {"/limits/set", "/limits/clear"}
LIMIT_FLASHES = {
    "limit_set": "Set limit {limit}: every client follows from its next claim.",
    "limit_cleared": "Cleared the override of {limit}: the values its code declares apply.",
    "limit_removed": "Removed limit {limit}: no code declares it.",
    "limit_unchanged": "Limit {limit} has no override to clear.",
}
LIMIT_FLASH_ERRORS = {"limit_unchanged"}
# The longest form value read (a key is at most a kind's 255 characters plus its field).
_MAX_FIELD = 600


def valid_key_text(text: str) -> bool:
    """True when ``text`` names a limit (a flash message shows only a real key)."""
    try:
        parse_limit_key(text)
    except InvalidLimit:
        return False
    return True


def _count(form: Mapping[str, str], name: str) -> int | None:
    text = form.get(name, "").strip()
    if not text:
        return None
    if not (text.isascii() and text.isdigit()) or len(text) > 10:
        raise InvalidLimit(f"{name} must be a whole number from 1 to {MAX_LIMIT}, not {text!r}")
    return int(text)


def _key(form: Mapping[str, str]) -> LimitKey:
    text = form.get("key", "").strip()
    if len(text) > _MAX_FIELD:
        raise InvalidLimit(f"the limit's name is longer than {_MAX_FIELD} characters")
    return parse_limit_key(text)


def limit_action(inspector: Inspector, path: str, form: Mapping[str, str]) -> dict[str, object]:
    """Apply a limits form; the flash the redirect carries.

    Raises:
        drover.InvalidLimit: a bad key or value (the page answers 400), before
            anything is written.
    """
    key = _key(form)
    if path == "/limits/clear":
        if not inspector.clear_limit(key):
            return {"flash": "limit_unchanged", "limit": str(key)}
        # Said from the state after the write: gone, or back to its code's values.
        remains = any(s.key == key for s in inspector.limits())
        return {"flash": "limit_cleared" if remains else "limit_removed", "limit": str(key)}
    per_text = form.get("per", "").strip()
    if len(per_text) > _MAX_FIELD:
        raise InvalidLimit(f"per is longer than {_MAX_FIELD} characters")
    per = parse_period(per_text, "per") if per_text else None
    concurrency, rate, period = check_override(
        _count(form, "concurrency"), _count(form, "rate"), per, "override"
    )
    inspector.set_limit(key, concurrency=concurrency, rate=rate, per=period)
    return {"flash": "limit_set", "limit": str(key)}


def _editing(states: list[LimitState], text: str | None) -> dict[str, str]:
    """The set form's initial values: those of the limit `text` names, when it is a limit."""
    if not text or not valid_key_text(text):
        return {"key": "", "concurrency": "", "rate": "", "per": ""}
    key = parse_limit_key(text)
    state = next((s for s in states if s.key == key), None)
    if state is None:
        return {"key": str(key), "concurrency": "", "rate": "", "per": ""}
    return {
        "key": str(key),
        "concurrency": "" if state.concurrency is None else str(state.concurrency),
        "rate": "" if state.rate is None else str(state.rate),
        "per": "" if state.rate is None else period_text(state.per),
    }


def limits_context(inspector: Inspector, args: Mapping[str, str]) -> dict[str, Any]:
    """What the limits page renders: every limit with its use, and the set form's values."""
    states = inspector.limits()
    return {
        "limits": states,
        "form": _editing(states, args.get("key")),
        "periods": ("second", "minute", "hour"),
    }
