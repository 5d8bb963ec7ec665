"""What the status page reads from requests: the job list's filters and the flash messages.

A redirect after an action carries a flash code and its values in the query
string; `flash_text` shows only a known code whose values have the expected
form, so a crafted link cannot make the page say something else.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from drover.errors import InvalidInsertOpts
from drover.job import MAX_KIND_LENGTH, JobState, _check_name
from drover.progress import check_tags
from drover.queues import check_queue_name
from drover.web.limits import LIMIT_FLASH_ERRORS, LIMIT_FLASHES, valid_key_text

__all__ = [
    "FLASHES",
    "FLASH_ERRORS",
    "FLASH_KEYS",
    "MAX_ARGS_FILTER",
    "MAX_LIMIT",
    "STATES",
    "BadFilter",
    "Filters",
    "flash_text",
    "parse_args_filter",
    "parse_filters",
    "positive_id",
]

STATES = ("dead", "all", *(s.value for s in JobState if s is not JobState.DEAD))
MAX_LIMIT = 1000
MAX_ARGS_FILTER = 4096


class BadFilter(Exception):
    """A query parameter the page refuses; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True, slots=True)
class Filters:
    queue: str | None
    kind: str | None
    state: str
    limit: int
    before: int | None
    args: str | None = None
    """The args filter as typed (kept in links); ``args_value`` is what it parsed to."""
    args_value: dict[str, Any] | None = None
    tags: tuple[str, ...] = ()
    """Jobs must carry every one of these (typed comma-separated)."""

    def query(self, **changes: object) -> str:
        values: dict[str, object] = {
            "queue": self.queue,
            "kind": self.kind,
            "state": self.state,
            "limit": self.limit,
            "before": self.before,
            "args": self.args,
            "tags": ",".join(self.tags),
        }
        values.update(changes)
        kept = {k: v for k, v in values.items() if v not in (None, "")}
        if kept.get("state") == "dead":
            del kept["state"]
        if kept.get("limit") == 100:
            del kept["limit"]
        return urlencode(sorted(kept.items()))


def positive_id(text: str, field: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= 2**63 - 1:
        raise BadFilter(field, f"{field} must be a job id (a whole number from 1), not {text!r}")
    return int(text)


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def parse_args_filter(text: str) -> dict[str, Any]:
    """The job list's ``args`` filter: a JSON object, or `BadFilter` saying what is wrong."""
    example = 'like {"to": "ada@example.com"}'
    if len(text) > MAX_ARGS_FILTER:
        raise BadFilter("args", f"args must be at most {MAX_ARGS_FILTER} characters of JSON")
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise BadFilter(
            "args", f"args is not valid JSON ({exc.msg} at column {exc.colno}); {example}"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise BadFilter("args", f"args is not valid JSON ({exc}); {example}") from None
    if not isinstance(value, dict):
        raise BadFilter(
            "args", f"args must be a JSON object, not {type(value).__name__}; {example}"
        )
    if "\x00" in text or "\\u0000" in text:
        raise BadFilter("args", "args must not contain NUL characters")
    return value


def parse_filters(args: Any) -> Filters:
    """The job list's filters from a query string, or `BadFilter` naming the field."""
    queue = args.get("queue") or None
    if queue is not None:
        try:
            check_queue_name(queue)
        except InvalidInsertOpts as exc:
            raise BadFilter("queue", str(exc)) from None
    kind = args.get("kind") or None
    if kind is not None:
        try:
            _check_name(kind, "kind", MAX_KIND_LENGTH)
        except (TypeError, ValueError) as exc:
            raise BadFilter("kind", str(exc)) from None
    state = args.get("state") or "dead"
    if state not in STATES:
        raise BadFilter("state", f"unknown state {state!r}; use one of: {', '.join(STATES)}")
    raw_limit = args.get("limit") or "100"
    if not (raw_limit.isascii() and raw_limit.isdigit()) or not 1 <= int(raw_limit) <= MAX_LIMIT:
        raise BadFilter("limit", f"limit must be a whole number from 1 to {MAX_LIMIT}")
    raw_before = args.get("before") or None
    before = None if raw_before is None else positive_id(raw_before, "before")
    raw_args = (args.get("args") or "").strip() or None
    args_value = None if raw_args is None else parse_args_filter(raw_args)
    raw_tags = [t.strip() for t in (args.get("tags") or "").split(",") if t.strip()]
    try:
        tags = check_tags(raw_tags, "tags")
    except (TypeError, ValueError) as exc:
        raise BadFilter("tags", str(exc)) from None
    return Filters(queue, kind, state, int(raw_limit), before, raw_args, args_value, tags)


FLASHES = {
    "retried": "Retried job {job}: it is available again.",
    "cancelled": "Cancelled job {job}.",
    "cancel_requested": "Job {job} is running: its worker was asked to cancel it, and it ends "
    "cancelled when its attempt ends.",
    "not_found": "Job {job} does not exist.",
    "refused": "Job {job} is {state}; that action does not apply.",
    "duplicate": "Job {job} was not retried: another job holds its unique key.",
    "paused": "Paused queue {queue}.",
    "resumed": "Resumed queue {queue}.",
    "not_paused": "Queue {queue} was not paused.",
    "retried_dead": "Retried {count} dead job(s) of kind {kind}.",
    "bulk_retried": "Retried {count} of {selected} selected job(s).",
    "bulk_cancelled": "Cancelled {count} of {selected} selected job(s).",
    "none_selected": "No job was selected.",
    **LIMIT_FLASHES,
}
FLASH_ERRORS = {"not_found", "refused", "duplicate", "none_selected", *LIMIT_FLASH_ERRORS}
FLASH_KEYS = {"flash", "job", "state_was", "queue_name", "count", "kind_name", "selected", "limit"}


def flash_text(args: Any) -> str | None:
    """The message a redirect asked for, or None for an unknown or malformed one."""
    template = FLASHES.get(args.get("flash", ""))
    if template is None:
        return None
    values = {
        "job": args.get("job", ""),
        "state": args.get("state_was", ""),
        "queue": args.get("queue_name", ""),
        "count": args.get("count", ""),
        "kind": args.get("kind_name", ""),
        "selected": args.get("selected", ""),
        "limit": args.get("limit", ""),
    }
    if "{job}" in template and not (values["job"].isascii() and values["job"].isdigit()):
        return None
    if "{state}" in template and values["state"] not in {s.value for s in JobState}:
        return None
    if "{limit}" in template and not valid_key_text(values["limit"]):
        return None
    for number in ("count", "selected"):
        if "{" + number + "}" in template and not (
            values[number].isascii() and values[number].isdigit()
        ):
            return None
    return template.format(**values)  # the template escapes it when rendering
