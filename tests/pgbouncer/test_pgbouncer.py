"""drover's inserts, reads, status page and command line through a real PgBouncer in
transaction mode (ADR 0040): no prepared statement and no session state may leak
across its server sessions."""

from __future__ import annotations

import asyncio
import contextlib
from contextlib import closing
from typing import Any

import psycopg
import pytest
from bouncer import Bouncer
from clihelp import cli, ok
from werkzeug.test import Client as WsgiClient

import drover
from drover._db.pool import behind_pooler
from drover._db.queries import load_migrations
from drover.web import make_app

Conn = psycopg.Connection[tuple[Any, ...]]

RUNS = 12
"""More than psycopg's prepare_threshold (5): enough runs of one statement to prepare it."""


class Note(drover.JobArgs, kind="pgb_note"):
    text: str


def _two_server_sessions(url: str) -> None:
    # Two transactions open at once force pgbouncer to hold two server
    # sessions for the database; with server_round_robin a client's next
    # transactions then alternate between them.
    with psycopg.connect(url) as a, psycopg.connect(url) as b:
        a.execute("SELECT 1")
        b.execute("SELECT 1")


def test_psycopgs_prepared_statements_break_through_pgbouncer(pgb_url: str) -> None:
    """The failure drover avoids: psycopg's default prepare_threshold behind PgBouncer 1.18."""
    _two_server_sessions(pgb_url)
    with psycopg.connect(pgb_url, autocommit=True) as conn:
        for _ in range(5):  # the fifth run prepares it, on one server session
            conn.execute("SELECT %s::int", (1,))
        with pytest.raises(psycopg.errors.Error, match="prepared statement"):
            # The next transaction runs on the other session, which never saw it.
            conn.execute("SELECT %s::int", (1,))


def test_a_pooler_is_detected_and_a_direct_connection_is_not(pgb_url: str, db_url: str) -> None:
    with psycopg.connect(pgb_url, autocommit=True) as through, psycopg.connect(db_url) as direct:
        assert behind_pooler(through)
        assert not behind_pooler(direct)


def test_inserts_and_reads_through_pgbouncer(pgb_url: str, conn: Conn) -> None:
    _two_server_sessions(pgb_url)
    with closing(drover.Client(pgb_url)) as client:
        rows = [client.insert(Note(text=f"n{i}")) for i in range(RUNS)]
        found = [client.get_job(r.id) for r in rows]
        assert [None if j is None else j.args["text"] for j in found] == [
            f"n{i}" for i in range(RUNS)
        ]
        assert client._store.pool.pooled is True  # type: ignore[attr-defined]
    count = conn.execute("SELECT count(*) FROM drover_jobs WHERE kind = 'pgb_note'").fetchone()
    assert count == (RUNS,)


def test_config_pgbouncer_true_skips_the_detection(pgb_url: str) -> None:
    _two_server_sessions(pgb_url)
    with closing(drover.Client(pgb_url, drover.Config(pgbouncer=True))) as client:
        for i in range(RUNS):
            client.insert(Note(text=str(i)))
        assert client._store.pool.pooled is True  # type: ignore[attr-defined]


def test_insert_many_by_copy_direct_and_staged_through_pgbouncer(pgb_url: str, conn: Conn) -> None:
    _two_server_sessions(pgb_url)
    with closing(drover.Client(pgb_url)) as client:
        for round_ in range(RUNS):
            direct = client.insert_many([Note(text=f"d{round_}.{i}") for i in range(50)])
            assert len(direct) == 50
            # Tags go through the per-transaction staging table (a temp table
            # dropped at commit: transaction-scoped, so fine behind the pooler).
            staged = client.insert_many(
                [(Note(text=f"s{round_}.{i}"), drover.InsertOpts(tags=["pgb"])) for i in range(20)]
            )
            assert [r.args["text"] for r in staged] == [f"s{round_}.{i}" for i in range(20)]
    found = conn.execute("SELECT count(*) FROM drover_jobs WHERE 'pgb' = ANY (tags)").fetchone()
    assert found == (20 * RUNS,)


def test_insert_tx_on_the_callers_own_connection_through_pgbouncer(
    pgb_url: str, conn: Conn
) -> None:
    """The caller's connection is the caller's: configured with prepare_threshold=None,
    as psycopg documents for PgBouncer, drover's statements in its transactions work."""
    _two_server_sessions(pgb_url)
    client = drover.Client(pgb_url)
    try:
        with psycopg.connect(pgb_url, prepare_threshold=None) as mine:
            for i in range(RUNS):
                with mine.transaction():
                    client.insert_tx(mine, Note(text=f"tx{i}"))
                    client.insert_many_tx(mine, [Note(text=f"txm{i}")])
            with contextlib.suppress(LookupError), mine.transaction():
                client.insert_tx(mine, Note(text="rolled back"))
                raise LookupError("the caller's transaction fails")
    finally:
        client.close()
    texts = {
        str(r[0])
        for r in conn.execute("SELECT args->>'text' FROM drover_jobs WHERE kind = 'pgb_note'")
    }
    assert texts == {f"tx{i}" for i in range(RUNS)} | {f"txm{i}" for i in range(RUNS)}


def test_inspector_and_status_page_through_pgbouncer(pgb_url: str) -> None:
    _two_server_sessions(pgb_url)
    with closing(drover.Client(pgb_url)) as client:
        job = client.insert(Note(text="shown"))
    with drover.Inspector(pgb_url) as inspector:
        page = WsgiClient(make_app(inspector))
        for path in ["/", "/jobs", f"/jobs/{job.id}", "/workers", "/health", "/limits"] * RUNS:
            response = page.get(path, headers={"Host": "status.example"})
            assert response.status_code == 200, (path, response.get_data(as_text=True)[:500])
        assert inspector.stats().depths
        assert inspector._store.behind_pooler()


def test_cli_jobs_and_stats_through_pgbouncer(pgb_url: str, bouncer: Bouncer) -> None:
    with closing(drover.Client(pgb_url)) as client:
        job = client.insert(Note(text="listed"))
    for _ in range(2):
        assert "pgb_note" in ok(cli(pgb_url, "jobs", "list"))
        assert "listed" in ok(cli(pgb_url, "jobs", "get", str(job.id)))
        assert "default" in ok(cli(pgb_url, "stats"))


def test_migrate_through_pgbouncer(bouncer: Bouncer, empty_db_url: str) -> None:
    """Each migration is one transaction under a transaction-level lock: fine behind the pooler."""
    url = bouncer.url(str(psycopg.conninfo.conninfo_to_dict(empty_db_url)["dbname"]))
    drover.migrate(url)
    status = drover.migration_status(url)
    assert status.up_to_date
    assert status.current_version == load_migrations()[-1].version


def test_async_client_inserts_through_pgbouncer(pgb_url: str, conn: Conn) -> None:
    _two_server_sessions(pgb_url)

    async def main() -> None:
        async with drover.AsyncClient(pgb_url) as client:
            for i in range(RUNS):
                await client.insert(Note(text=f"a{i}"))
            await client.insert_many([Note(text="am") for _ in range(RUNS)])

    asyncio.run(main())
    found = conn.execute("SELECT count(*) FROM drover_jobs WHERE kind = 'pgb_note'").fetchone()
    assert found == (2 * RUNS,)
