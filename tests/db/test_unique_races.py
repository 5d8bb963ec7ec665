"""Uniqueness, debounce and throttle under concurrent inserts: 2 clients x 8 threads.

Every thread of both clients (each with its own pool) starts at one barrier
and inserts the same identity; the unique index decides, so exactly one job
exists afterwards and exactly one insert reports that it made it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import drover

Conn = psycopg.Connection[tuple[Any, ...]]

CLIENTS = 2
THREADS = 8


class Refresh(drover.JobArgs, kind="refresh"):
    doc: int
    version: int = 0


def _race(
    db_url: str, insert: Callable[[drover.Client, int], drover.JobRow], total: int
) -> list[drover.JobRow]:
    """Run ``insert(client, n)`` for n in 0..total-1 across 2 clients x 8 threads."""
    clients = [drover.Client(db_url) for _ in range(CLIENTS)]
    barrier = threading.Barrier(CLIENTS * THREADS)
    results: list[drover.JobRow] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(client: drover.Client, slot: int) -> None:
        try:
            barrier.wait(timeout=30)
            for n in range(slot, total, CLIENTS * THREADS):
                row = insert(client, n)
                with lock:
                    results.append(row)
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=run, args=(clients[slot % CLIENTS], slot))
        for slot in range(CLIENTS * THREADS)
    ]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    finally:
        for client in clients:
            client.close()
    assert not errors, errors
    assert len(results) == total
    return results


def _jobs(conn: Conn) -> list[tuple[Any, ...]]:
    return conn.execute("SELECT id, args, state::text FROM drover_jobs ORDER BY id").fetchall()


@pytest.mark.slow
def test_unique_by_args_race_makes_one_job(db_url: str, conn: Conn) -> None:
    opts = drover.InsertOpts(unique=drover.Unique(by_args=["doc"]))
    rows = _race(db_url, lambda c, n: c.insert(Refresh(doc=1, version=n), opts), 160)
    jobs = _jobs(conn)
    assert len(jobs) == 1
    assert {r.id for r in rows} == {jobs[0][0]}
    assert sum(not r.duplicate for r in rows) == 1


@pytest.mark.slow
def test_unique_race_through_insert_many(db_url: str, conn: Conn) -> None:
    opts = drover.InsertOpts(unique=drover.Unique(by_args=["doc"]))

    def insert(client: drover.Client, n: int) -> drover.JobRow:
        batch = client.insert_many([(Refresh(doc=d, version=n), opts) for d in range(5)])
        return batch[n % 5]

    _race(db_url, insert, 64)
    jobs = _jobs(conn)
    assert sorted(j[1]["doc"] for j in jobs) == [0, 1, 2, 3, 4]


@pytest.mark.slow
def test_debounce_race_keeps_one_job_with_a_sent_version(
    db_url: str, conn: Conn, make_client: Callable[..., drover.Client]
) -> None:
    opts = drover.InsertOpts(debounce=timedelta(seconds=1), unique=drover.Unique(by_args=["doc"]))
    rows = _race(db_url, lambda c, n: c.insert(Refresh(doc=7, version=n), opts), 100)
    jobs = _jobs(conn)
    assert len(jobs) == 1
    job_id, args, state = jobs[0]
    assert state == "scheduled"
    assert {r.id for r in rows} == {job_id}
    assert sum(not r.duplicate for r in rows) == 1
    assert 0 <= args["version"] < 100

    # The burst runs once, with the args of the last update to commit.
    ran: list[int] = []
    done = threading.Event()
    workers = drover.Workers()

    @workers.register
    def refresh(job: drover.Job[Refresh]) -> None:
        ran.append(job.args.version)
        done.set()

    worker = make_client(workers=workers, poll_interval=0.05)
    worker.start()
    assert done.wait(timeout=30)
    worker.stop(timeout=10)
    assert ran == [args["version"]]
    assert len(_jobs(conn)) == 1


@pytest.mark.slow
def test_throttle_race_keeps_the_first(db_url: str, conn: Conn) -> None:
    opts = drover.InsertOpts(throttle=timedelta(minutes=5), unique=drover.Unique(by_args=["doc"]))
    rows = _race(db_url, lambda c, n: c.insert(Refresh(doc=3, version=n), opts), 100)
    jobs = _jobs(conn)
    assert len(jobs) == 1
    first = [r for r in rows if not r.duplicate]
    assert len(first) == 1
    assert jobs[0][1]["version"] == first[0].args["version"]
    assert all(r.id == jobs[0][0] for r in rows)
