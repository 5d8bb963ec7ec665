"""What every CLI command shares: global options, errors and exit codes, the database."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

import typer

import drover
from drover._db.conninfo import check_conninfo, describe_target
from drover._db.errors import redact
from drover.cli import output as out

__all__ = [
    "Globals",
    "database_error",
    "emit",
    "fail",
    "get_globals",
    "given_url",
    "load_client",
    "load_object",
    "load_workers",
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


def load_object(spec: str, what: str) -> Any:
    """Import ``module:attribute`` (dotted attributes allowed); usage errors name ``what``."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        usage(f"{what} must look like module:attribute, not {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`, find the project's own modules
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        usage(f"cannot import {module_name!r}: {type(exc).__name__}: {exc}")
    try:
        target: Any = module
        for part in attribute.split("."):
            target = getattr(target, part)
    except AttributeError:
        usage(f"{module_name!r} has no attribute {attribute!r}")
    return target


def load_client(spec: str) -> drover.Client:
    """The Client an APP spec names: the attribute itself or what calling it returns."""
    target = load_object(spec, "APP")
    if not isinstance(target, drover.Client) and callable(target):
        try:
            target = target()
        except drover.DroverError as exc:
            fail(f"{spec} failed: {exc}")
        except Exception as exc:  # the application's own factory: report it in one line
            fail(f"{spec} failed: {type(exc).__name__}: {exc}")
    if not isinstance(target, drover.Client):
        usage(f"{spec} is not a drover.Client or a function returning one")
    return target


def load_workers(spec: str) -> drover.Workers:
    """The job kinds an ``--app`` spec names: a Workers registry, a Client's, or a factory's."""
    target = load_object(spec, "--app")
    if not isinstance(target, drover.Client | drover.Workers) and callable(target):
        try:
            target = target()
        except drover.DroverError as exc:
            fail(f"{spec} failed: {exc}")
        except Exception as exc:  # the application's own factory: report it in one line
            fail(f"{spec} failed: {type(exc).__name__}: {exc}")
    if isinstance(target, drover.Client):
        workers = target.config.workers
        target.close()  # only its registry is wanted; its pool is not
        return workers
    if not isinstance(target, drover.Workers):
        usage(f"{spec} is not a drover.Client, a drover.Workers or a function returning one")
    return target


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
def open_inspector(g: Globals, workers: drover.Workers | None = None) -> Iterator[drover.Inspector]:
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
    inspector = drover.Inspector(url, workers=workers)
    try:
        yield inspector
    except drover.DatabaseError as exc:
        database_error(url, exc)
    finally:
        inspector.close()
