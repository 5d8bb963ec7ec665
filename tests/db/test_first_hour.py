"""What a new user hits first (a wrong URL, a database never migrated) fails fast, saying why."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import psycopg_pool
import pytest
from conftest import url_for
from jobdb import idle_workers

import drover
from drover._db.migrator import _apply_next
from drover._db.pool import OwnedPool
from drover._db.queries import load_migrations

MakeClient = Callable[..., drover.Client]
PASSWORD = "s3cret-pw"
REFUSED = f"postgresql://drover:{PASSWORD}@127.0.0.1:1/nowhere?connect_timeout=5"
FAST = 15.0
"""Half the pool's 30 s timeout, which is what a caller used to wait: a refusal is
seen at once, but a busy machine may take seconds to start the attempt."""


class Hello(drover.JobArgs, kind="first_hour_hello"):
    pass


def _timed(call: Callable[[], object]) -> tuple[BaseException, float]:
    started = time.monotonic()
    with pytest.raises(drover.DroverError) as raised:
        call()
    return raised.value, time.monotonic() - started


def test_insert_against_a_refusing_server_fails_at_once_with_the_reason() -> None:
    client = drover.Client(REFUSED)
    try:
        error, elapsed = _timed(lambda: client.insert(Hello()))
        assert isinstance(error, drover.DatabaseError)
        assert elapsed < FAST, f"took {elapsed:.1f}s"
        text = str(error)
        assert "cannot connect to the database at 127.0.0.1:1/nowhere" in text
        assert "refused" in text.lower()  # the server's own reason, not a pool timeout
        assert PASSWORD not in text
        assert isinstance(error.__cause__, psycopg.OperationalError)
        # Every later call fails the same way, just as fast.
        again, elapsed = _timed(lambda: client.insert(Hello()))
        assert elapsed < FAST and "refused" in str(again).lower()
    finally:
        client.close()


def test_start_against_a_refusing_server_fails_at_once_and_starts_nothing() -> None:
    client = drover.Client(REFUSED, drover.Config(workers=idle_workers()))
    try:
        error, elapsed = _timed(client.start)
        assert isinstance(error, drover.DatabaseError) and elapsed < FAST
        assert str(error).startswith("start: cannot connect to the database at 127.0.0.1:1/")
        assert not client.running
        assert client.ready() == (False, "not started")
    finally:
        client.close()


def test_an_unresolvable_port_fails_fast_with_the_reason() -> None:
    client = drover.Client(f"postgresql://drover:{PASSWORD}@localhost:notaport/db")
    try:
        error, elapsed = _timed(lambda: client.insert(Hello()))
        assert isinstance(error, drover.DatabaseError) and elapsed < FAST
        assert "localhost:notaport/db" in str(error) and PASSWORD not in str(error)
    finally:
        client.close()


def test_an_unknown_database_names_it(pg_server: str) -> None:
    client = drover.Client(url_for(pg_server, "drover_no_such_db"))
    try:
        error, elapsed = _timed(lambda: client.insert(Hello()))
        assert isinstance(error, drover.DatabaseError) and elapsed < FAST
        assert 'database "drover_no_such_db" does not exist' in str(error)
    finally:
        client.close()


@pytest.mark.parametrize(
    "conninfo",
    [
        f"host=localhost password={PASSWORD} nonsense_option=1",
        f"dbname='unterminated password={PASSWORD}",
    ],
)
def test_a_malformed_url_is_refused_when_the_client_is_built(conninfo: str) -> None:
    with pytest.raises(drover.InvalidArgument, match="database URL cannot be parsed") as raised:
        drover.Client(conninfo)
    assert PASSWORD not in str(raised.value)


def test_start_on_a_database_never_migrated_refuses_naming_drover_migrate(
    empty_db_url: str,
) -> None:
    client = drover.Client(empty_db_url, drover.Config(workers=idle_workers()))
    try:
        with pytest.raises(drover.SchemaMissing, match="run `drover migrate`") as raised:
            client.start()
        assert "schema is missing" in str(raised.value)
        assert not client.running  # and no drover-* thread runs (the autouse check)
        # Still startable once the schema is there.
        drover.migrate(empty_db_url)
        client.start()
        assert client.running
        client.stop(timeout=5)
    finally:
        client.close()


def test_start_on_an_outdated_schema_refuses_with_both_versions(empty_db_url: str) -> None:
    migrations = load_migrations()
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        assert _apply_next(conn, migrations[:1]) == migrations[0]

    def enter(client: drover.Client) -> None:
        with client:
            pytest.fail("the with block must not be entered")

    for start in (drover.Client.start, enter):
        client = drover.Client(empty_db_url, drover.Config(workers=idle_workers()))
        try:
            with pytest.raises(drover.SchemaMissing) as raised:
                start(client)
            text = str(raised.value)
            assert f"at version {migrations[0].version}" in text
            assert f"needs {migrations[-1].version}" in text
        finally:
            client.close()


def test_insert_on_a_database_never_migrated_is_schema_missing(empty_db_url: str) -> None:
    client = drover.Client(empty_db_url)
    try:
        with pytest.raises(drover.SchemaMissing, match="drover migrate"):
            client.insert(Hello())
    finally:
        client.close()


def test_client_get_job_of_a_missing_job_is_not_found_as_in_the_inspector(db_url: str) -> None:
    client = drover.Client(db_url)
    try:
        row = client.insert(Hello())
        assert client.get_job(row.id) == row
        with pytest.raises(drover.NotFound, match=f"job {row.id + 1} does not exist"):
            client.get_job(row.id + 1)
        with drover.Inspector(db_url) as inspector, pytest.raises(drover.NotFound):
            inspector.get_job(row.id + 1)
        # One implementation, one check: the same refusals from both.
        for reader in (client, inspector):
            with pytest.raises(drover.InvalidArgument, match="job id must be an int"):
                reader.get_job("1")  # type: ignore[arg-type]
            with pytest.raises(drover.InvalidArgument, match="between 1 and 9223372036854775807"):
                reader.get_job(0)
    finally:
        client.close()


def test_a_pool_that_cannot_grow_still_serves_from_the_connections_it_has(
    db_url: str, conn: psycopg.Connection[tuple[object, ...]], poll: Callable[..., Any]
) -> None:
    # A role allowed one connection: the pool's first connection works, every
    # attempt to grow is refused. A borrower must wait for the connection in
    # use to come back, not fail fast as if the database were unreachable.
    role = f"drover_limited_{os.getpid()}"
    conn.execute(f"CREATE ROLE {role} LOGIN CONNECTION LIMIT 1")
    try:
        conn.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}")
        conn.execute(f"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}")
        client = drover.Client(psycopg.conninfo.make_conninfo(db_url, user=role))
        try:
            pool = client._store.pool
            assert isinstance(pool, OwnedPool)
            # The pool's own first connection, alone: two attempts racing for a
            # one-connection role are both refused by the server.
            poll(lambda: pool.attempts.live == 1, message="the pool's first connection")
            client.insert(Hello())
            held = threading.Event()
            release = threading.Event()

            def hold() -> None:
                with pool.connection():
                    held.set()
                    release.wait(10)

            holder = threading.Thread(target=hold, name="holder")
            holder.start()
            assert held.wait(10)
            # Make the pool try to grow, and see that attempt refused.
            with pytest.raises(psycopg_pool.PoolTimeout):
                pool.getconn(timeout=0.5)
            poll(lambda: pool.attempts.down, message="a refused attempt to grow")
            assert "too many connections" in str(pool.attempts.error)
            timer = threading.Timer(1.0, release.set)  # frees it while insert waits
            timer.start()
            try:
                row = client.insert(Hello())
            finally:
                release.set()
                timer.cancel()
                holder.join(10)
            assert row.kind == "first_hour_hello"
        finally:
            client.close()
    finally:
        conn.execute(f"DROP OWNED BY {role}")
        conn.execute(f"DROP ROLE {role}")
