"""The database layer: the only part of drover that executes SQL.

``drover._db.store.Store`` is its door for everything that runs on
drover's own connections (the client, the Inspector, the background
services, the test helpers); ``drover._db.caller`` runs drover's
statements inside a caller's open transaction (``insert_tx``,
``complete_tx``, the framework integrations). Everything returns drover
types and raises drover exceptions.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import psycopg

__all__ = ["Connection"]

Connection: TypeAlias = psycopg.Connection[Any]
"""A psycopg connection, as drover's database layer passes it around."""
