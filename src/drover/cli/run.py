"""CLI commands that run things: ``worker``, ``demo`` and ``bench``."""

from __future__ import annotations

import logging
import os
import signal
from typing import Any

import typer

import drover
from drover.cli import output as out
from drover.cli.common import (
    database_error,
    database_of,
    emit,
    fail,
    get_globals,
    given_url,
    load_client,
    schema_of,
    url_of,
    usage,
)
from drover.cli.logs import LOG_FORMAT_HELP, LOG_LEVEL_HELP, configure_logging, logging_choice
from drover.cli.shutdown import SECOND_SIGNAL_NOTE, second_signal_exit, serve
from drover.cli.supervisor import Supervisor, child_command, run_child
from drover.queues import format_queues

__all__ = ["bench_command", "demo_command", "worker_command"]

_log = logging.getLogger("drover.cli")


_QUEUES_SHAPE = (
    "--queues must look like name=weight:max_workers,name=weight,name (e.g. images=2:4,default)"
)


def _digits(text: str) -> bool:
    # isdigit() alone accepts superscripts and other digits int() refuses.
    return text.isascii() and text.isdigit()


def _parse_queues(text: str) -> dict[str, drover.Queue]:
    """``images=2:4,default`` as queues: weight (default 1), then ``:max_workers``."""
    queues: dict[str, drover.Queue] = {}
    for part in text.split(","):
        name, sep, spec = part.strip().partition("=")
        weight, colon, cap = spec.strip().partition(":")
        if not name or (sep and not _digits(weight)) or (colon and not _digits(cap)):
            usage(f"{_QUEUES_SHAPE}; not {text!r}")
        if name in queues:
            usage(f"--queues names queue {name!r} twice: {text!r}")
        try:
            queues[name] = drover.Queue(
                weight=int(weight) if sep else 1, max_workers=int(cap) if colon else None
            )
        except drover.ConfigError as exc:
            usage(f"--queues {name}={spec}: {exc}")
    return queues


def _process_count(text: str) -> int:
    if text.strip().lower() == "auto":
        return max(1, os.cpu_count() or 1)
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= 256:
        usage(f"--processes must be a number from 1 to 256, or auto; not {text!r}")
    return int(text)


def _start_line(
    app_spec: str, client: drover.Client, config: drover.Config, processes: int
) -> None:
    database = database_of(client)
    shown = format_queues(config.queues)
    concurrency = config.concurrency
    _log.info(
        "drover %s worker starting: app %s, database %s, queues %s, concurrency %d, processes %d",
        drover.__version__,
        app_spec,
        database,
        shown,
        concurrency,
        processes,
        extra={
            "event": "worker_starting",
            "version": drover.__version__,
            "app": app_spec,
            "database": database,
            "queues": shown,
            "concurrency": concurrency,
            "processes": processes,
        },
    )


def _report(verdict: drover.DrainIncomplete) -> None:
    typer.echo(f"drover: {verdict}", err=True)


