"""The ``drover periodic`` commands: the periodic jobs, their next fires and their leader.

Separate from ``drover.cli.app`` (which builds the typer application and
adds ``periodic_app`` to it) so that module stays small.
"""

from __future__ import annotations

import typer

from drover.cli import output as out
from drover.cli.common import emit, get_globals, open_inspector

__all__ = ["periodic_app"]

periodic_app = typer.Typer(help="Periodic jobs.", no_args_is_help=True, rich_markup_mode=None)


@periodic_app.command("list")
def periodic_list_command(ctx: typer.Context) -> None:
    """Periodic jobs: schedule, zone, next and last fire, and which client leads."""
    g = get_globals(ctx)
    with open_inspector(g) as inspector:
        entries = inspector.periodic()
        leader = next((e.leader for e in entries if e.leader), None)
    # Without a leader nothing fires, and there is no leader's config to be missing from.
    human = out.table(
        ["ID", "SCHEDULE", "TIMEZONE", "KIND", "NEXT_FIRE", "LAST_FIRE", "LAST_JOB"],
        [
            (
                e.id + ("" if e.current or leader is None else " (not in the leader's config)"),
                e.schedule,
                e.timezone,
                e.kind,
                out.timestamp(e.next_fire) if e.current else "-",
                out.timestamp(e.last_fire) or "-",
                e.last_job_id if e.last_job_id is not None else "-",
            )
            for e in entries
        ],
    )
    if leader is not None:
        human += f"\n\nleader: {leader}"
    elif entries:
        human += (
            "\n\nleader: none: no client with periodic jobs is running, "
            "so none of these fire until one starts"
        )
    else:
        human += "\n\nleader: none: no client with periodic jobs is running"
    emit(g, human, {"leader": leader, "jobs": [out.periodic_dict(e) for e in entries]})
