"""Progress and metadata writes: the Python side of ``sql/queries/progress.sql`` (ADR 0032)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import NamedTuple

from psycopg.rows import tuple_row

from drover._db import Connection
from drover._db.errors import translate
from drover._db.namespace import DEFAULT, Namespace
from drover._db.queries import query

__all__ = ["ProgressReport", "job_report_progress"]


class ProgressReport(NamedTuple):
    """One execution's changed report: its fence, the progress (if changed) and a metadata patch."""

    id: int
    attempt: int
    progress: tuple[float, str | None] | None
    """``(fraction, message)``, or ``None`` to leave the stored progress as it is."""
    patch: str | None
    """A JSON object to merge into ``meta``, or ``None``."""


_quote: Callable[[str], str] = json.encoder.encode_basestring_ascii


def _text(message: str) -> str:
    try:
        message.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate would make jsonb refuse the whole round's document.
        message = message.encode("utf-8", "replace").decode("utf-8")
    return _quote(message)


def _entry(report: ProgressReport) -> str:
    progress = report.progress
    if progress is None:
        shown = "false,null,null"
    else:
        fraction, message = progress
        shown = f"true,{fraction!r},{'null' if message is None else _text(message)}"
    patch = "null" if report.patch is None else report.patch
    return f"[{report.id},{report.attempt},{shown},{patch}]"


def job_report_progress(
    conn: Connection, reports: Sequence[ProgressReport], *, ns: Namespace = DEFAULT
) -> set[int]:
    """Write every report in one statement, each fenced on its execution; the ids written.

    The document is formatted here from values already checked (a finite
    fraction, a message, a patch that is a JSON object): one parameter,
    rather than six arrays for psycopg to adapt.
    """
    if not reports:
        return set()
    document = ",".join(_entry(r) for r in reports)
    with (
        translate(f"report the progress of {len(reports)} job(s)"),
        conn.cursor(row_factory=tuple_row) as cur,
    ):
        cur.execute(query("job_report_progress", ns), (f"[{document}]",))
        return {id_ for (id_,) in cur.fetchall()}
