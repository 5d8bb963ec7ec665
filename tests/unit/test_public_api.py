"""The public surface: __all__, docstrings, the exception tree, the version."""

from __future__ import annotations

import inspect
import re
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
            # Methods a class inherits from drover's own base classes (such as
            # Client's inserts, in drover._client_inserts) count as its own.
            for base in obj.__mro__:
                if not base.__module__.startswith("drover"):
                    continue
                for attr, member in vars(base).items():
                    if attr.startswith("_") or not callable(member):
                        continue
                    assert inspect.getdoc(member), f"drover.{name}.{attr} has no docstring"


def _drawn_tree() -> dict[str, tuple[str | None, set[str]]]:
    """``{class: (drover parent, builtin bases)}`` as errors.py's docstring draws the tree."""
    drawn: dict[str, tuple[str | None, set[str]]] = {}
    stack: list[tuple[int, str]] = []
    for line in (drover.errors.__doc__ or "").splitlines():
        match = re.match(r"^(\s*)(?:[│ ]*[├└]── )?([A-Z][A-Za-z]+)\s+(?:\(([^)]*)\))?", line)
        if not match or not line.startswith("    "):
            continue
        depth = len(line) - len(line.lstrip(" │├└─"))
        name = match.group(2)
        builtins = {b.strip() for b in (match.group(3) or "").split(",") if b.strip()}
        while stack and stack[-1][0] >= depth:
            stack.pop()
        drawn[name] = (stack[-1][1] if stack else None, builtins)
        stack.append((depth, name))
    return drawn


def test_every_exported_exception_is_defined_in_errors_and_drawn_in_its_tree() -> None:
    exported = {
        name
        for name in drover.__all__
        if inspect.isclass(getattr(drover, name))
        and issubclass(getattr(drover, name), BaseException)
    }
    assert exported == set(drover.errors.__all__)
    drawn = _drawn_tree()
    assert set(drawn) == exported, "errors.py's docstring tree and the exports differ"
    for name in exported:
        cls = getattr(drover, name)
        assert vars(drover.errors)[cls.__qualname__] is cls, f"{name} is not defined in errors.py"
        assert cls.__module__ == "drover", name
        assert issubclass(cls, drover.DroverError), name
        parent, builtins = drawn[name]
        drover_bases = [b.__name__ for b in cls.__bases__ if issubclass(b, drover.DroverError)]
        other_bases = {b.__name__ for b in cls.__bases__ if not issubclass(b, drover.DroverError)}
        if name == "DroverError":
            assert parent is None and cls.__bases__ == (Exception,)
            continue
        assert drover_bases == [parent], f"{name} derives from {drover_bases}, drawn under {parent}"
        # The builtin bases drawn in brackets, inherited ones included.
        inherited = {b.__name__ for b in cls.__mro__ if b.__module__ == "builtins"}
        assert other_bases <= builtins, f"{name}: {other_bases} are not drawn"
        assert builtins <= inherited, f"{name} is drawn as {builtins} but is not"


def test_catching_by_builtin_kind_keeps_working() -> None:
    assert issubclass(drover.ConfigError, drover.InvalidArgument)
    assert issubclass(drover.ConfigError, ValueError)
    assert issubclass(drover.InvalidInsertOpts, ValueError)
    assert issubclass(drover.InvalidJobArgs, TypeError)
    assert issubclass(drover.SchemaMissing, drover.DatabaseError)
    assert issubclass(drover.NotFound, LookupError)


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
