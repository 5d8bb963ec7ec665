"""The job commands of ``drover``: ``jobs list``, ``jobs get``, ``retry``, ``cancel``, ``enqueue``.

Separate from ``drover.cli.app`` (which builds the typer application and
registers these, in the order ``drover --help`` lists them) so that module
stays small. Each command opens one Inspector for its run; bad input is a
usage error (exit 2) raised before the database is touched.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated

import typer

import drover
from drover._hints import did_you_mean
from drover.cli import output as out
from drover.cli.common import (
    check_queue,
    emit,
    fail,
    get_globals,
    load_workers,
    open_inspector,
    parse_job_id,
    usage,
)
from drover.job import MAX_PRIORITY, MIN_PRIORITY
from drover.progress import check_tags

__all__ = ["cancel_command", "enqueue_command", "jobs_app", "retry_command"]

jobs_app = typer.Typer(help="List and show jobs.", no_args_is_help=True, rich_markup_mode=None)


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
        check_queue(queue)
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
        out.job_block(row, result)
        + out.identity_lines(identity)
        + out.cancel_request_lines(row)
        + out.ledger_lines(row),
        {
            **out.job_dict(row),
            "result": result,
            **out.identity_dict(identity),
            "cancel_request": None if row.cancel_request is None else row.cancel_request.as_dict(),
            "ledger": out.ledger_list(row),
        },
    )


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


def _check_kind_is_run(inspector: drover.Inspector, kind: str, force: bool) -> None:
    """Refuse (exit 1) a kind that none of the live workers reporting their kinds runs."""
    reported = [w.kinds for w in inspector.workers() if w.kinds is not None]
    known = sorted({k for kinds in reported for k in kinds})
    if not reported or kind in known or force:
        return
    fail(
        f"no live worker runs kind {kind!r}{did_you_mean(kind, known)}; they run "
        f"{', '.join(known) or 'no kind'}. Nothing was enqueued: --force enqueues it anyway "
        "(for a worker deployed later), --app checks it against your code"
    )


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
    force: bool = typer.Option(
        False,
        "--force",
        help="Enqueue a kind no live worker has registered (one deployed later will run it).",
    ),
) -> None:
    """Insert a job by kind with JSON args.

    Without --app the args are not validated (the line printed says so), and
    the kind is checked against the kinds the live workers registered: one
    none of them has is refused (exit 1, naming the closest) unless --force.
    """
    g = get_globals(ctx)
    if queue is not None:
        check_queue(queue)
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
        if workers is None:
            _check_kind_is_run(inspector, kind, force)
        try:
            row = inspector.enqueue(kind, args, opts)
        except drover.InvalidJobArgs as exc:
            usage(str(exc))
    # Without --app nothing checked the args: say so where people read (not in --json).
    unchecked = "; its args were not validated (no --app)" if workers is None else ""
    emit(
        g,
        f"enqueued job {row.id} (kind {row.kind}, queue {row.queue}, {row.state.value}){unchecked}",
        out.job_dict(row),
    )
