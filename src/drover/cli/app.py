"""The ``drover`` command line (``python -m drover``): operate a drover database.

This module builds the typer application, its global options and the
argument hoisting, and registers every command; the commands themselves
live beside it (``jobs``, ``queues``, ``periodic``, ``limits``, ``run``...),
except the few short ones kept here (``stats``, ``migrate``, ``version``).

Exit codes: 0 ok, 1 runtime or database failure or a refused operation,
2 usage error. Errors are one line on stderr starting ``drover:``; no output
or log line ever contains the connection password.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import typer

import drover
from drover.cli import output as out
from drover.cli.common import (
    Globals,
    database_error,
    emit,
    fail,
    get_globals,
    open_inspector,
    schema_of,
    url_of,
)
from drover.cli.doctor import doctor_command
from drover.cli.faults import faults_command
from drover.cli.jobs import cancel_command, enqueue_command, jobs_app, retry_command
from drover.cli.limits import limits_app
from drover.cli.periodic import periodic_app
from drover.cli.queues import queues_app
from drover.cli.roles import roles_command
from drover.cli.run import bench_command, demo_command, worker_command
from drover.cli.web import web_command
from drover.cli.workers import workers_command
from drover.cli.workflow import workflow_app

__all__ = ["app", "main"]

app = typer.Typer(
    name="drover",
    help="drover: a PostgreSQL-backed job queue. Operator commands.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app.add_typer(jobs_app, name="jobs")
app.add_typer(queues_app, name="queues")
app.add_typer(periodic_app, name="periodic")
app.add_typer(limits_app, name="limits")
app.add_typer(workflow_app, name="workflow")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(drover.__version__)
        raise typer.Exit(0)


@app.callback()
def _root(
    ctx: typer.Context,
    database: str | None = typer.Option(
        None,
        "--database",
        "-d",
        help="PostgreSQL URL (else DROVER_DATABASE_URL, else DATABASE_URL).",
        show_default=False,
    ),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON document."),
    schema: str | None = typer.Option(
        None,
        "--schema",
        help="PostgreSQL schema of the drover installation (else DROVER_SCHEMA, else the "
        "default: public).",
        show_default=False,
    ),
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print the drover version and exit.",
    ),
) -> None:
    """drover: a PostgreSQL-backed job queue."""
    ctx.obj = Globals(database=database, json=json_output, schema=schema)


# --- stats and jobs (the job commands: drover.cli.jobs) ---------------------------------------


@app.command("stats")
def stats_command(ctx: typer.Context) -> None:
    """Depth per queue and state, and the oldest claimable job's age per queue."""
    g = get_globals(ctx)
    with open_inspector(g) as inspector:
        stats = inspector.stats()
    if stats.depths:
        human = out.table(
            ["QUEUE", "STATE", "COUNT"], [(d.queue, d.state, d.count) for d in stats.depths]
        )
    else:
        human = "no job waits or runs in any queue"
    if stats.oldest:
        human += "\n\n" + out.table(
            ["QUEUE", "OLDEST_AGE_SECONDS"],
            [(a.queue, f"{a.age_seconds:.3f}") for a in stats.oldest],
        )
    if stats.paused:
        human += "\n\npaused queues: " + ", ".join(stats.paused)
    emit(g, human, out.stats_dict(stats))


# The job commands live in drover.cli.jobs; registered here so --help lists them in this order.
app.command("retry")(retry_command)
app.command("cancel")(cancel_command)
app.command("enqueue")(enqueue_command)


# --- schema ------------------------------------------------------------------------------------


@app.command("migrate")
def migrate_command(
    ctx: typer.Context,
    status: bool = typer.Option(False, "--status", help="Show migrations; change nothing."),
) -> None:
    """Apply drover's pending migrations (the only command that changes the schema)."""
    g = get_globals(ctx)
    url = url_of(g)
    schema = schema_of(g)
    try:
        if status:
            current = drover.migration_status(url, schema=schema)
            rows = [
                (m.version, m.name, "applied", out.timestamp(m.applied_at)) for m in current.applied
            ]
            rows += [(m.version, m.name, "pending", "") for m in current.pending]
            emit(
                g,
                out.table(["VERSION", "NAME", "STATUS", "APPLIED_AT"], rows),
                {
                    "current_version": current.current_version,
                    "applied": [
                        {
                            "version": m.version,
                            "name": m.name,
                            "applied_at": out.timestamp(m.applied_at),
                        }
                        for m in current.applied
                    ],
                    "pending": [{"version": m.version, "name": m.name} for m in current.pending],
                },
            )
            return
        applied = drover.migrate(url, schema=schema)
    except drover.MigrationError as exc:
        fail(str(exc))
    except drover.DatabaseError as exc:
        database_error(url, exc)
    human = "\n".join(f"applied {m.label}" for m in applied) if applied else "schema is up to date"
    emit(g, human, {"applied": [{"version": m.version, "name": m.name} for m in applied]})


# --- running ------------------------------------------------------------------------------------


app.command("worker")(worker_command)
app.command("demo")(demo_command)
app.command("bench")(bench_command)
app.command("web")(web_command)
app.command("workers")(workers_command)
app.command("doctor")(doctor_command)
app.command("faults")(faults_command)
app.command("roles")(roles_command)


@app.command("version")
def version_command() -> None:
    """Print the drover version."""
    typer.echo(drover.__version__)


# Options that take a value: their value is never mistaken for a global flag.
_VALUE_OPTIONS = {
    "--queue",
    "--state",
    "--limit",
    "--kind",
    "--args",
    "--at",
    "--concurrency",
    "--rate",
    "--per",
    "--queues",
    "--ops-addr",
    "--shutdown-timeout",
    "--jobs",
    "--mode",
    "--batch",
    "--max-attempts",
    "--app",
    "--listen",
    "--refresh",
    "--processes",
    "--max-jobs-per-child",
    "--max-memory-per-child",
    "--log-level",
    "--log-format",
    "--xmin-age",
    "--lease-grace",
    "--unserved-grace",
    "--dead-tuples-min",
    "--dead-tuples-ratio",
}


def hoist_globals(argv: Sequence[str]) -> list[str]:
    """Move ``--database``/``-d``/``--schema``/``--json`` found anywhere before ``--``
    to the front.

    typer only reads a group's options before the subcommand; operators type
    ``drover stats --json`` as often as ``drover --json stats``. ``drover roles
    --schema x`` thus reaches the root option too, and roles reads it there.
    """
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest.extend(argv[i:])
            break
        if arg in _VALUE_OPTIONS and i + 1 < len(argv):
            rest.extend(argv[i : i + 2])
            i += 2
            continue
        if arg == "--json":
            front.append(arg)
        elif arg in ("--database", "-d", "--schema"):
            front.extend(argv[i : i + 2])
            i += 1
        elif arg.startswith(("--database=", "--schema=")):
            front.append(arg)
        else:
            rest.append(arg)
        i += 1
    return front + rest


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``drover`` console script and ``python -m drover``."""
    args = list(sys.argv[1:] if argv is None else argv)
    app(args=hoist_globals(args), prog_name="drover")