def worker_command(
    ctx: typer.Context,
    app_spec: str = typer.Argument(..., metavar="APP", help="module:attribute of a Client."),
    concurrency: int | None = typer.Option(None, "--concurrency", min=1, help="Pool threads."),
    queues: str | None = typer.Option(
        None, "--queues", help="Queues to work: name=weight:max_workers,... (images=2:4,default)."
    ),
    ops_addr: str | None = typer.Option(None, "--ops-addr", help="host:port for /metrics."),
    shutdown_timeout: float | None = typer.Option(
        None, "--shutdown-timeout", min=0, help="Seconds to drain on SIGINT/SIGTERM."
    ),
    processes: str = typer.Option(
        "1", "--processes", help="Worker processes under one supervisor: a number, or auto."
    ),
    max_jobs_per_child: int | None = typer.Option(
        None, "--max-jobs-per-child", min=1, help="Replace a process after this many jobs."
    ),
    max_memory_per_child: int | None = typer.Option(
        None, "--max-memory-per-child", min=1, help="Replace a process above this many MB."
    ),
    log_level: str | None = typer.Option(None, "--log-level", help=LOG_LEVEL_HELP),
    log_format: str | None = typer.Option(None, "--log-format", help=LOG_FORMAT_HELP),
    supervised: bool = typer.Option(False, "--supervised", hidden=True),
) -> None:
    """Run a Client from your code until SIGINT/SIGTERM, then drain it.

    When `--shutdown-timeout` runs out, the unfinished jobs go back to the
    queue and the process exits 1 at once, handlers still running or not; a
    second SIGINT/SIGTERM during the drain exits at once (130/143).

    Logs to standard error (a start line, failed and dead jobs, the
    supervisor's events) unless your application configures logging itself;
    `--log-level` and `--log-format` choose how. With `--processes N` (or
    `auto`, one per CPU) a supervisor runs N worker processes, restarts any
    that dies, forwards SIGTERM/SIGINT for a graceful drain and serves one ops
    port for all of them. With `--max-jobs-per-child` /
    `--max-memory-per-child` a process drains and is replaced once it reaches
    the limit.
    """
    choice = logging_choice(log_level, log_format)
    count = _process_count(processes)
    parsed_queues = _parse_queues(queues) if queues is not None else None
    client = load_client(app_spec)
    if not len(client.config.workers):
        client.close()
        usage(
            f"APP {app_spec} is a client with no workers, so it has no job it could run: "
            "register your workers in a drover.Workers and build the client with "
            "drover.Client(url, drover.Config(workers=workers))"
        )
    changes: dict[str, Any] = {}
    schema = schema_of(get_globals(ctx))
    if schema is not None and schema != (client.config.schema or "public"):
        if client.config.schema is not None:
            client.close()
            usage(
                f"APP {app_spec} uses schema {client.config.schema!r} but --schema (or "
                f"DROVER_SCHEMA) says {schema!r}; drop one of them"
            )
        changes["schema"] = schema
    if concurrency is not None:
        changes["concurrency"] = concurrency
    if parsed_queues is not None:
        changes["queues"] = parsed_queues
    if ops_addr is not None:
        changes["ops_addr"] = ops_addr
    if shutdown_timeout is not None:
        changes["shutdown_timeout"] = shutdown_timeout
    config = client.config
    if changes:
        # Checked here, before any process starts: a max_workers above the
        # concurrency is a usage error of this command, not of each child.
        try:
            config = client.config.replace(**changes, metrics_registry=None)
        except drover.ConfigError as exc:
            client.close()
            usage(str(exc))
    configure_logging(choice)
    if not supervised:
        _start_line(app_spec, client, config, count)
    if not supervised and (count > 1 or max_jobs_per_child or max_memory_per_child):
        budget = (
            shutdown_timeout
            if shutdown_timeout is not None
            else client.config.shutdown_timeout.total_seconds()
        )
        client.close()  # each process builds its own
        child = ["worker", app_spec, "--supervised", *choice.argv()]
        if "schema" in changes:
            child = ["--schema", changes["schema"], *child]  # a root option, before the command
        for flag, value in (
            ("--concurrency", concurrency),
            ("--queues", queues),
            ("--shutdown-timeout", shutdown_timeout),
            ("--max-jobs-per-child", max_jobs_per_child),
            ("--max-memory-per-child", max_memory_per_child),
        ):
            if value is not None:
                child += [flag, str(value)]
        supervisor = Supervisor(
            child_command(child), count, shutdown_timeout=budget, ops_addr=ops_addr
        )
        code = supervisor.run()
        if supervisor.interrupted is not None:
            name = signal.Signals(supervisor.interrupted).name
            status = second_signal_exit(supervisor.interrupted)
            typer.echo(
                f"drover: a second {name} during the drain: the worker processes were told to "
                f"exit at once; exiting with status {status}; {SECOND_SIGNAL_NOTE}",
                err=True,
            )
            raise typer.Exit(status)
        if code:
            fail(supervisor.failure or "a worker process did not drain cleanly")
        typer.echo("drover worker stopped cleanly", err=True)
        return
    if changes:
        original = client
        client = original._derive(config)
    if supervised:
        try:
            code = run_child(
                client, max_jobs=max_jobs_per_child, max_memory_mb=max_memory_per_child
            )
        finally:
            client.close()
            if changes:
                original.close()
        raise typer.Exit(code)
    try:
        serve(client, _report, also_close=original if changes else None)
    except drover.DroverError as exc:
        fail(str(exc))
    finally:
        if changes:
            original.close()
    typer.echo("drover worker stopped cleanly", err=True)


def demo_command(
    ctx: typer.Context,
    jobs: int = typer.Option(3000, "--jobs", min=1, max=1_000_000, help="How many sample jobs."),
    concurrency: int = typer.Option(10, "--concurrency", min=1, max=1000, help="Pool threads."),
) -> None:
    """Run a worker pool over a few thousand sample jobs (embedded PostgreSQL without a URL)."""
    from drover.cli.demo import run_demo

    g = get_globals(ctx)
    url = given_url(g)
    try:
        code = run_demo(url or None, jobs=jobs, concurrency=concurrency)
    except drover.DatabaseError as exc:
        database_error(url or "", exc)
    except drover.DroverError as exc:
        fail(str(exc))
    raise typer.Exit(code)


def bench_command(
    ctx: typer.Context,
    mode: str = typer.Option(
        "drain",
        "--mode",
        help="enqueue, drain, latency or burst (drain into a never-analyzed table).",
    ),
    jobs: int = typer.Option(20_000, "--jobs", min=1, max=10_000_000, help="Jobs to run."),
    concurrency: int = typer.Option(10, "--concurrency", min=1, max=1000, help="Pool threads."),
    batch: int = typer.Option(1000, "--batch", min=1, max=100_000, help="insert_many size."),
    queues: int = typer.Option(1, "--queues", min=1, max=100, help="Queues to spread over."),
) -> None:
    """Measure drover on synthetic no-op jobs (embedded PostgreSQL, fsync on, without a URL)."""
    from drover.cli.bench import MODES, run_bench

    g = get_globals(ctx)
    if mode not in MODES:
        usage(f"--mode must be one of {', '.join(MODES)}, not {mode!r}")
    url = given_url(g)
    if url and url != "embedded":
        url = url_of(g)
    try:
        result = run_bench(
            url, mode=mode, jobs=jobs, concurrency=concurrency, batch=batch, queues=queues
        )
    except drover.DatabaseError as exc:
        database_error(url or "", exc)
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
    emit(g, out.table(["MEASURE", "VALUE"], rows), result.as_dict())
