"""``drover roles``: print the SQL for the producer, worker and reader roles.

It connects to nothing and changes nothing: the owner of drover's tables reads
the SQL and applies it (``drover roles | psql "$OWNER_URL"``). With ``--json``
the SQL is the ``sql`` field, next to the names used.
"""

from __future__ import annotations

import typer

import drover
from drover._db.roles import DEFAULT_PRODUCER, DEFAULT_READER, DEFAULT_WORKER, render_roles
from drover.cli.common import emit, get_globals, schema_of, usage

__all__ = ["roles_command"]


def roles_command(
    ctx: typer.Context,
    producer: str = typer.Option(DEFAULT_PRODUCER, "--producer", help="Role that inserts jobs."),
    worker: str = typer.Option(DEFAULT_WORKER, "--worker", help="Role that runs jobs."),
    reader: str = typer.Option(
        DEFAULT_READER, "--reader", help="Role for `drover stats` and the read-only status page."
    ),
    schema: str | None = typer.Option(
        None,
        "--schema",
        help="Schema holding drover's tables (else drover's --schema, else DROVER_SCHEMA, "
        "else public).",
        show_default=False,
    ),
    retention: bool = typer.Option(
        True,
        "--retention/--no-retention",
        help="Let the worker role DELETE old jobs (retention runs in the workers).",
    ),
    read_all_stats: bool = typer.Option(
        True,
        "--read-all-stats/--no-read-all-stats",
        help="Grant pg_read_all_stats to the worker and reader roles, so the queue doctor "
        "sees other roles' sessions (needs a superuser; warns without one).",
    ),
) -> None:
    """Print idempotent SQL creating least-privilege producer, worker and reader roles."""
    g = get_globals(ctx)
    if schema is None:
        # The same installation every other command works on (`drover --schema`).
        schema = schema_of(g) or "public"
    try:
        text = render_roles(
            producer=producer,
            worker=worker,
            reader=reader,
            schema=schema,
            retention=retention,
            read_all_stats=read_all_stats,
        )
    except drover.InvalidArgument as exc:
        usage(str(exc))
    emit(
        g,
        text.rstrip("\n"),
        {
            "producer": producer,
            "worker": worker,
            "reader": reader,
            "schema": schema,
            "retention": retention,
            "read_all_stats": read_all_stats,
            "sql": text,
        },
    )
