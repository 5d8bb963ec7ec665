"""drover's pytest plugin (registered as ``pytest11`` entry point ``drover``).

Fixtures, all on the real database your tests use:

- ``drover_database_url``: ``[pytest] drover_database_url`` from the ini file,
  else ``$DROVER_TEST_DATABASE_URL``, else ``$DATABASE_URL``; a test asking for
  drover fixtures without one is skipped with a message saying so.
- ``drover_migrated``: the URL, after ``drover.migrate`` (once per session).
- ``drover_config``: the ``drover.Config`` for ``drover_client``
  (override it in your ``conftest.py`` to pass your ``Workers``).
- ``drover_client``: a ``drover.Client`` on that database, not started,
  closed after the test.
- ``drover_jobs``: a ``drover.testing.Jobs`` for the jobs the test inserts.

Nothing connects until a test asks for one of these.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

import drover
from drover.testing import Jobs

__all__ = [
    "drover_client",
    "drover_config",
    "drover_database_url",
    "drover_jobs",
    "drover_migrated",
]


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the ``drover_database_url`` ini option."""
    parser.addini("drover_database_url", "PostgreSQL URL for drover's fixtures", default="")


@pytest.fixture(scope="session")
def drover_database_url(pytestconfig: pytest.Config) -> str:
    """Where drover's fixtures connect (see the module docstring)."""
    url = str(pytestconfig.getini("drover_database_url") or "")
    url = url or os.environ.get("DROVER_TEST_DATABASE_URL") or os.environ.get("DATABASE_URL") or ""
    if not url:
        pytest.skip(
            "drover fixtures need a database: set drover_database_url in the pytest ini file, "
            "or DROVER_TEST_DATABASE_URL / DATABASE_URL"
        )
    return url


@pytest.fixture(scope="session")
def drover_migrated(drover_database_url: str) -> str:
    """The database URL, with drover's schema up to date (idempotent, safe across workers)."""
    drover.migrate(drover_database_url)
    return drover_database_url


@pytest.fixture
def drover_config() -> drover.Config:
    """The Config ``drover_client`` is built with; override it to register your workers."""
    return drover.Config()


@pytest.fixture
def drover_client(drover_migrated: str, drover_config: drover.Config) -> Iterator[drover.Client]:
    """A client on the test database (not started), closed after the test."""
    client = drover.Client(drover_migrated, drover_config)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def drover_jobs(drover_client: drover.Client) -> Jobs:
    """The jobs this test inserts: ``assert_enqueued``, ``assert_not_enqueued``, ``drain``."""
    return Jobs(drover_client)
