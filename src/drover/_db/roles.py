"""The SQL for drover's three least-privilege roles, filled in from ``sql/roles.sql``.

drover never runs this SQL itself: ``drover roles`` prints it for the owner of
drover's tables to review and apply. Names are checked, not quoted: a role or
schema name must be lowercase letters, digits and ``_`` (at most 63 bytes, not
starting with a digit), so the text PostgreSQL receives is exactly what was
printed.
"""

from __future__ import annotations

import re

from drover._db.namespace import check_identifier, check_schema_name
from drover._db.queries import sql_root
from drover.errors import InvalidArgument

__all__ = ["DEFAULT_PRODUCER", "DEFAULT_READER", "DEFAULT_WORKER", "render_roles"]

DEFAULT_PRODUCER = "drover_producer"
"""The producer role's name unless another is given."""
DEFAULT_WORKER = "drover_worker"
"""The worker role's name unless another is given."""
DEFAULT_READER = "drover_reader"
"""The reader role's name unless another is given."""

_PLACEHOLDER = re.compile(r"\{\{(producer|worker|reader|schema)\}\}")
_RETENTION_MARK = "-- retention"
_STATS_MARK = "-- stats"


def render_roles(
    *,
    producer: str = DEFAULT_PRODUCER,
    worker: str = DEFAULT_WORKER,
    reader: str = DEFAULT_READER,
    schema: str = "public",
    retention: bool = True,
    read_all_stats: bool = True,
) -> str:
    """The idempotent SQL creating and granting the three roles.

    ``retention`` keeps the worker's ``DELETE`` on ``drover_jobs`` (retention
    runs in the workers, the default); without it the worker may not delete
    and retention must run as another role. ``read_all_stats`` grants
    ``pg_read_all_stats`` to the worker and reader roles, so the queue doctor
    sees other roles' sessions (ADR 0054); the grant needs a superuser and
    only warns without one. Raises ``drover.InvalidArgument``
    naming the bad value when a name is not plain, or two roles share a name.
    """
    names = {
        "producer": check_identifier("--producer", producer),
        "worker": check_identifier("--worker", worker),
        "reader": check_identifier("--reader", reader),
        # The one schema-name rule of Config.schema and drover.migrate (ADR 0043).
        "schema": check_schema_name("--schema", schema),
    }
    if len({producer, worker, reader}) != 3:
        raise InvalidArgument(
            f"the three roles need three names, got producer={producer!r}, "
            f"worker={worker!r}, reader={reader!r}"
        )
    template = (sql_root() / "roles.sql").read_text(encoding="utf-8")
    lines: list[str] = []
    for line in template.splitlines():
        if line.startswith("--!"):
            continue
        kept = True
        for mark, wanted in ((_RETENTION_MARK, retention), (_STATS_MARK, read_all_stats)):
            if line.endswith(mark):
                kept = wanted
                line = line.removesuffix(mark).rstrip()
        if not kept:
            continue
        lines.append(_PLACEHOLDER.sub(lambda m: names[m.group(1)], line))
    return "\n".join(lines).rstrip() + "\n"
