"""What every CLI command shares: global options, errors and exit codes, the database."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

import typer

import drover
from drover import _cli_output as out
from drover._db.connections import check_conninfo, describe_target
from drover._db.errors import redact

__all__ = [
    "Globals",
    "database_error",
    "emit",
    "fail",
    "get_globals",
    "given_url",
    "open_inspector",
    "url_of",
    "usage",
]


@dataclass
class Globals:
    database: str | None
    json: bool


def fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(f"drover: {redact(message)}", err=True)
    raise typer.Exit(code)


def usage(message: str) -> NoReturn:
    fail(message, code=2)


def get_globals(ctx: typer.Context) -> Globals:
    root = ctx.find_root()
    value = root.obj
    assert isinstance(value, Globals)
    return value


def emit(g: Globals, human: str, machine: Any) -> None:
    typer.echo(out.to_json(machine) if g.json else human)


def given_url(g: Globals) -> str | None:
    """The URL from --database, else the environment; an empty --database is a usage error."""
    if g.database is not None:
        if not g.database.strip():
            usage("--database requires a value")
        return g.database
    return os.environ.get("DROVER_DATABASE_URL") or os.environ.get("DATABASE_URL") or None


def url_of(g: Globals) -> str:
    url = given_url(g)
    if not url:
        usage("no database URL: pass --database URL or set DROVER_DATABASE_URL (or DATABASE_URL)")
    try:
        return check_conninfo(url)
    except ValueError as exc:
        usage(str(exc))


def database_error(url: str, exc: drover.DatabaseError) -> NoReturn:
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    fail(f"cannot use the database at {describe_target(url)}: {first_line}")


@contextmanager
def open_inspector(g: Globals) -> Iterator[drover.Inspector]:
    """Check the database answers and carries drover's current schema, then open an Inspector."""
    url = url_of(g)
    try:
        status = drover.migration_status(url)
    except drover.DatabaseError as exc:
        database_error(url, exc)
    if not status.applied:
        fail(f"drover's schema is missing from {describe_target(url)}: run `drover migrate` first")
    if status.pending:
        latest = status.pending[-1].version
        fail(
            f"the database schema is at version {status.current_version} but this drover "
            f"needs {latest}: run `drover migrate`"
        )
    inspector = drover.Inspector(url)
    try:
        yield inspector
    except drover.DatabaseError as exc:
        database_error(url, exc)
    finally:
        inspector.close()
