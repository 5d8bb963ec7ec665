"""The ``drover`` command line (``python -m drover``)."""

from __future__ import annotations

import os

import typer

import drover

__all__ = ["app", "main"]

app = typer.Typer(
    name="drover",
    help="drover: a PostgreSQL-backed job queue. Operator commands.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(drover.__version__)
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print the drover version and exit.",
    ),
) -> None:
    """drover: a PostgreSQL-backed job queue."""


def _database_url(option: str | None) -> str | None:
    return option or os.environ.get("DROVER_DATABASE_URL") or os.environ.get("DATABASE_URL")


@app.command("demo")
def demo_command(
    database: str | None = typer.Option(
        None,
        "--database",
        "-d",
        help="PostgreSQL URL (else DROVER_DATABASE_URL, DATABASE_URL, else an embedded server).",
    ),
    jobs: int = typer.Option(3000, "--jobs", min=1, max=1_000_000, help="How many sample jobs."),
    concurrency: int = typer.Option(10, "--concurrency", min=1, max=1000, help="Pool threads."),
) -> None:
    """Run a worker pool over a few thousand sample jobs and report what happened."""
    from drover._demo import run_demo

    try:
        code = run_demo(_database_url(database), jobs=jobs, concurrency=concurrency)
    except drover.DroverError as exc:
        typer.echo(f"drover demo: {exc}", err=True)
        raise typer.Exit(1) from None
    raise typer.Exit(code)


@app.command("version")
def version_command() -> None:
    """Print the drover version."""
    typer.echo(drover.__version__)


def main() -> None:
    """Entry point of the ``drover`` console script and ``python -m drover``."""
    app()
