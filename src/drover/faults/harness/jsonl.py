"""JSON-lines files, as the fault harness writes and reads them.

One compact JSON object per line, written whole or not at all by its
writer; a SIGKILL can at worst cut a file's last line short, and readers
drop such a line. ``HistoryFile`` is the writer a process under faults
appends to; ``Fields`` gives typed access to one record, every error naming
the file and line it came from.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["Fields", "HistoryFile", "dump_records", "read_records"]


class HistoryFile:
    """An append-only JSON-lines file: one ``os.write`` per record, safe across SIGKILL.

    Thread-safe (each record is a single write to an ``O_APPEND`` file): a
    record written before a SIGKILL survives it; one written after never was.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, **record: Any) -> None:
        """Append one record (a single write of one line)."""
        os.write(self._fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())

    def close(self) -> None:
        """Close the file; later writes raise ``OSError``."""
        os.close(self._fd)


def dump_records(path: Path, records: Iterable[Mapping[str, Any]], *, append: bool = False) -> None:
    """Write ``records`` to ``path`` as JSON lines (one compact object per line)."""
    with path.open("a" if append else "w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n")


class Fields:
    """Typed access to one record's fields; every error names the file and line.

    ``get_<type>(name)`` returns the field as that type, or raises
    ``ValueError`` naming the file, the line and the field when it is missing
    or of another type; ``get_opt_<type>`` returns None for a missing or null
    field instead. The loader makes one per record; it shares nothing.
    """

    def __init__(self, record: Mapping[str, Any], where: str) -> None:
        self._r = record
        self.where = where

    def has(self, name: str) -> bool:
        """Whether the record has the field (null included)."""
        return name in self._r

    def get_present(self, name: str) -> bool:
        """Whether the field exists and is not null."""
        return self._r.get(name) is not None

    def _get(self, name: str) -> Any:
        if name not in self._r:
            raise ValueError(f"{self.where}: {self._r.get('ev')!r} record has no field {name!r}")
        return self._r[name]

    def _bad(self, name: str, wanted: str) -> ValueError:
        return ValueError(f"{self.where}: field {name!r} must be {wanted}, not {self._r[name]!r}")

    def get_int(self, name: str) -> int:
        """An integer (a JSON ``true`` is not one)."""
        value = self._get(name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._bad(name, "an integer")
        return value

    def get_opt_int(self, name: str) -> int | None:
        """An integer, or None."""
        return None if self._r.get(name) is None else self.get_int(name)

    def get_float(self, name: str) -> float:
        """A finite number, as a float."""
        value = self._get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._bad(name, "a number")
        if not math.isfinite(value):
            raise self._bad(name, "a finite number")
        return float(value)

    def get_opt_float(self, name: str) -> float | None:
        """A finite number, or None."""
        return None if self._r.get(name) is None else self.get_float(name)

    def get_str(self, name: str) -> str:
        """A string."""
        value = self._get(name)
        if not isinstance(value, str):
            raise self._bad(name, "a string")
        return value

    def get_opt_str(self, name: str) -> str | None:
        """A string, or None."""
        return None if self._r.get(name) is None else self.get_str(name)

    def get_bool(self, name: str) -> bool:
        """``true`` or ``false``."""
        value = self._get(name)
        if not isinstance(value, bool):
            raise self._bad(name, "true or false")
        return value

    def get_object(self, name: str) -> dict[str, Any]:
        """A JSON object, as a new dict; ``{}`` for a missing or null field."""
        value = self._r.get(name)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self._bad(name, "an object")
        return dict(value)

    def get_ints(self, name: str) -> tuple[int, ...]:
        """A list of integers, as a tuple; ``()`` for a missing or null field."""
        value = self._r.get(name)
        if value is None:
            return ()
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise self._bad(name, "a list of integers")
        return tuple(value)

    def get_opt_ints_or_nulls(self, name: str) -> tuple[int | None, ...] | None:
        """A list of integers and nulls, as a tuple; None for a missing or null field."""
        value = self._r.get(name)
        if value is None:
            return None
        if not isinstance(value, list) or not all(
            v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in value
        ):
            raise self._bad(name, "a list of integers or nulls")
        return tuple(value)

    def get_errors(self, name: str) -> list[dict[str, Any]]:
        """A list of objects (drover's error entries); ``[]`` for a missing or null field."""
        value = self._r.get(name)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(e, dict) for e in value):
            raise self._bad(name, "a list of objects")
        return [dict(e) for e in value]


def read_records(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """The records of one file, with ``file:line``; a cut-short last line is dropped."""
    data = path.read_bytes()
    lines = data.split(b"\n")
    # A file written line by line ends with "\n", leaving an empty last element;
    # a non-empty last element is a line whose writer never finished it.
    unterminated = len(lines) - 1 if lines[-1] else None
    for index, raw in enumerate(lines):
        if not raw.strip():
            continue
        where = f"{path}:{index + 1}"
        try:
            record = json.loads(raw)
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError alike
            if index == unterminated:
                return  # truncated by a SIGKILL mid-write: never a complete record
            raise ValueError(f"{where}: not a JSON line ({exc})") from None
        if not isinstance(record, dict):
            raise ValueError(
                f"{where}: a record must be a JSON object, not {type(record).__name__}"
            )
        yield where, record
