"""Fixtures for the tests against a real PgBouncer in transaction mode (see ``bouncer.py``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from bouncer import Bouncer, require_pgbouncer
from jobdb import idle_workers

import drover


@pytest.fixture(scope="session")
def bouncer(pg_server: str) -> Iterator[Bouncer]:
    """One pgbouncer per test session (per xdist worker) in front of the test server."""
    b = Bouncer(require_pgbouncer(), pg_server)
    b.start()
    yield b
    b.stop()


@pytest.fixture
def pgb_url(bouncer: Bouncer, db_url: str) -> str:
    """The test's own database, through pgbouncer."""
    dbname = psycopg.conninfo.conninfo_to_dict(db_url)["dbname"]
    return bouncer.url(str(dbname))


@pytest.fixture
def make_pgb_client(pgb_url: str) -> Iterator[Callable[..., drover.Client]]:
    """Build clients connected through pgbouncer; any left running are stopped at teardown."""
    made: list[drover.Client] = []

    def make(config: drover.Config | None = None, **fields: Any) -> drover.Client:
        fields.setdefault("workers", idle_workers())
        cfg = config if config is not None else drover.Config(**fields)
        client = drover.Client(pgb_url, cfg)
        made.append(client)
        return client

    yield make
    for client in made:
        if client.running:
            with contextlib.suppress(drover.DrainIncomplete):
                client.stop(timeout=5)
        client.close()
