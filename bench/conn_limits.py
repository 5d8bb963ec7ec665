"""A worker whose role runs out of connections, and the server's lock timeout on its writes.

    python bench/conn_limits.py                  # embedded PostgreSQL, a 10 s episode, 5 s lock
    python bench/conn_limits.py --episode 30 --url postgresql://...

Three measurements, each on a fresh database as a fresh non-superuser role
(the server's per-role limit and ``ALTER ROLE ... SET`` apply to it; the
superuser connection that drives the test is exempt):

1. ``insert refused``: the role's ``CONNECTION LIMIT 0``; how long
   ``client.insert`` takes to raise ``drover.DatabaseError`` (median and max of
   20, on a client whose pool has never connected).
2. ``exhaustion``: a started worker (default ``Config``, 1 s poll) running;
   two other sessions of the role hold every slot its ``CONNECTION LIMIT``
   allows and the worker's sessions are ended; 50 jobs are inserted (as the
   superuser) and the slots stay taken for ``--episode`` seconds. Reported:
   the fetcher's and all loops' failed database calls in the episode
   (``drover_database_errors_total``), the WARNING-or-worse records the
   worker logged, whether ``/readyz`` said not ready, and, from the moment
   the slots free, how long until the first job completes, all 50 have, and
   the worker is ready again.
3. ``lock timeout``: the role's ``lock_timeout = 100ms``; a running job's
   row is locked by another session for ``--lock`` seconds while its
   handler returns. Reported: the completer's failed writes and how long after
   the lock's release its outcome landed (attempt 1, not rerun).

Figures: docs/reliability.md, "Connection exhaustion and server limits".
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import sql

import drover


class Tick(drover.JobArgs, kind="bench_conn_tick"):
    pass


class Gate(drover.JobArgs, kind="bench_conn_gate"):
    pass


class Counting(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


@contextlib.contextmanager
def _server(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    from drover._db.embedded import embedded_postgres

    with embedded_postgres(tune_for_tests=False) as embedded:
        yield embedded


@contextlib.contextmanager
def _database(admin_url: str, name: str) -> Iterator[tuple[str, psycopg.Connection[Any]]]:
    """A migrated database and a role of its own; yields (the role's URL, a superuser conn)."""
    role = f"{name}_role"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    owner_url = psycopg.conninfo.make_conninfo(admin_url, dbname=name)
    drover.migrate(owner_url)
    try:
        with psycopg.connect(owner_url, autocommit=True) as conn:
            for what in ("TABLES", "SEQUENCES"):
                conn.execute(
                    sql.SQL("GRANT ALL ON ALL {} IN SCHEMA public TO {}").format(
                        sql.SQL(what), sql.Identifier(role)
                    )
                )
            yield psycopg.conninfo.make_conninfo(owner_url, user=role), conn
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def _role(url: str) -> sql.Identifier:
    user = psycopg.conninfo.conninfo_to_dict(url)["user"]
    return sql.Identifier(str(user))


def _wait(predicate: Any, timeout: float) -> float:
    """Seconds until ``predicate()`` holds (polled every 10 ms); raises after ``timeout``."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"not within {timeout}s: {predicate}")
        time.sleep(0.01)
    return time.monotonic() - start


def _errors(client: drover.Client, service: str | None = None) -> float:
    total = 0.0
    for metric in client.metrics_registry.collect():
        for s in metric.samples:
            if s.name == "drover_database_errors_total" and (
                service is None or s.labels["service"] == service
            ):
                total += s.value
    return total


def insert_refused(admin_url: str) -> None:
    with _database(admin_url, "bench_conn_insert") as (url, conn):
        conn.execute(sql.SQL("ALTER ROLE {} CONNECTION LIMIT 0").format(_role(url)))
        took = []
        for _ in range(20):
            client = drover.Client(url)
            try:
                start = time.monotonic()
                with contextlib.suppress(drover.DatabaseError):
                    client.insert(Tick())
                took.append(time.monotonic() - start)
            finally:
                client.close()
    print(
        f"insert refused: median {statistics.median(took) * 1000:.1f} ms, "
        f"max {max(took) * 1000:.1f} ms (20 inserts, pool timeout 30 s)"
    )


def _registry(done: list[float], gate: threading.Event | None = None) -> drover.Workers:
    workers = drover.Workers()

    @workers.register(args=Tick)
    def tick(job: drover.Job[Tick]) -> None:
        done.append(time.monotonic())

    @workers.register(args=Gate)
    def gated(job: drover.Job[Gate]) -> None:
        if gate is not None:
            gate.wait(60)

    return workers


def exhaustion(admin_url: str, episode: float) -> None:
    with _database(admin_url, "bench_conn_exhaust") as (url, conn):
        done: list[float] = []
        counter = Counting()
        logger = logging.getLogger("bench.conn")
        logger.addHandler(counter)
        logger.propagate = False
        client = drover.Client(url, drover.Config(workers=_registry(done), logger=logger))
        client.start()
        try:
            _wait(lambda: client.ready()[0], 30)
            holders = [psycopg.connect(url, autocommit=True) for _ in range(2)]
            mine = [h.info.backend_pid for h in holders]
            conn.execute(sql.SQL("ALTER ROLE {} CONNECTION LIMIT 2").format(_role(url)))
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND usename = %s AND NOT pid = ANY(%s)",
                (psycopg.conninfo.conninfo_to_dict(url)["user"], mine),
            )
            conn.execute(
                "INSERT INTO drover_jobs (kind, queue, args) "
                "SELECT 'bench_conn_tick', 'default', '{}' FROM generate_series(1, 50)"
            )
            unready = False
            deadline = time.monotonic() + episode
            while time.monotonic() < deadline:
                unready = unready or not client.ready()[0]
                time.sleep(0.05)
            fetcher, total, warnings = _errors(client, "fetcher"), _errors(client), counter.count
            conn.execute(sql.SQL("ALTER ROLE {} CONNECTION LIMIT -1").format(_role(url)))
            freed = time.monotonic()
            for holder in holders:
                holder.close()
            first = _wait(lambda: bool(done), 60)
            drained = _wait(lambda: len(done) >= 50, 60) + first
            _wait(lambda: client.ready()[0], 60)
            ready_at = time.monotonic() - freed
        finally:
            client.stop(timeout=5)
            client.close()
    print(
        f"exhaustion ({episode:g} s): fetcher failed {fetcher:.0f} times, all loops {total:.0f}; "
        f"{warnings} WARNING+ record(s); not ready during it: {unready}; after the slots freed: "
        f"first job {first:.2f} s, 50 jobs {drained:.2f} s, ready {ready_at:.2f} s"
    )


def lock_timeout(admin_url: str, hold: float) -> None:
    with _database(admin_url, "bench_conn_lock") as (url, conn):
        conn.execute(sql.SQL("ALTER ROLE {} SET lock_timeout = '100ms'").format(_role(url)))
        gate = threading.Event()
        client = drover.Client(url, drover.Config(workers=_registry([], gate)))
        client.start()
        try:
            job = client.insert(Gate()).id

            def running() -> bool:
                row = conn.execute("SELECT state FROM drover_jobs WHERE id = %s", (job,)).fetchone()
                return row is not None and row[0] == "running"

            _wait(running, 30)
            with psycopg.connect(conn.info.dsn) as locker:
                locker.execute("SELECT 1 FROM drover_jobs WHERE id = %s FOR UPDATE", (job,))
                gate.set()
                time.sleep(hold)
                locker.rollback()
            released = time.monotonic()

            def landed() -> bool:
                row = conn.execute(
                    "SELECT state, attempt FROM drover_jobs WHERE id = %s", (job,)
                ).fetchone()
                return row is not None and tuple(row) == ("completed", 1)

            _wait(landed, 60)
            after = time.monotonic() - released
            failures = _errors(client, "completer")
        finally:
            client.stop(timeout=5)
            client.close()
    print(
        f"lock timeout ({hold:g} s lock, lock_timeout 100 ms): completer failed {failures:.0f} "
        f"times; outcome landed {after:.2f} s after the release, attempt 1"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a server's admin conninfo (default: embedded)")
    parser.add_argument("--episode", type=float, default=10.0, help="seconds out of slots")
    parser.add_argument("--lock", type=float, default=5.0, help="seconds the row stays locked")
    args = parser.parse_args()
    with _server(args.url) as admin_url:
        insert_refused(admin_url)
        exhaustion(admin_url, args.episode)
        lock_timeout(admin_url, args.lock)


if __name__ == "__main__":
    main()
