"""Job results: the awaited flag and the read behind ``Client.result`` (``results.sql``)."""

from __future__ import annotations

from typing import Any, NamedTuple

from drover._db import Connection
from drover._db.namespace import DEFAULT, Namespace
from drover._db.plans import ONE, Execute, Plan, run
from drover._db.queries import query
from drover._db.rows import decode_json

__all__ = ["StoredResult", "job_mark_awaited", "job_result", "mark_awaited_plan", "result_plan"]


class StoredResult(NamedTuple):
    """A job's state, its result (parsed JSON, ``None`` for none) and last error message."""

    state: str
    result: Any
    error: str | None


def mark_awaited_plan(job_id: int, *, ns: Namespace = DEFAULT) -> Plan[None]:
    """Flag the job so that the write of its terminal state notifies ``drover_done``."""
    yield Execute(query("job_mark_awaited", ns), {"id": job_id})


def result_plan(job_id: int, *, ns: Namespace = DEFAULT) -> Plan[StoredResult | None]:
    """The job's state, result and last error; ``None`` when there is no such job."""
    row = yield Execute(query("job_result", ns), {"id": job_id}, ONE)
    if row is None:
        return None
    state, text, error = row
    return StoredResult(str(state), None if text is None else decode_json(text), error)


def job_mark_awaited(conn: Connection, job_id: int, *, ns: Namespace = DEFAULT) -> None:
    """``mark_awaited_plan`` on ``conn``."""
    run(conn, mark_awaited_plan(job_id, ns=ns), f"wait for job {job_id}")


def job_result(conn: Connection, job_id: int, *, ns: Namespace = DEFAULT) -> StoredResult | None:
    """``result_plan`` on ``conn``."""
    return run(conn, result_plan(job_id, ns=ns), f"read the result of job {job_id}")
