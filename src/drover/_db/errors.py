"""Turns psycopg and pool exceptions into drover's exception tree."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import psycopg
import psycopg_pool
from psycopg import errors as pgerrors

from drover.errors import DatabaseError, PermissionDenied, SchemaMissing

__all__ = ["naming_role", "permission_denied", "redact", "translate"]

# libpq never echoes a password, but a conninfo string we format into a
# message might carry one; scrub both URI and key=value spellings.
_URI_PASSWORD = re.compile(r"(postgres(?:ql)?://[^:/@\s]*:)[^@\s]*@")
_KV_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with any connection password replaced by ``***``."""
    return _KV_PASSWORD.sub(r"\1***", _URI_PASSWORD.sub(r"\1***@", text))


def permission_denied(action: str, exc: psycopg.Error, role: str | None = None) -> PermissionDenied:
    """``drover.PermissionDenied`` for a 42501 raised while doing ``action``.

    One line: the action, the role (when the caller knows the connection's
    user), the server's own words (which name the table, schema or function
    refused) and the pointer to ``drover roles``.
    """
    text = str(exc).strip()
    reason = redact(text.splitlines()[0]) if text else "permission denied"
    who = f"role {role!r}" if role else "this role"
    return PermissionDenied(
        f"{action}: {who} may not do this ({reason}); "
        "`drover roles` prints the grants for producer, worker and reader roles",
        action=action,
        role=role,
    )


@contextlib.contextmanager
def naming_role(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """Re-raise a ``PermissionDenied`` from the block naming ``conn``'s user as the role."""
    try:
        yield
    except PermissionDenied as exc:
        cause = exc.__cause__
        if exc.role is not None or not isinstance(cause, psycopg.Error):
            raise
        raise permission_denied(exc.action, cause, conn.info.user) from cause


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
    except pgerrors.InsufficientPrivilege as exc:
        raise permission_denied(action, exc) from exc
    except psycopg_pool.PoolTimeout as exc:
        raise DatabaseError(
            f"{action}: no database connection became available in time "
            f"({redact(str(exc).strip())})"
        ) from exc
    except psycopg.Error as exc:
        raise DatabaseError(f"{action}: {redact(str(exc).strip())}") from exc
