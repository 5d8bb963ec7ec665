"""The ``drover queues`` commands: list queues, pause and resume one.

Separate from ``drover.cli.app`` (which builds the typer application and
adds ``queues_app`` to it) so that module stays small.
"""

from __future__ import annotations

import typer

from drover.cli import output as out
from drover.cli.common import check_queue, emit, get_globals, open_inspector

__all__ = ["queues_app"]

queues_app = typer.Typer(
    help="List, pause and resume queues.", no_args_is_help=True, rich_markup_mode=None
)


@queues_app.command("list")
def queues_list_command(ctx: typer.Context) -> None:
    """Queues with waiting, running or dead jobs or a pause record, and whether each is paused."""
    g = get_globals(ctx)
    with open_inspector(g) as inspector:
        summaries = inspector.queues()
    human = out.table(
        ["QUEUE", "PAUSED_SINCE", *(s.upper() for s in out.QUEUE_STATES), "OLDEST_AGE_SECONDS"],
        [
            (
                q.name,
                out.timestamp(q.paused_at) or "-",
                *(q.counts[s] for s in out.QUEUE_STATES),
                "-" if q.oldest_age_seconds is None else f"{q.oldest_age_seconds:.3f}",
            )
            for q in summaries
        ],
    )
    emit(g, human, [out.queue_dict(q) for q in summaries])


@queues_app.command("pause")
def queues_pause_command(
    ctx: typer.Context, name: str = typer.Argument(..., metavar="NAME")
) -> None:
    """Stop every worker from claiming from NAME (running jobs finish); idempotent."""
    g = get_globals(ctx)
    check_queue(name, "queue NAME")
    with open_inspector(g) as inspector:
        state = inspector.pause_queue(name)
    emit(
        g,
        f"paused queue {state.name} (since {out.timestamp(state.paused_at)})",
        {"name": state.name, "paused": True, "paused_at": out.timestamp(state.paused_at)},
    )


@queues_app.command("resume")
def queues_resume_command(
    ctx: typer.Context, name: str = typer.Argument(..., metavar="NAME")
) -> None:
    """Let workers claim from NAME again; a queue that is not paused is left as it is."""
    g = get_globals(ctx)
    check_queue(name, "queue NAME")
    with open_inspector(g) as inspector:
        resumed = inspector.resume_queue(name)
    emit(
        g,
        f"resumed queue {name}" if resumed else f"queue {name} was not paused",
        {"name": name, "paused": False, "resumed": resumed},
    )
