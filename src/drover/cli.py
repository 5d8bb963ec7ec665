"""The ``drover`` command line (``python -m drover``): operate a drover database.

Exit codes: 0 ok, 1 runtime or database failure or a refused operation,
2 usage error. Errors are one line on stderr starting ``drover:``; no output
or log line ever contains the connection password.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NoReturn

import typer

import drover
from drover import _cli_output as out
from drover._db.connections import check_conninfo, describe_target
from drover._db.errors import redact

__all__ = ["app", "main"]

MAX_ID = 2**63 - 1

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


@dataclass
class _Globals:
    database: str | None
    json: bool


def _fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(f"drover: {redact(message)}", err=True)
    raise typer.Exit(code)


def _usage(message: str) -> NoReturn:
    _fail(message, code=2)


def _globals(ctx: typer.Context) -> _Globals:
    root = ctx.find_root()
    value = root.obj
    assert isinstance(value, _Globals)
    return value


def _emit(g: _Globals, human: str, machine: Any) -> None:
    typer.echo(out.to_json(machine) if g.json else human)


def _given_url(g: _Globals) -> str | None:
    """The URL from --database, else the environment; an empty --database is a usage error."""
    if g.database is not None:
        if not g.database.strip():
            _usage("--database requires a value")
        return g.database
    return os.environ.get("DROVER_DATABASE_URL") or os.environ.get("DATABASE_URL") or None


def _url(g: _Globals) -> str:
    url = _given_url(g)
    if not url:
        _usage("no database URL: pass --database URL or set DROVER_DATABASE_URL (or DATABASE_URL)")
    try:
        return check_conninfo(url)
    except ValueError as exc:
        _usage(str(exc))


def _database_error(url: str, exc: drover.DatabaseError) -> NoReturn:
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    _fail(f"cannot use the database at {describe_target(url)}: {first_line}")


@contextmanager
def _inspector(g: _Globals) -> Iterator[drover.Inspector]:
    """Check the database answers and carries drover's current schema, then open an Inspector."""
    url = _url(g)
    try:
        status = drover.migration_status(url)
    except drover.DatabaseError as exc:
        _database_error(url, exc)
    if not status.applied:
        _fail(f"drover's schema is missing from {describe_target(url)}: run `drover migrate` first")
    if status.pending:
        latest = status.pending[-1].version
        _fail(
            f"the database schema is at version {status.current_version} but this drover "
            f"needs {latest}: run `drover migrate`"
        )
    inspector = drover.Inspector(url)
    try:
        yield inspector
    except drover.DatabaseError as exc:
        _database_error(url, exc)
    finally:
        inspector.close()


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
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print the drover version and exit.",
    ),
) -> None:
    """drover: a PostgreSQL-backed job queue."""
    ctx.obj = _Globals(database=database, json=json_output)


# --- stats and jobs ---------------------------------------------------------------------------


@app.command("stats")
def stats_command(ctx: typer.Context) -> None:
    """Depth per queue and state, and the oldest claimable job's age per queue."""
    g = _globals(ctx)
    with _inspector(g) as inspector:
        stats = inspector.stats()
    human = out.table(
        ["QUEUE", "STATE", "COUNT"], [(d.queue, d.state, d.count) for d in stats.depths]
    )
    human += "\n\n" + out.table(
        ["QUEUE", "OLDEST_AGE_SECONDS"], [(a.queue, f"{a.age_seconds:.3f}") for a in stats.oldest]
    )
    if stats.paused:
        human += "\n\npaused queues: " + ", ".join(stats.paused)
    _emit(g, human, out.stats_dict(stats))


