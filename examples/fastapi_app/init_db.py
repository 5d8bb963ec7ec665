"""``python init_db.py``: drover's schema, then the shop's tables (both idempotent)."""

from __future__ import annotations

import os

import psycopg
from models import Base
from sqlalchemy import create_engine

import drover


def init_db(url: str) -> None:
    """Create drover's tables, then the shop's, on ``url``."""
    applied = drover.migrate(url)
    engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(url))
    try:
        Base.metadata.create_all(engine)
    finally:
        engine.dispose()
    print(f"drover: {len(applied)} migration(s) applied; the shop's tables are ready")


if __name__ == "__main__":
    init_db(os.environ["DATABASE_URL"])
