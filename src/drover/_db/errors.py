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

__all__ = ["TRANSIENT_KINDS", "classify", "naming_role", "permission_denied", "redact", "translate"]

# libpq never echoes a password, but a conninfo string we format into a
# message might carry one; scrub both URI and key=value spellings.
_URI_PASSWORD = re.compile(r"(postgres(?:ql)?://[^:/@\s]*:)[^@\s]*@")
_KV_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with any connection password replaced by ``***``."""
    return _KV_PASSWORD.sub(r"\1***", _URI_PASSWORD.sub(r"\1***@", text))


TRANSIENT_KINDS = ("connection", "statement_timeout", "lock_timeout", "conflict")
"""What ``classify`` calls a failure worth retrying as it is (the rest are ``"other"``)."""

# SQLSTATE classes of failures that retrying the same statement can cure: the
# connection (08), the server's resources ("too many connections" is 53300),
# an operator or the server ending the session (57P, not 57014: that is a
# cancel, told apart below).
_CONNECTION_CLASSES = ("08", "53", "57P")


def classify(exc: BaseException) -> str:
    """Why a database call failed, as one of ``TRANSIENT_KINDS`` or ``"other"``.

    Follows the exception's chain (``__cause__``, then ``__context__``, which
    ``raise ... from None`` keeps), so a ``drover.DatabaseError`` is classified
    by the psycopg or pool error behind it. ``"connection"``: no connection
    could be had (refused, lost, the pool timed out, the server's connection
    limits); ``"statement_timeout"`` and ``"lock_timeout"``: the server's own
    timeouts (a role's or database's ``SET``); ``"conflict"``: a serialization
    failure or deadlock. Anything else (a bug, a constraint, a missing
    privilege) is ``"other"``: retrying it unchanged does not help.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, pgerrors.LockNotAvailable):
            return "lock_timeout"
        if isinstance(current, pgerrors.QueryCanceled):
            return "statement_timeout"
        if isinstance(current, pgerrors.SerializationFailure | pgerrors.DeadlockDetected):
            return "conflict"
        if isinstance(current, psycopg_pool.PoolTimeout):
            return "connection"
        if isinstance(current, psycopg.Error):
            state = current.sqlstate
            if state is None:
                # libpq's own failures (refused, reset, closed) carry no SQLSTATE.
                return "connection" if isinstance(current, psycopg.OperationalError) else "other"
            return "connection" if state.startswith(_CONNECTION_CLASSES) else "other"
        current = current.__cause__ or current.__context__
    return "other"


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