@jobs_app.command("list")
def jobs_list_command(
    ctx: typer.Context,
    queue: str | None = typer.Option(None, "--queue", help="Only this queue."),
    state: str | None = typer.Option(None, "--state", help="Only this state."),
    limit: int = typer.Option(100, "--limit", help="At most this many (1..1000)."),
) -> None:
    """Jobs, newest first."""
    g = _globals(ctx)
    if not 1 <= limit <= 1000:
        _usage(f"--limit must be between 1 and 1000, not {limit}")
    if state is not None and state not in {s.value for s in drover.JobState}:
        known = ", ".join(s.value for s in drover.JobState)
        _usage(f"unknown --state {state!r}; use one of: {known}")
    if queue is not None:
        _check_queue(queue)
    with _inspector(g) as inspector:
        rows = inspector.list_jobs(queue=queue, state=state, limit=limit)
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
    _emit(g, human, [out.job_dict(r) for r in rows])


def _parse_id(text: str) -> int:
    value = text.strip()
    # isdigit() alone accepts "²"; only ASCII digits are an id.
    if not (value.isascii() and value.isdigit()) or not 1 <= int(value) <= MAX_ID:
        _usage(f"invalid job id {text!r}: expected a whole number from 1 to {MAX_ID}")
    return int(value)


@jobs_app.command("get")
def jobs_get_command(ctx: typer.Context, job_id: str = typer.Argument(..., metavar="ID")) -> None:
    """One job, with its args and its errors (tracebacks as text)."""
    g = _globals(ctx)
    checked = _parse_id(job_id)
    with _inspector(g) as inspector:
        try:
            row = inspector.get_job(checked)
        except drover.NotFound as exc:
            _fail(str(exc))
    _emit(g, out.job_block(row), out.job_dict(row))


@app.command("retry")
def retry_command(ctx: typer.Context, job_id: str = typer.Argument(..., metavar="ID")) -> None:
    """Send a dead job back to the queue with a fresh set of attempts."""
    g = _globals(ctx)
    checked = _parse_id(job_id)
    with _inspector(g) as inspector:
        try:
            row = inspector.retry_job(checked)
        except (drover.NotFound, drover.InvalidTransition, drover.DuplicateJob) as exc:
            _fail(f"cannot retry job {checked}: {exc}")
    _emit(
        g, f"retried job {row.id}: now {row.state.value}\n{out.job_block(row)}", out.job_dict(row)
    )


@app.command("cancel")
def cancel_command(ctx: typer.Context, job_id: str = typer.Argument(..., metavar="ID")) -> None:
    """Cancel a waiting or dead job (a running job belongs to its worker)."""
    g = _globals(ctx)
    checked = _parse_id(job_id)
    with _inspector(g) as inspector:
        try:
            row = inspector.cancel_job(checked)
        except (drover.NotFound, drover.InvalidTransition) as exc:
            _fail(f"cannot cancel job {checked}: {exc}")
    _emit(g, f"cancelled job {row.id}\n{out.job_block(row)}", out.job_dict(row))


def _check_queue(queue: str) -> None:
    try:
        drover.InsertOpts(queue=queue)
    except drover.InvalidInsertOpts as exc:
        _usage(str(exc).replace("InsertOpts.queue", "--queue"))


@app.command("enqueue")
def enqueue_command(
    ctx: typer.Context,
    kind: str = typer.Option(..., "--kind", help="The job kind (selects the worker)."),
    queue: str = typer.Option("default", "--queue", help="The queue."),
    args: str = typer.Option("{}", "--args", help="The job's args as JSON."),
    at: str | None = typer.Option(
        None, "--at", help="Run no earlier than this ISO-8601 time (with a time zone)."
    ),
) -> None:
    """Insert a job by kind with JSON args."""
    g = _globals(ctx)
    _check_queue(queue)
    scheduled_at = None
    if at is not None:
        try:
            scheduled_at = datetime.fromisoformat(at.replace("Z", "+00:00"))
        except ValueError:
            _usage(f"--at {at!r} is not an ISO-8601 time")
        if scheduled_at.utcoffset() is None:
            _usage(f"--at {at!r} needs a time zone, e.g. {at}Z or {at}+02:00")
    try:
        # Validate before touching the database: a usage error writes nothing.
        drover.Inspector.validate_enqueue(kind, args)
    except drover.InvalidJobArgs as exc:
        _usage(str(exc))
    with _inspector(g) as inspector:
        try:
            row = inspector.enqueue(
                kind, args, drover.InsertOpts(queue=queue, scheduled_at=scheduled_at)
            )
        except drover.InvalidJobArgs as exc:
            _usage(str(exc))
    _emit(
        g,
        f"enqueued job {row.id} (kind {row.kind}, queue {row.queue}, {row.state.value})",
        out.job_dict(row),
    )


