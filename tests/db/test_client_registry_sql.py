"""The registry's refresh under concurrency: clients reaping each other's expired rows."""

from __future__ import annotations

import threading

import psycopg

from drover._db.clients import ClientEntry, client_refresh


def _entry(name: str) -> ClientEntry:
    return ClientEntry(name, name, "host", 1, "0", ("default",), 1)


def test_clients_reaping_each_others_expired_rows_never_deadlock(db_url: str) -> None:
    # A zero TTL leaves every row expired at once, as after a database
    # restart: each refresh upserts its own row and deletes the other's.
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def refresh_many(name: str) -> None:
        try:
            with psycopg.connect(db_url, autocommit=True) as conn:
                start.wait(10)
                for _ in range(150):
                    client_refresh(conn, _entry(name), running=0, ttl_seconds=0, started_at=None)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=refresh_many, args=(f"c{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not [t for t in threads if t.is_alive()]
    assert errors == []
