"""Turns psycopg and pool exceptions into drover's exception tree."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import psycopg
import psycopg_pool
from psycopg import errors as pgerrors

from drover.errors import DatabaseError, SchemaMissing

__all__ = ["redact", "translate"]

# libpq never echoes a password, but a conninfo string we format into a
# message might carry one; scrub both URI and key=value spellings.
_URI_PASSWORD = re.compile(r"(postgres(?:ql)?://[^:/@\s]*:)[^@\s]*@")
_KV_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with any connection password replaced by ``***``."""
    return _KV_PASSWORD.sub(r"\1***", _URI_PASSWORD.sub(r"\1***@", text))


@contextlib.contextmanager
def translate(action: str) -> Iterator[None]:
    """Re-raise psycopg errors raised inside the block as drover errors.

    ``action`` says what drover was doing ("insert job", "migrate") and leads
    the message. A missing drover table or type becomes ``SchemaMissing``.
    """
    try:
        yield
    except (pgerrors.UndefinedTable, pgerrors.UndefinedObject) as exc:
        raise SchemaMissing(
            f"{action}: drover's schema is missing from this database ({redact(str(exc).strip())})"
        ) from exc
    except psycopg_pool.PoolTimeout as exc:
        raise DatabaseError(
            f"{action}: no database connection became available in time "
            f"({redact(str(exc).strip())})"
        ) from exc
    except psycopg.Error as exc:
        raise DatabaseError(f"{action}: {redact(str(exc).strip())}") from exc
