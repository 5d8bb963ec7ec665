"""Rendering for the CLI: aligned tables for people, one JSON document for machines."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from drover.inspector import Stats
from drover.job import PUBLISHED_STATES, JobRow
from drover.periodic import PeriodicInfo
from drover.queues import QueueSummary
from drover.unique import UniqueIdentity

__all__ = [
    "QUEUE_STATES",
    "job_block",
    "job_dict",
    "periodic_dict",
    "queue_dict",
    "stats_dict",
    "table",
    "timestamp",
    "to_json",
]

QUEUE_STATES = tuple(s.value for s in PUBLISHED_STATES)


def timestamp(moment: datetime | None) -> str | None:
    """ISO-8601 in UTC with a ``Z``, or None."""
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def job_dict(row: JobRow) -> dict[str, Any]:
    """A job as stable snake_case keys."""
    return {
        "id": row.id,
        "kind": row.kind,
        "queue": row.queue,
        "state": row.state.value,
        "attempt": row.attempt,
        "max_attempts": row.max_attempts,
        "args": row.args,
        "errors": row.errors,
        "scheduled_at": timestamp(row.scheduled_at),
        "leased_until": timestamp(row.leased_until),
        "created_at": timestamp(row.created_at),
        "finalized_at": timestamp(row.finalized_at),
        "unique_key": row.unique_key,
        "priority": row.priority,
        "progress": row.progress,
        "progress_message": row.progress_message,
        "meta": dict(row.meta),
        "tags": list(row.tags),
    }


def stats_dict(stats: Stats) -> dict[str, Any]:
    return {
        "depths": [{"queue": d.queue, "state": d.state, "count": d.count} for d in stats.depths],
        "oldest": [{"queue": a.queue, "age_seconds": a.age_seconds} for a in stats.oldest],
        "paused": list(stats.paused),
    }


def queue_dict(summary: QueueSummary) -> dict[str, Any]:
    """A queue as stable snake_case keys."""
    return {
        "name": summary.name,
        "paused": summary.paused,
        "paused_at": timestamp(summary.paused_at),
        "counts": dict(summary.counts),
        "oldest_age_seconds": summary.oldest_age_seconds,
    }


def periodic_dict(entry: PeriodicInfo) -> dict[str, Any]:
    """A periodic job as stable snake_case keys."""
    return {
        "id": entry.id,
        "schedule": entry.schedule,
        "timezone": entry.timezone,
        "kind": entry.kind,
        "queue": entry.queue,
        "next_fire": timestamp(entry.next_fire) if entry.current else None,
        "last_fire": timestamp(entry.last_fire),
        "last_job_id": entry.last_job_id,
        "fired_through": timestamp(entry.fired_through),
        "current": entry.current,
        "leader": entry.leader,
    }


def to_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=False)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns padded to their widest cell; an empty table is just its header."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def job_block(row: JobRow, result: Any = None) -> str:
    """A job for people: its fields, its args as indented JSON, its errors with tracebacks,
    and its result (when it has one) as indented JSON."""
    lines = [
        f"id:           {row.id}",
        f"kind:         {row.kind}",
        f"queue:        {row.queue}",
        f"state:        {row.state.value}",
        f"attempt:      {row.attempt}/{row.max_attempts}",
        f"priority:     {row.priority}",
        f"scheduled_at: {timestamp(row.scheduled_at)}",
        f"created_at:   {timestamp(row.created_at)}",
    ]
    if row.leased_until is not None:
        lines.append(f"leased_until: {timestamp(row.leased_until)}")
    if row.finalized_at is not None:
        lines.append(f"finalized_at: {timestamp(row.finalized_at)}")
    if row.unique_key is not None:
        lines.append(f"unique_key:   {row.unique_key}")
    if row.tags:
        lines.append(f"tags:         {', '.join(row.tags)}")
    if row.progress is not None:
        said = f" ({row.progress_message})" if row.progress_message else ""
        lines.append(f"progress:     {row.progress:.0%}{said}")
    if row.meta:
        lines.append("meta:")
        shown_meta = json.dumps(row.meta, ensure_ascii=False, indent=2)
        lines.extend("  " + line for line in shown_meta.splitlines())
    args = json.dumps(row.args, ensure_ascii=False, indent=2)
    lines.append("args:")
    lines.extend("  " + line for line in args.splitlines())
    if row.errors:
        lines.append(f"errors ({len(row.errors)}):")
        for entry in row.errors:
            lines.append(
                f"  attempt {entry.get('attempt')} at {entry.get('at')}: {entry.get('error')}"
            )
            trace = entry.get("trace")
            if trace:
                lines.extend("    " + line for line in str(trace).splitlines())
    if result is not None:
        lines.append("result:")
        shown = json.dumps(result, ensure_ascii=False, indent=2)
        lines.extend("  " + line for line in shown.splitlines())
    return "\n".join(lines)


def ledger_lines(row: JobRow) -> str:
    """``drover jobs get``'s lines for a job's duplicate ledger (none: nothing; ADR 0037)."""
    if not row.ledger:
        return ""
    lines = [f"\nledger ({len(row.ledger)}):"]
    for entry in row.ledger:
        lines.append(f"  {timestamp(entry.at)}  {entry.describe()}")
    return "\n".join(lines)


def cancel_request_lines(row: JobRow) -> str:
    """``drover jobs get``'s line for a pending or past cancel request (none: nothing)."""
    request = row.cancel_request
    return "" if request is None else f"\n{request.describe()}"


def ledger_list(row: JobRow) -> list[dict[str, Any]]:
    """A job's duplicate ledger for ``--json``: one dict per entry, oldest first."""
    return [entry.as_dict() for entry in row.ledger]


def identity_lines(identity: UniqueIdentity | None) -> str:
    """``drover jobs get``'s lines for a job's unique identity (none: nothing)."""
    if identity is None:
        return ""
    held = ", ".join(identity.states) or "none (handed on)"
    return (
        f"\nunique:       {identity.hash[:16]}... bucket {identity.bucket}, "
        f"{'held' if identity.held else 'not held'}; held in: {held}"
    )


def identity_dict(identity: UniqueIdentity | None) -> dict[str, Any]:
    """``drover jobs get --json``'s ``unique`` key (absent for a job without one)."""
    if identity is None:
        return {}
    return {
        "unique": {
            "hash": identity.hash,
            "bucket": identity.bucket,
            "states": list(identity.states),
            "held": identity.held,
        }
    }
