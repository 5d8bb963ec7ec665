"""The ``drover`` command line (``python -m drover``)."""

from __future__ import annotations

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


@app.command("version")
def version_command() -> None:
    """Print the drover version."""
    typer.echo(drover.__version__)


def main() -> None:
    """Entry point of the ``drover`` console script and ``python -m drover``."""
    app()
