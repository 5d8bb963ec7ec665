"""What every CLI command shares: global options, errors and exit codes, the database."""

from __future__ import annotations

import contextvars
import importlib
import os
import pkgutil
import posixpath
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

import typer

import drover
from drover._db.conninfo import check_conninfo, describe_target
from drover._db.errors import redact
from drover._db.namespace import check_schema_name
from drover._hints import did_you_mean
from drover.cli import output as out
from drover.queues import check_queue_name

__all__ = [
    "MAX_ID",
    "MIGRATE_COMMAND",
    "Globals",
    "check_queue",
    "database_error",
    "database_of",
    "describe_object",
    "emit",
    "fail",
    "get_globals",
    "given_url",
    "load_client",
    "load_object",
    "load_workers",
    "open_inspector",
    "parse_job_id",
    "schema_of",
    "url_of",
    "usage",
    "where",
]

MIGRATE_COMMAND: contextvars.ContextVar[str] = contextvars.ContextVar(
    "drover_migrate_command", default="drover migrate"
)
"""The command a schema error tells the user to run. `manage.py drover ...` sets
it to Django's own (`python manage.py migrate`), which also records drover's
Django migration; a context variable, so concurrent callers never see another's."""


@dataclass
class Globals:
    database: str | None
    json: bool
    schema: str | None = None


def fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(f"drover: {redact(message)}", err=True)
    raise typer.Exit(code)


def usage(message: str) -> NoReturn:
    fail(message, code=2)


MAX_ID = 2**63 - 1


def parse_job_id(text: str) -> int:
    """A job id from the command line; anything but 1..2**63-1 in ASCII digits is a usage error."""
    value = text.strip()
    # isdigit() alone accepts "²"; only ASCII digits are an id.
    if not (value.isascii() and value.isdigit()) or not 1 <= int(value) <= MAX_ID:
        usage(f"invalid job id {text!r}: expected a whole number from 1 to {MAX_ID}")
    return int(value)


def check_queue(queue: str, what: str = "--queue") -> None:
    """A usage error (exit 2) unless ``queue`` is a valid queue name; ``what`` names the
    argument in the message."""
    try:
        check_queue_name(queue)
    except drover.InvalidInsertOpts as exc:
        usage(str(exc).replace("queue name", what))


def _module_hint(spec: str, module_name: str, attribute: str) -> str | None:
    """What to type instead, when the module of ``spec`` is spelled as a file."""
    path = module_name.replace("\\", "/")
    if "/" not in path and not path.endswith(".py"):
        return None
    stem = posixpath.normpath(path).removesuffix(".py")  # ./app.py is app
    dotted = stem.replace("/", ".")
    if "/" not in stem:
        return f"{spec!r} names a file, not a module: drop the .py and use {dotted}:{attribute}"
    directory, _, last = stem.rpartition("/")
    elsewhere = f"{last}:{attribute} run from {directory}/ (or with {directory} on PYTHONPATH)"
    if stem.startswith(("/", "../")):  # not below this directory: no dotted path from here
        return f"{spec!r} is a file path, but it takes a module path: {elsewhere}"
    return (
        f"{spec!r} is a file path, but it takes a module path, as Python imports it: "
        f"{dotted}:{attribute} from this directory, or {elsewhere}"
    )


def load_object(spec: str, what: str) -> Any:
    """Import ``module:attribute`` (dotted attributes allowed); usage errors name ``what``.

    A module spelled as a file (``app.py``, ``src/app.py``) is refused with the
    module path to type instead; a file path is refused before anything is
    imported.
    """
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        message = f"{what} must look like module:attribute, not {spec!r}"
        hint = _module_hint(spec, module_name, attribute or "<name>") if module_name else None
        usage(f"{message} ({what} {hint})" if hint else message)
    hint = _module_hint(spec, module_name, attribute)
    if hint is not None and ("/" in module_name or "\\" in module_name):
        usage(f"{what} {hint}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`, find the project's own modules
    if hint is not None and os.path.isfile(module_name):
        # app.py:client would import app and then look for a submodule named py.
        usage(f"{what} {hint}")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        message = f"cannot import {module_name!r}: {type(exc).__name__}: {exc}"
        if hint is not None and isinstance(exc, ImportError):
            message += f" ({what} {hint})"
        elif isinstance(exc, ModuleNotFoundError):
            message += _not_found_hint(module_name, exc.name)
        usage(message)
    target: Any = module
    path = module_name
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            names = [n for n in dir(target) if not n.startswith("_")]
            usage(f"{path!r} has no attribute {part!r}{did_you_mean(part, names)}")
        path = f"{path}:{part}" if path == module_name else f"{path}.{part}"
    return target


def _not_found_hint(module_name: str, missing: str | None) -> str:
    """Why the application's module was not found: the wrong directory, or a misspelled part."""
    if missing == module_name.partition(".")[0]:
        return (
            f" (looked in {os.getcwd()} and on sys.path: run from the directory that holds "
            f"{missing!r}, or add that directory to PYTHONPATH)"
        )
    parent, _, last = (missing or "").rpartition(".")
    if not parent or not module_name.startswith(missing or ""):
        return ""  # one of the application's own imports is missing: its message says which
    package = sys.modules.get(parent)
    siblings = [m.name for m in pkgutil.iter_modules(getattr(package, "__path__", []))]
    return did_you_mean(last, siblings)


def describe_object(value: object) -> str:
    """What an APP spec turned out to name, for an error message (never calls it)."""
    if isinstance(value, type):
        name = f"{value.__module__}.{value.__qualname__}"
        for base, label in (
            (drover.JobArgs, "a drover.JobArgs class"),
            (drover.Worker, "a drover.Worker class"),
            (drover.Client, "the drover.Client class itself, not an instance of it"),
        ):
            if issubclass(value, base):
                return f"{label} ({name})"
        return f"a class ({name})"
    if isinstance(value, drover.Workers):
        return "a drover.Workers registry"
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text}, of type {type(value).__qualname__}"


