"""Conninfo strings and URLs: checked before use, and named in messages without the password."""

from __future__ import annotations

import psycopg

__all__ = ["check_conninfo", "describe_target", "names_application"]


def check_conninfo(conninfo: str, *, connect_timeout: int = 5) -> str:
    """Validate a conninfo string or URL and give it a connect timeout if it has none.

    Raises ``ValueError`` (password-free message) when it cannot be parsed.
    """
    if "\x00" in conninfo:
        # libpq would stop reading at the NUL and connect to what came before.
        raise ValueError("the database URL contains a NUL character")
    scheme, plus, driver = conninfo.partition("://")[0].partition("+")
    if plus and scheme in ("postgresql", "postgres"):
        # SQLAlchemy's dialect+driver form; libpq knows only postgresql://.
        raise ValueError(
            f"the database URL names a SQLAlchemy driver ({scheme}+{driver}://): drover "
            f"takes a libpq URL, so write it as {scheme}://... (drop '+{driver}')"
        )
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        # libpq's message quotes the offending text, which may be the password.
        raise ValueError(
            "the database URL cannot be parsed: check its syntax, parameter names and "
            "percent-encoding"
        ) from None
    if "connect_timeout" in params:
        return conninfo
    return psycopg.conninfo.make_conninfo(conninfo, connect_timeout=connect_timeout)


def names_application(conninfo: str) -> bool:
    try:
        return "application_name" in psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return False


def describe_target(conninfo: str) -> str:
    """``host:port/dbname`` of a conninfo string, never its password."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "the database"
    host = str(params.get("host") or "localhost")
    port = str(params.get("port") or "5432")
    return f"{host}:{port}/{params.get('dbname') or ''}"
