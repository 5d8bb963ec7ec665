"""The ``drover`` command line (``python -m drover``): operate a drover database.

Exit codes: 0 ok, 1 runtime or database failure or a refused operation,
2 usage error. Errors are one line on stderr starting ``drover:``; no output
or log line ever contains the connection password.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Annotated

import typer

import drover
from drover.cli import output as out
from drover.cli.common import (
    Globals,
    database_error,
    emit,
    fail,
    get_globals,
    load_workers,
    open_inspector,
    parse_job_id,
    schema_of,
    url_of,
    usage,
)
from drover.cli.doctor import doctor_command
from drover.cli.faults import faults_command
from drover.cli.limits import limits_app
from drover.cli.roles import roles_command
from drover.cli.run import bench_command, demo_command, worker_command
from drover.cli.web import web_command
from drover.cli.workers import workers_command
from drover.cli.workflow import workflow_app
from drover.job import MAX_PRIORITY, MIN_PRIORITY
from drover.progress import check_tags
from drover.queues import check_queue_name

__all__ = ["app", "main"]

app = typer.Typer(
    name="drover",
    help="drover: a PostgreSQL-backed job queue. Operator commands.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
jobs_app = typer.Typer(help="List and show jobs.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(jobs_app, name="jobs")
queues_app = typer.Typer(
    help="List, pause and resume queues.", no_args_is_help=True, rich_markup_mode=None
)
app.add_typer(queues_app, name="queues")
periodic_app = typer.Typer(help="Periodic jobs.", no_args_is_help=True, rich_markup_mode=None)
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


# --- stats and jobs ---------------------------------------------------------------------------


@app.command("stats")
def stats_command(ctx: typer.Context) -> None:
    """Depth per queue and state, and the oldest claimable job's age per queue."""
    g = get_globals(ctx)
    with open_inspector(g) as inspector:
        stats = inspector.stats()
    human = out.table(
        ["QUEUE", "STATE", "COUNT"], [(d.queue, d.state, d.count) for d in stats.depths]
    )
    human += "\n\n" + out.table(
        ["QUEUE", "OLDEST_AGE_SECONDS"], [(a.queue, f"{a.age_seconds:.3f}") for a in stats.oldest]
    )
    if stats.paused:
        human += "\n\npaused queues: " + ", ".join(stats.paused)
    emit(g, human, out.stats_dict(stats))


@jobs_app.command("list")
def jobs_list_command(
    ctx: typer.Context,
    queue: str | None = typer.Option(None, "--queue", help="Only this queue."),
    state: str | None = typer.Option(None, "--state", help="Only this state."),
    kind: str | None = typer.Option(None, "--kind", help="Only this kind."),
    args_contain: str | None = typer.Option(
        None,
        "--args",
        help='Only jobs whose args contain this JSON object, e.g. \'{"to": "ada@example.com"}\'.',
    ),
    limit: int = typer.Option(100, "--limit", help="At most this many (1..1000)."),
    tag: Annotated[
        list[str] | None,
        typer.Option(
            "--tag",
            help="Only jobs carrying this tag; repeat it (or give a,b) for jobs carrying all.",
        ),
    ] = None,
) -> None:
    """Jobs, newest first."""
    g = get_globals(ctx)
    if not 1 <= limit <= 1000:
        usage(f"--limit must be between 1 and 1000, not {limit}")
    if kind is not None and not kind.strip():
        usage("--kind must not be empty")
    contained: dict[str, object] | None = None
    if args_contain is not None:
        try:
            contained = json.loads(args_contain)
        except ValueError as exc:
            usage(f"--args is not valid JSON ({exc})")
        if not isinstance(contained, dict):
            usage(f"--args must be a JSON object, not {type(contained).__name__}")
    if state is not None and state not in {s.value for s in drover.JobState}:
        known = ", ".join(s.value for s in drover.JobState)
        usage(f"unknown --state {state!r}; use one of: {known}")
    if queue is not None:
        _check_queue(queue)
    tags = _tags_option(tag)
    with open_inspector(g) as inspector:
        rows = inspector.list_jobs(
            queue=queue, state=state, limit=limit, kind=kind, args_contain=contained, tags=tags
        )
    human = out.table(
        ["ID", "KIND", "QUEUE", "STATE", "ATTEMPT", "SCHEDULED_AT", "CREATED_AT"],
        [
            (
                r.id,
                r.kind,
                r.queue,
                r.state.value,
                f"{r.attempt}/{r.max_attempts}",
                out.timestamp(r.scheduled_at),
                out.timestamp(r.created_at),
            )
            for r in rows
        ],
    )
    if any(r.tags for r in rows):
        human = out.table(
            ["ID", "KIND", "QUEUE", "STATE", "ATTEMPT", "SCHEDULED_AT", "CREATED_AT", "TAGS"],
            [
                (
                    r.id,
                    r.kind,
                    r.queue,
                    r.state.value,
                    f"{r.attempt}/{r.max_attempts}",
                    out.timestamp(r.scheduled_at),
                    out.timestamp(r.created_at),
                    ",".join(r.tags) or "-",
                )
                for r in rows
            ],
        )
    emit(g, human, [out.job_dict(r) for r in rows])


