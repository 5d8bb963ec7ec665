"""Operator statements on jobs: read one, list, cancel, retry and redrive (``inspect.sql``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import LiteralString

from psycopg import errors as pgerrors
from psycopg.rows import tuple_row

from drover._db import Connection
from drover._db.errors import translate
from drover._db.namespace import DEFAULT, Namespace
from drover._db.queries import query
from drover._db.rows import row_from_db
from drover.errors import DatabaseError, DuplicateJob, InvalidTransition, NotFound
from drover.job import CANCELLABLE_STATES, RETRIABLE_STATES, JobRow, JobState

__all__ = [
    "CANCEL",
    "RETRY",
    "OperatorAction",
    "job_get",
    "job_lease_holder",
    "job_list",
    "job_operator_transition",
    "job_retry_dead_of_kind",
]


@dataclass(frozen=True, slots=True)
class OperatorAction:
    """An operator transition: its query, the states it may start from, and how to say so."""

    name: str
    query_name: LiteralString
    allowed: tuple[str, ...]
    wanted: str


CANCEL = OperatorAction(
    "cancel", "job_cancel", tuple(s.value for s in CANCELLABLE_STATES), "cancellable"
)
RETRY = OperatorAction(
    "retry", "job_retry", tuple(s.value for s in RETRIABLE_STATES), "dead or cancelled"
)


def _failed_dependency(
    conn: Connection, job_id: int, *, ns: Namespace = DEFAULT
) -> tuple[int, str] | None:
    with translate(f"read the dependencies of job {job_id}"), conn.cursor() as cur:
        cur.execute(query("job_failed_dependency", ns), {"id": job_id})
        row = cur.fetchone()
    return None if row is None else (int(row[0]), str(row[1]))


def job_get(conn: Connection, job_id: int, *, ns: Namespace = DEFAULT) -> JobRow | None:
    """The job with ``job_id``, or ``None``."""
    with translate(f"get job {job_id}"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("job_get", ns), {"id": job_id})
        row = cur.fetchone()
    return None if row is None else row_from_db(row)


def job_list(
    conn: Connection,
    *,
    queue: str | None,
    state: JobState | None,
    limit: int,
    kind: str | None = None,
    before_id: int | None = None,
    args_json: str | None = None,
    tags: Sequence[str] | None = None,
    ns: Namespace = DEFAULT,
) -> list[JobRow]:
    """Newest first, filtered by queue, state and kind if given, ids below ``before_id``,
    args containing the JSON ``args_json``, every one of ``tags``."""
    with translate("list jobs"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(
            query("job_list", ns),
            {
                "queue": queue,
                "state": None if state is None else state.value,
                "kind": kind,
                "before": before_id,
                "args": args_json,
                "tags": None if not tags else list(tags),
                "limit": limit,
            },
        )
        return [row_from_db(r) for r in cur.fetchall()]


def job_retry_dead_of_kind(
    conn: Connection, kind: str, queue: str | None, *, ns: Namespace = DEFAULT
) -> int:
    """Redrive every dead job of ``kind`` (see the query); return how many."""
    with translate(f"retry dead jobs of kind {kind!r}"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("job_retry_dead_of_kind", ns), {"kind": kind, "queue": queue})
        row = cur.fetchone()
    assert row is not None
    return int(row[0])


def job_count_dead_of_kind(
    conn: Connection, kind: str, queue: str | None, *, ns: Namespace = DEFAULT
) -> int:
    """How many dead jobs of ``kind`` (on ``queue``) there are."""
    with translate(f"count dead jobs of kind {kind!r}"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("job_count_dead_of_kind", ns), {"kind": kind, "queue": queue})
        row = cur.fetchone()
    assert row is not None
    return int(row[0])


def job_lease_holder(
    conn: Connection, job_id: int, *, ns: Namespace = DEFAULT
) -> tuple[bool, str | None]:
    """``(exists, leased_by)`` for ``job_id``."""
    with translate(f"read the lease holder of job {job_id}"), conn.cursor() as cur:
        cur.execute(query("job_lease_holder", ns), {"id": job_id})
        row = cur.fetchone()
    return (False, None) if row is None else (True, row[0])


def job_operator_transition(
    conn: Connection, job_id: int, action: OperatorAction, *, ns: Namespace = DEFAULT
) -> JobRow:
    """Apply ``action`` if the job is in an allowed state; explain a refusal precisely.

    The UPDATE is conditioned on the state, so a worker finishing the job at
    the same moment either happens first (the operator is refused with the
    state it finished in) or after (its fenced write is refused). When the
    re-read shows the job *became* eligible between the two statements, the
    UPDATE is tried once more.
    """
    for attempt in range(2):
        try:
            with (
                translate(f"{action.name} job {job_id}"),
                conn.cursor(row_factory=tuple_row) as cur,
            ):
                cur.execute(query(action.query_name, ns), {"id": job_id})
                row = cur.fetchone()
        except DatabaseError as exc:
            if isinstance(exc.__cause__, pgerrors.UniqueViolation):
                current = job_get(conn, job_id, ns=ns)
                raise DuplicateJob(
                    f"cannot retry job {job_id}: another job of kind "
                    f"{current.kind if current else '?'!r} with the same unique key is already "
                    "waiting or running",
                    queue=current.queue if current else "",
                    kind=current.kind if current else "",
                    unique_key=(current.unique_key or "") if current else "",
                ) from exc
            raise
        if row is not None:
            return row_from_db(row)
        current = job_get(conn, job_id, ns=ns)
        if current is None:
            raise NotFound(f"job {job_id} does not exist")
        if action is RETRY and current.state.value in action.allowed:
            failed = _failed_dependency(conn, job_id, ns=ns)
            if failed is not None:
                dep_id, dep_state = failed
                raise InvalidTransition(
                    f"job {job_id} waits for job {dep_id}, which ended {dep_state}: "
                    f"retry job {dep_id} first",
                    state=current.state,
                )
        if current.state.value in action.allowed and attempt == 0:
            continue
        raise InvalidTransition(
            f"job {job_id} is {current.state.value}, want {action.wanted}",
            state=current.state,
        )
    raise AssertionError("unreachable")  # pragma: no cover