def _is_factory(value: object) -> bool:
    """A function (or other non-class callable) that an APP spec may name to build its target."""
    return callable(value) and not isinstance(value, type)


def _call_factory(spec: str, factory: Any) -> Any:
    try:
        return factory()
    except drover.DroverError as exc:
        fail(f"{spec} failed: {exc}")
    except Exception as exc:  # the application's own factory: report it in one line
        fail(f"{spec} failed: {type(exc).__name__}: {exc}")


def load_client(spec: str) -> drover.Client:
    """The Client an APP spec names: the attribute itself or what calling it returns.

    A class is never instantiated: ``app:SendEmail`` naming a ``JobArgs`` class
    is refused saying what it is. A ``Workers`` registry is refused with how
    to build the client that runs it.
    """
    target = load_object(spec, "APP")
    found = target
    if _is_factory(target) and not isinstance(target, drover.Client | drover.Workers):
        target = _call_factory(spec, target)
        found = None
    if isinstance(target, drover.Client):
        return target
    what = describe_object(target)
    if found is None:
        what = f"a function returning {what}"
    if isinstance(target, drover.Workers):
        usage(
            f"APP {spec} is {what}; APP names the drover.Client that runs it: "
            "client = drover.Client(url, drover.Config(workers=workers))"
        )
    usage(f"APP {spec} is {what}; it must be a drover.Client or a function returning one")


def load_workers(spec: str) -> drover.Workers:
    """The job kinds an ``--app`` spec names: a Workers registry, a Client's, or a factory's."""
    target = load_object(spec, "--app")
    called = False
    if _is_factory(target) and not isinstance(target, drover.Client | drover.Workers):
        target = _call_factory(spec, target)
        called = True
    if isinstance(target, drover.Client):
        workers = target.config.workers
        target.close()  # only its registry is wanted; its pool is not
        return workers
    if not isinstance(target, drover.Workers):
        what = describe_object(target)
        if called:
            what = f"a function returning {what}"
        usage(
            f"--app {spec} is {what}; it must be a drover.Client, a drover.Workers "
            "or a function returning one"
        )
    return target


def database_of(client: drover.Client) -> str:
    """`host:port/dbname` of the database a client uses, for messages (never the password)."""
    return client._target()


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


def schema_of(g: Globals) -> str | None:
    """The schema from --schema, else DROVER_SCHEMA, checked; ``None``: the default.

    A bad name is a usage error naming where it came from (exit 2).
    """
    if g.schema is not None:
        given, source = g.schema, "--schema"
    else:
        given, source = os.environ.get("DROVER_SCHEMA") or "", "DROVER_SCHEMA"
        if not given:
            return None
    try:
        return check_schema_name(source, given)
    except drover.InvalidArgument as exc:
        usage(str(exc))


def where(url: str, schema: str | None) -> str:
    """`host:port/dbname`, with the schema when it is not the default, for messages."""
    target = describe_target(url)
    return target if schema in (None, "public") else f"{target} (schema {schema})"


def database_error(url: str, exc: drover.DatabaseError) -> NoReturn:
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    fail(f"cannot use the database at {describe_target(url)}: {first_line}")


@contextmanager
def open_inspector(g: Globals, workers: drover.Workers | None = None) -> Iterator[drover.Inspector]:
    """Check the database answers and carries drover's current schema, then open an Inspector."""
    url = url_of(g)
    schema = schema_of(g)
    try:
        status = drover.migration_status(url, schema=schema)
    except drover.DatabaseError as exc:
        database_error(url, exc)
    if not status.applied:
        fail(
            f"drover's schema is missing from {where(url, schema)}: "
            f"run `{MIGRATE_COMMAND.get()}` first"
        )
    if status.pending:
        latest = status.pending[-1].version
        fail(
            f"the database schema at {where(url, schema)} is at version "
            f"{status.current_version} but this drover needs {latest}: "
            f"run `{MIGRATE_COMMAND.get()}`"
        )
    inspector = drover.Inspector(url, workers=workers, schema=schema)
    try:
        yield inspector
    except drover.DatabaseError as exc:
        database_error(url, exc)
    finally:
        inspector.close()
