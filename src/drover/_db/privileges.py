"""What the connected role may do (``sql/queries/privileges.sql``), asked before it tries.

``Client.start`` asks once whether its role may claim and run jobs and
refuses with ``drover.CannotClaim`` when it may not; the status page asks
once which of its writes the role may make (ADR 0054). Both read
PostgreSQL's privilege functions only.
"""

from __future__ import annotations

from dataclasses import dataclass

from psycopg.rows import tuple_row

from drover._db import Connection
from drover._db.errors import translate
from drover._db.namespace import DEFAULT, Namespace
from drover._db.queries import query

__all__ = ["PageRights", "WorkRights", "page_rights", "work_rights"]


@dataclass(frozen=True, slots=True)
class WorkRights:
    """The connected role and the privileges a started client needs that it lacks."""

    role: str
    missing: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PageRights:
    """Which of the status page's writes the connected role may make."""

    role: str
    jobs: bool
    queues: bool
    limits: bool


def work_rights(conn: Connection, action: str, *, ns: Namespace = DEFAULT) -> WorkRights:
    """The role ``conn`` acts as, and what it lacks to claim and run jobs (none: empty)."""
    with translate(action), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("privileges_to_work", ns))
        row = cur.fetchone()
    assert row is not None
    role, missing = row
    return WorkRights(str(role), tuple(str(m) for m in missing))


def page_rights(conn: Connection, *, ns: Namespace = DEFAULT) -> PageRights:
    """The role ``conn`` acts as, and whether it may retry and cancel, pause, set limits."""
    with translate("read the status page's privileges"), conn.cursor(row_factory=tuple_row) as cur:
        cur.execute(query("privileges_of_page", ns))
        row = cur.fetchone()
    assert row is not None
    role, jobs, queues, limits = row
    return PageRights(str(role), bool(jobs), bool(queues), bool(limits))
