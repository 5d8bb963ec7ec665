"""``drover faults --app``: run your own handlers under drover's fault suite (ADR 0039).

The heavy lifting is in ``drover.faults.app``, imported only when the
command runs (the library never imports the fault harness).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

import typer

import drover
from drover._db.conninfo import check_conninfo, describe_target
from drover.cli.common import database_error, fail, get_globals, load_object, load_workers, usage

__all__ = ["faults_command"]

_App = Annotated[
    str,
    typer.Option(
        "--app",
        help="Your job kinds, as `drover worker` takes them: module:attr naming a "
        "drover.Workers, a drover.Client or a function returning one.",
        show_default=False,
    ),
]
_Args = Annotated[
    str | None,
    typer.Option(
        "--args",
        help="module:attr naming the args factory: a callable (kind, rng) -> JobArgs | None, "
        "or a mapping kind -> callable (rng) -> JobArgs or a list of JobArgs.",
        show_default=False,
    ),
]
_SampleFrom = Annotated[
    str | None,
    typer.Option(
        "--sample-from",
        help="Read the args of the newest --sample jobs of each kind from this drover "
        "database (read only).",
        show_default=False,
    ),
]
_Sample = Annotated[int, typer.Option("--sample", help="Jobs per kind.", min=1, max=1000)]
_Effects = Annotated[
    str | None,
    typer.Option(
        "--effects",
        help="module:attr naming the effect check: a callable (job) -> int counting one job's "
        "effects (or a mapping kind -> callable). A count above 1 means not idempotent.",
        show_default=False,
    ),
]
_Setup = Annotated[
    str | None,
    typer.Option(
        "--setup",
        help="module:attr naming a callable (database_url) run once before any job, "
        "e.g. to create the tables your handlers write to.",
        show_default=False,
    ),
]
_DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help="An empty, throwaway PostgreSQL database instead of the embedded server "
        "(server restarts are then left out).",
        show_default=False,
    ),
]
_Faults = Annotated[int, typer.Option("--faults", help="Faults to inject, one at a time.", min=1)]
_Kinds = Annotated[
    str | None,
    typer.Option(
        "--kinds",
        help="Comma-separated fault kinds (default: all of kill, stop, pg_restart, pg_crash, "
        "terminate, drain, proxy_cut, proxy_blackhole).",
        show_default=False,
    ),
]
_Seed = Annotated[int, typer.Option("--seed", help="Seeds the sample and the fault schedule.")]
_Processes = Annotated[int, typer.Option("--processes", help="Worker processes.", min=1, max=16)]
_Concurrency = Annotated[
    int, typer.Option("--concurrency", help="Jobs at once per worker process.", min=1, max=64)
]
_Lease = Annotated[
    float, typer.Option("--lease", help="Lease duration in seconds (a SIGSTOP outlasts it).")
]
_JsonOut = Annotated[
    Path | None,
    typer.Option("--json-out", help="Also write the report as JSON here.", show_default=False),
]
_Out = Annotated[
    Path | None,
    typer.Option(
        "--out", help="Keep the run's history and report in this directory.", show_default=False
    ),
]


def _url(value: str, option: str) -> str:
    try:
        return check_conninfo(value)
    except ValueError as exc:
        usage(f"{option}: {exc}")


def faults_command(
    ctx: typer.Context,
    app: _App,
    args: _Args = None,
    sample_from: _SampleFrom = None,
    sample: _Sample = 20,
    effects: _Effects = None,
    setup: _Setup = None,
    database_url: _DatabaseUrl = None,
    faults: _Faults = 8,
    kinds: _Kinds = None,
    seed: _Seed = 1,
    processes: _Processes = 2,
    concurrency: _Concurrency = 4,
    lease: _Lease = 2.0,
    json_out: _JsonOut = None,
    out: _Out = None,
) -> None:
    """Run your handlers under faults; report duplicates, raises and repeated effects per kind.

    Your --app's workers run in worker processes against a throwaway database
    (an embedded PostgreSQL, or --database-url) while SIGKILLs, SIGSTOPs past the
    lease, server restarts, backend terminations, drains over budget and network
    cuts hit them. Your code finds that database's URL in DROVER_FAULTS_DATABASE_URL.
    Exits 1 when a kind repeated an effect or lost a job, 0 otherwise, 2 on bad usage.
    """
    g = get_globals(ctx)
    # The faults are deliberate: the pool's warnings about the connections they
    # break would bury the report (the workers' logs are in --out).
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    if (args is None) == (sample_from is None):
        usage("give exactly one source of args: --args module:attr or --sample-from URL")
    if not 0.1 <= lease <= 60:
        usage(f"--lease must be from 0.1 to 60 seconds, not {lease:g}")
    workers = load_workers(app)
    if not len(workers):
        usage(f"--app {app} registers no job kind")
    args_source = load_object(args, "--args") if args is not None else None
    effects_source = load_object(effects, "--effects") if effects is not None else None
    setup_fn = load_object(setup, "--setup") if setup is not None else None
    if setup_fn is not None and not callable(setup_fn):
        usage(f"--setup {setup} is not callable; it must be a function (database_url) -> None")
    if database_url is not None:
        database_url = _url(database_url, "--database-url")
    chosen = tuple(k.strip() for k in kinds.split(",") if k.strip()) if kinds else None

    from drover.faults.app.run import AppRunFailed, AppScenario, run_app
    from drover.faults.app.sample import sample_from as read_sample

    sampled = None
    if sample_from is not None:
        source = _url(sample_from, "--sample-from")
        try:
            sampled = read_sample(source, workers, sample)
        except drover.DatabaseError as exc:
            database_error(source, exc)
        if not sampled:
            fail(f"{describe_target(source)} holds no job of the kinds of --app {app}")
    extra: dict[str, Any] = {} if chosen is None else {"kinds": chosen}
    scenario = AppScenario(
        app=app, workers=workers, per_kind=sample, args=args_source, sampled=sampled,
        effects=effects_source, setup=setup_fn, database_url=database_url, faults=faults,
        seed=seed, processes=processes, concurrency=concurrency, lease=lease, out=out,
        log=lambda line: typer.echo(line, err=True), **extra,
    )  # fmt: skip
    try:
        report = run_app(scenario)
    except drover.InvalidArgument as exc:
        usage(str(exc))
    except AppRunFailed as exc:
        fail(str(exc))
    except drover.DatabaseError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        fail(f"the throwaway database failed: {first}")
    if json_out is not None:
        report.write_json(json_out)
    typer.echo(_json(report) if g.json else report.table())
    if not report.ok:
        raise typer.Exit(1)


def _json(report: Any) -> str:
    from drover.cli.output import to_json

    return to_json(report.to_json())