def _tags_option(given: list[str] | None) -> list[str] | None:
    """``--tag`` values, each possibly ``a,b``, as one list of tags; a usage error if bad."""
    if not given:
        return None
    tags = [t.strip() for value in given for t in value.split(",") if t.strip()]
    try:
        check_tags(tags, "--tag")
    except (TypeError, ValueError) as exc:
        usage(str(exc))
    return tags


@jobs_app.command("get")
def jobs_get_command(ctx: typer.Context, job_id: str = typer.Argument(..., metavar="ID")) -> None:
    """One job, with its args, its errors (tracebacks as text), its result and its duplicate
    ledger (every re-run and refused stale write)."""
    g = get_globals(ctx)
    checked = parse_job_id(job_id)
    with open_inspector(g) as inspector:
        try:
            row = inspector.get_job(checked)
            completed = row.state is drover.JobState.COMPLETED
            result = inspector.get_result(checked) if completed else None
            identity = inspector.unique_identity(checked)
        except drover.NotFound as exc:
            fail(str(exc))
    emit(
        g,
        out.job_block(row, result) + out.identity_lines(identity) + out.ledger_lines(row),
        {
            **out.job_dict(row),
            "result": result,
            **out.identity_dict(identity),
            "ledger": out.ledger_list(row),
        },
    )


@app.command("retry")
def retry_command(ctx: typer.Context, job_id: str = typer.Argument(..., metavar="ID")) -> None:
    """Send a dead job back to the queue with a fresh set of attempts."""
    g = get_globals(ctx)
    checked = parse_job_id(job_id)
    with open_inspector(g) as inspector:
        try:
            row = inspector.retry_job(checked)
        except (drover.NotFound, drover.InvalidTransition, drover.DuplicateJob) as exc:
            fail(f"cannot retry job {checked}: {exc}")
    emit(g, f"retried job {row.id}: now {row.state.value}\n{out.job_block(row)}", out.job_dict(row))


@app.command("cancel")
def cancel_command(
    ctx: typer.Context,
    job_id: str = typer.Argument(..., metavar="ID"),
    reason: str | None = typer.Option(
        None, "--reason", metavar="TEXT", help="Why; recorded on a running job's errors."
    ),
    hard: bool = typer.Option(
        False,
        "--hard",
        help="Running under --processes N: replace the worker process if the handler "
        "has not returned after the grace.",
    ),
    grace: float = typer.Option(
        10.0, "--grace", min=0, metavar="SECONDS", help="How long --hard waits for the handler."
    ),
) -> None:
    """Cancel a job: a waiting or dead one at once, a running one through its worker."""
    g = get_globals(ctx)
    checked = parse_job_id(job_id)
    with open_inspector(g) as inspector:
        try:
            row = inspector.cancel_job(checked, reason=reason, hard=hard, grace=grace)
        except drover.InvalidArgument as exc:
            usage(str(exc))
        except (drover.NotFound, drover.InvalidTransition) as exc:
            fail(f"cannot cancel job {checked}: {exc}")
    requested = row.state is drover.JobState.RUNNING
    text = (
        f"asked the worker running job {row.id} to cancel it"
        f"{' (hard)' if hard else ''}: it ends cancelled when its attempt ends\n"
        if requested
        else f"cancelled job {row.id}\n"
    )
    emit(g, text + out.job_block(row), out.job_dict(row))