# --- schema ------------------------------------------------------------------------------------


@app.command("migrate")
def migrate_command(
    ctx: typer.Context,
    status: bool = typer.Option(False, "--status", help="Show migrations; change nothing."),
) -> None:
    """Apply drover's pending migrations (the only command that changes the schema)."""
    g = _globals(ctx)
    url = _url(g)
    try:
        if status:
            current = drover.migration_status(url)
            rows = [
                (m.version, m.name, "applied", out.timestamp(m.applied_at)) for m in current.applied
            ]
            rows += [(m.version, m.name, "pending", "") for m in current.pending]
            _emit(
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
        applied = drover.migrate(url)
    except drover.MigrationError as exc:
        _fail(str(exc))
    except drover.DatabaseError as exc:
        _database_error(url, exc)
    human = "\n".join(f"applied {m.label}" for m in applied) if applied else "schema is up to date"
    _emit(g, human, {"applied": [{"version": m.version, "name": m.name} for m in applied]})


# --- running ------------------------------------------------------------------------------------


def _load_client(spec: str) -> drover.Client:
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        _usage(f"APP must look like module:attribute, not {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`, find the project's own modules
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        _usage(f"cannot import {module_name!r}: {type(exc).__name__}: {exc}")
    try:
        target: Any = module
        for part in attribute.split("."):
            target = getattr(target, part)
    except AttributeError:
        _usage(f"{module_name!r} has no attribute {attribute!r}")
    if not isinstance(target, drover.Client) and callable(target):
        try:
            target = target()
        except drover.DroverError as exc:
            _fail(f"{spec} failed: {exc}")
    if not isinstance(target, drover.Client):
        _usage(f"{spec} is not a drover.Client or a function returning one")
    return target


def _parse_queues(text: str) -> dict[str, int]:
    queues: dict[str, int] = {}
    for part in text.split(","):
        name, sep, weight = part.strip().partition("=")
        weight = weight.strip()
        if not name or (sep and not (weight.isascii() and weight.isdigit())):
            _usage(f"--queues must look like name=weight,name=weight, not {text!r}")
        queues[name] = int(weight) if sep else 1
    return queues


@app.command("worker")
def worker_command(
    ctx: typer.Context,
    app_spec: str = typer.Argument(..., metavar="APP", help="module:attribute of a Client."),
    concurrency: int | None = typer.Option(None, "--concurrency", min=1, help="Pool threads."),
    queues: str | None = typer.Option(None, "--queues", help="name=weight,... to work."),
    ops_addr: str | None = typer.Option(None, "--ops-addr", help="host:port for /metrics."),
    shutdown_timeout: float | None = typer.Option(
        None, "--shutdown-timeout", min=0, help="Seconds to drain on SIGINT/SIGTERM."
    ),
) -> None:
    """Run a Client from your code until SIGINT/SIGTERM, then drain it."""
    client = _load_client(app_spec)
    changes: dict[str, Any] = {}
    if concurrency is not None:
        changes["concurrency"] = concurrency
    if queues is not None:
        changes["queues"] = _parse_queues(queues)
    if ops_addr is not None:
        changes["ops_addr"] = ops_addr
    if shutdown_timeout is not None:
        changes["shutdown_timeout"] = shutdown_timeout
    if changes:
        try:
            config = client.config.replace(**changes, metrics_registry=None)
        except drover.ConfigError as exc:
            _usage(str(exc))
        original = client
        client = drover.Client(original.pool, config)
    try:
        client.run()
    except drover.DrainIncomplete as exc:
        _fail(str(exc))
    except drover.DroverError as exc:
        _fail(str(exc))
    finally:
        if changes:
            original.close()
    typer.echo("drover worker stopped cleanly", err=True)


@app.command("demo")
def demo_command(
    ctx: typer.Context,
    jobs: int = typer.Option(3000, "--jobs", min=1, max=1_000_000, help="How many sample jobs."),
    concurrency: int = typer.Option(10, "--concurrency", min=1, max=1000, help="Pool threads."),
) -> None:
    """Run a worker pool over a few thousand sample jobs (embedded PostgreSQL without a URL)."""
    from drover._demo import run_demo

    g = _globals(ctx)
    url = _given_url(g)
    try:
        code = run_demo(url or None, jobs=jobs, concurrency=concurrency)
    except drover.DatabaseError as exc:
        _database_error(url or "", exc)
    except drover.DroverError as exc:
        _fail(str(exc))
    raise typer.Exit(code)


@app.command("bench")
def bench_command(
    ctx: typer.Context,
    mode: str = typer.Option("drain", "--mode", help="enqueue, drain or latency."),
    jobs: int = typer.Option(20_000, "--jobs", min=1, max=10_000_000, help="Jobs to run."),
    concurrency: int = typer.Option(10, "--concurrency", min=1, max=1000, help="Pool threads."),
    batch: int = typer.Option(1000, "--batch", min=1, max=100_000, help="insert_many size."),
    queues: int = typer.Option(1, "--queues", min=1, max=100, help="Queues to spread over."),
) -> None:
    """Measure drover on synthetic no-op jobs (embedded PostgreSQL, fsync on, without a URL)."""
    from drover._bench import MODES, run_bench

    g = _globals(ctx)
    if mode not in MODES:
        _usage(f"--mode must be one of {', '.join(MODES)}, not {mode!r}")
    url = _given_url(g)
    if url and url != "embedded":
        url = _url(g)
    try:
        result = run_bench(
            url, mode=mode, jobs=jobs, concurrency=concurrency, batch=batch, queues=queues
        )
    except drover.DatabaseError as exc:
        _database_error(url or "", exc)
    rows = [
        ("mode", result.mode),
        ("jobs", result.jobs),
        ("concurrency", result.concurrency),
        ("batch", result.batch),
        ("queues", result.queues),
        ("seconds", f"{result.seconds:.3f}"),
        ("jobs/s", f"{result.jobs_per_second:.0f}"),
    ]
    rows += [(f"enqueue→start {k} ms", f"{v:.2f}") for k, v in result.latency_ms.items()]
    rows += [
        ("peak RSS MB", result.peak_rss_mb),
        ("CPUs", result.cpu_count),
        ("Python", result.python),
        ("drover", result.drover),
    ]
    rows += [(f"postgres {k}", v) for k, v in result.postgres.items()]
    _emit(g, out.table(["MEASURE", "VALUE"], rows), result.as_dict())


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
    "--queues",
    "--ops-addr",
    "--shutdown-timeout",
    "--jobs",
    "--mode",
    "--batch",
}


def hoist_globals(argv: Sequence[str]) -> list[str]:
    """Move ``--database``/``-d``/``--json`` found anywhere before ``--`` to the front.

    typer only reads a group's options before the subcommand; operators type
    ``drover stats --json`` as often as ``drover --json stats``.
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
        elif arg in ("--database", "-d"):
            front.extend(argv[i : i + 2])
            i += 1
        elif arg.startswith("--database="):
            front.append(arg)
        else:
            rest.append(arg)
        i += 1
    return front + rest


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``drover`` console script and ``python -m drover``."""
    args = list(sys.argv[1:] if argv is None else argv)
    app(args=hoist_globals(args), prog_name="drover")
