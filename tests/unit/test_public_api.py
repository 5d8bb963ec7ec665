"""The public surface: __all__, docstrings, the exception tree, the version."""

from __future__ import annotations

import inspect
import subprocess
import sys

import drover
import drover.errors


def test_all_is_sorted_and_complete() -> None:
    assert drover.__all__ == sorted(drover.__all__)
    for name in drover.__all__:
        assert hasattr(drover, name), name
    public = {n for n in vars(drover) if not n.startswith("_") and n not in {"annotations"}}
    modules = {n for n in public if inspect.ismodule(getattr(drover, n))}
    assert public - modules - {"version", "PackageNotFoundError"} <= set(drover.__all__)


def test_public_names_have_docstrings() -> None:
    for name in drover.__all__:
        obj = getattr(drover, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue  # type aliases and __version__ are documented in their modules
        assert inspect.getdoc(obj), f"drover.{name} has no docstring"
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if attr.startswith("_") or not callable(member):
                    continue
                assert inspect.getdoc(member), f"drover.{name}.{attr} has no docstring"


def test_every_exception_derives_from_drover_error() -> None:
    for name in drover.errors.__all__:
        cls = getattr(drover.errors, name)
        assert issubclass(cls, drover.DroverError), name
        assert cls.__module__ == "drover"
    assert issubclass(drover.ConfigError, ValueError)
    assert issubclass(drover.InvalidInsertOpts, ValueError)
    assert issubclass(drover.InvalidJobArgs, TypeError)
    assert issubclass(drover.SchemaMissing, drover.DatabaseError)


def test_version_from_metadata_and_cli() -> None:
    assert drover.__version__ not in ("", "0+unknown")
    for argv in (["--version"], ["version"]):
        out = subprocess.run(
            [sys.executable, "-m", "drover", *argv],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        assert out.stdout.strip() == drover.__version__
