"""Which PostgreSQL schema a drover installation lives in, and what follows from it (ADR 0043).

A ``Namespace`` is the one value the database layer threads through every
statement it runs: it names the schema drover's objects are qualified with,
the notification channels, and the advisory-lock keys. ``DEFAULT`` (no schema
given, or ``"public"``) is drover as it always was: unqualified SQL resolved by
the connection's ``search_path``, the channels ``drover``, ``drover_cancel``
and ``drover_done``, and the fixed lock keys, so existing installations keep
working untouched and mix with clients that never heard of schemas.

Any other schema gets SQL text qualified with its (validated, quoted) name,
channels of its own (``drover.<schema>``) and lock keys of its own, so two
installations in one database never see each other's jobs, wake-ups, leaders
or locks. Immutable and hashable: the rendered queries are cached per
``(schema, query name)``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from drover.errors import InvalidArgument

__all__ = ["DEFAULT", "Namespace", "check_identifier", "check_schema_name", "namespace_for"]

_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_MAX_CHANNEL = 63  # NAMEDATALEN - 1: pg_notify refuses a longer channel


def check_identifier(
    what: str, name: object, error: type[InvalidArgument] = InvalidArgument
) -> str:
    """``name`` if it is a plain PostgreSQL name: 1 to 63 lowercase letters, digits
    and ``_``, not starting with a digit; else ``error`` naming ``what``.

    Such a name means the same quoted or not, so printed SQL (``drover roles``)
    needs no quoting and a quoted one is exactly what the user typed.
    """
    if not isinstance(name, str) or not _NAME.match(name):
        raise error(
            f"{what} must be 1 to 63 lowercase letters, digits and _ not starting "
            f"with a digit, got {name!r}"
        )
    return name


def check_schema_name(
    what: str, name: object, error: type[InvalidArgument] = InvalidArgument
) -> str:
    """``name`` if it may hold drover: a plain name (``check_identifier``) not
    starting with ``pg_`` (reserved by PostgreSQL); else ``error`` naming ``what``.

    The one validator behind ``Config(schema=...)``, ``migrate(schema=...)``,
    ``Inspector(schema=...)``, ``AsyncClient`` and every CLI ``--schema``.
    """
    checked = check_identifier(what, name, error)
    if checked.startswith("pg_"):
        raise error(f"{what} may not start with pg_ (reserved by PostgreSQL), got {name!r}")
    return checked


def _lock_mix(schema: str) -> int:
    return int.from_bytes(hashlib.blake2b(schema.encode(), digest_size=8).digest(), "big")


@dataclass(frozen=True, slots=True)
class Namespace:
    """The schema of one drover installation; ``schema`` is ``None`` for the default."""

    schema: str | None = None

    @property
    def default(self) -> bool:
        """True for drover as it always was: unqualified SQL, the historic channels and keys."""
        return self.schema is None

    @property
    def label(self) -> str:
        """The schema's name for messages (``public`` for the default)."""
        return self.schema or "public"

    def channel(self, base: str) -> str:
        """The notification channel ``base`` (``drover``, ``drover_cancel``, ``drover_done``)
        of this installation: ``base`` itself by default, else ``<base>.<schema>``.

        A dot cannot occur in a schema name, so no schema's channel is another's.
        A channel longer than PostgreSQL's 63 bytes keeps a prefix of the schema
        and a digest of the whole name.
        """
        if self.schema is None:
            return base
        full = f"{base}.{self.schema}"
        if len(full) <= _MAX_CHANNEL:
            return full
        digest = hashlib.blake2b(self.schema.encode(), digest_size=6).hexdigest()
        keep = _MAX_CHANNEL - len(base) - 2 - len(digest)
        return f"{base}.{self.schema[:keep]}~{digest}"

    def lock_key(self, base: int) -> int:
        """A 64-bit advisory-lock key: ``base`` by default, else ``base`` mixed with
        a digest of the schema's name (stable across processes and versions)."""
        if self.schema is None:
            return base
        mixed = (base ^ _lock_mix(self.schema)) & 0xFFFF_FFFF_FFFF_FFFF
        return mixed - (1 << 64) if mixed >= 1 << 63 else mixed


DEFAULT = Namespace()
"""drover in the connection's ``search_path`` (normally ``public``), exactly as before schemas."""


def namespace_for(
    schema: str | None, what: str = "schema", error: type[InvalidArgument] = InvalidArgument
) -> Namespace:
    """The namespace of ``schema`` (checked by ``check_schema_name``): ``DEFAULT`` for
    ``None`` and ``"public"``, so naming public explicitly changes nothing."""
    if schema is None:
        return DEFAULT
    checked = check_schema_name(what, schema, error)
    return DEFAULT if checked == "public" else Namespace(checked)