def _check_queue(queue: str, what: str = "--queue") -> None:
    try:
        check_queue_name(queue)
    except drover.InvalidInsertOpts as exc:
        usage(str(exc).replace("queue name", what))


# --- queues ------------------------------------------------------------------------------------


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
    _check_queue(name, "queue NAME")
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
    _check_queue(name, "queue NAME")
    with open_inspector(g) as inspector:
        resumed = inspector.resume_queue(name)
    emit(
        g,
        f"resumed queue {name}" if resumed else f"queue {name} was not paused",
        {"name": name, "paused": False, "resumed": resumed},
    )


@app.command("enqueue")
def enqueue_command(
    ctx: typer.Context,
    kind: str = typer.Option(..., "--kind", help="The job kind (selects the worker)."),
    queue: str | None = typer.Option(
        None, "--queue", help="The queue (default: the kind's class default, else 'default')."
    ),
    args: str = typer.Option("{}", "--args", help="The job's args as JSON."),
    at: str | None = typer.Option(
        None, "--at", help="Run no earlier than this ISO-8601 time (with a time zone)."
    ),
    max_attempts: int | None = typer.Option(
        None, "--max-attempts", min=1, max=2**31 - 1, help="Executions before the job is dead."
    ),
    priority: int | None = typer.Option(
        None,
        "--priority",
        help=f"From {MIN_PRIORITY} to {MAX_PRIORITY}, higher claimed first "
        "(default: the kind's class default, else 0).",
    ),
    app_spec: str | None = typer.Option(
        None,
        "--app",
        help="module:attribute of your Client or Workers: known kinds get their args "
        "validated and their class's queue, max_attempts and priority defaults.",
    ),
    tag: Annotated[
        list[str] | None,
        typer.Option("--tag", help="A tag for the job; repeat it (or give a,b) for several."),
    ] = None,
    meta: str | None = typer.Option(
        None, "--meta", help='Metadata for the job as a JSON object, e.g. \'{"owner": "ops"}\'.'
    ),
) -> None:
    """Insert a job by kind with JSON args."""
    g = get_globals(ctx)
    if queue is not None:
        _check_queue(queue)
    scheduled_at = None
    if at is not None:
        try:
            scheduled_at = datetime.fromisoformat(at.replace("Z", "+00:00"))
        except ValueError:
            usage(f"--at {at!r} is not an ISO-8601 time")
        if scheduled_at.utcoffset() is None:
            usage(f"--at {at!r} needs a time zone, e.g. {at}Z or {at}+02:00")
    try:
        # Validate before touching the database: a usage error writes nothing.
        drover.Inspector.validate_enqueue(kind, args)
    except drover.InvalidJobArgs as exc:
        usage(str(exc))
    workers = load_workers(app_spec) if app_spec is not None else None
    if workers is not None and kind not in workers:
        known = ", ".join(workers.kinds()) or "none"
        usage(f"--app {app_spec} has no worker for kind {kind!r} (it knows: {known})")
    tags = _tags_option(tag) or ()
    meta_value: dict[str, object] | None = None
    if meta is not None:
        try:
            meta_value = json.loads(meta)
        except ValueError as exc:
            usage(f"--meta is not valid JSON ({exc})")
        if not isinstance(meta_value, dict):
            usage(f"--meta must be a JSON object, not {type(meta_value).__name__}")
    try:
        opts = drover.InsertOpts(
            queue=queue,
            scheduled_at=scheduled_at,
            max_attempts=max_attempts,
            priority=priority,
            tags=tags,
            meta=meta_value,
        )
    except drover.InvalidInsertOpts as exc:
        flag = "--at" if "scheduled_at" in str(exc) else "--max-attempts"
        if "priority" in str(exc):
            flag = "--priority"
        if "InsertOpts.meta" in str(exc):
            flag = "--meta"
        usage(f"{flag}: {exc}")
    with open_inspector(g, workers) as inspector:
        try:
            row = inspector.enqueue(kind, args, opts)
        except drover.InvalidJobArgs as exc:
            usage(str(exc))
    emit(
        g,
        f"enqueued job {row.id} (kind {row.kind}, queue {row.queue}, {row.state.value})",
        out.job_dict(row),
    )


# --- periodic -----------------------------------------------------------------------------------


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
