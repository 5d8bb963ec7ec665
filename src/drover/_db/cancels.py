"""An operator's cancel of one job, running or not, and the requests a worker reads
(``cancel.sql``, ADR 0030)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from psycopg.rows import tuple_row

from drover._db import Connection
from drover._db.admin import job_get
from drover._db.errors import translate
from drover._db.namespace import DEFAULT, Namespace
from drover._db.queries import query
from drover._db.rows import JOB_COLUMNS, row_from_db
from drover.errors import InvalidTransition, NotFound
from drover.job import CANCELLABLE_STATES, JobRow, JobState

__all__ = ["job_cancel_or_request", "job_cancel_requests"]

_OPEN = frozenset((*CANCELLABLE_STATES, JobState.RUNNING))


def job_cancel_or_request(
    conn: Connection,
    job_id: int,
    *,
    reason: str | None,
    hard: bool,
    grace: float,
    ns: Namespace = DEFAULT,
) -> tuple[JobRow, bool]:
    """Cancel a pending, waiting or dead job, or ask a running one's owner to cancel it.

    Returns the row and whether it was a request (the job still runs; its
    owner has been notified at commit). A refusal is explained: the job does
    not exist (``NotFound``) or has already finished (``InvalidTransition``).
    When the re-read shows the job moved into a state one branch accepts
    between the two statements, the statement is tried once more.
    """
    params = {"id": job_id, "reason": reason, "hard": hard, "grace": grace}
    for attempt in range(2):
        with translate(f"cancel job {job_id}"), conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(query("job_cancel_or_request", ns), params)
            found = cur.fetchone()
        if found is not None:
            return row_from_db(found), bool(found[len(JOB_COLUMNS)])
        current = job_get(conn, job_id, ns=ns)
        if current is None:
            raise NotFound(f"job {job_id} does not exist")
        if current.state in _OPEN and attempt == 0:
            continue
        raise InvalidTransition(
            f"job {job_id} is {current.state.value}, want running or cancellable",
            state=current.state,
        )
    raise AssertionError("unreachable")  # pragma: no cover


def job_cancel_requests(
    conn: Connection, held: Sequence[tuple[int, int]], *, ns: Namespace = DEFAULT
) -> dict[tuple[int, int], dict[str, Any]]:
    """The operators' requests to cancel the ``(id, attempt)`` claims that have one, by claim.

    The fallback for a client that missed the notification (it does not
    listen, or a transaction pooler is in the way): one statement, no row
    for a claim without a request. A request is ``{"reason", "hard",
    "grace", "requested_at"}`` as ``job_cancel_or_request`` wrote it.
    """
    if not held:
        return {}
    with (
        translate(f"read cancel requests of {len(held)} jobs"),
        conn.cursor(row_factory=tuple_row) as cur,
    ):
        cur.execute(
            query("job_cancel_requests", ns),
            {"ids": [h[0] for h in held], "attempts": [h[1] for h in held]},
        )
        return {(id_, attempt): json.loads(text) for id_, attempt, text in cur.fetchall()}
