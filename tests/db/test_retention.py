"""Retention: finished jobs past their age are deleted, in batches, one pruner at a time."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from jobdb import plugin_service, wiring

import drover
from drover._runtime.pruner import Pruner

Conn = psycopg.Connection[tuple[Any, ...]]


class Done(drover.JobArgs, kind="retention_done"):
    n: int = 0


def _plant(conn: Conn, client: drover.Client, state: str, age: str) -> int:
    row = client.insert(Done())
    finalized = (
        "NULL" if state in ("available", "retryable", "scheduled") else f"now() - interval '{age}'"
    )
    conn.execute(
        f"UPDATE drover_jobs SET state = %s::drover_job_state, finalized_at = {finalized} "
        "WHERE id = %s",
        (state, row.id),
    )
    return row.id


def _ids(conn: Conn) -> set[int]:
    return {r[0] for r in conn.execute("SELECT id FROM drover_jobs").fetchall()}


def _pruner(client: drover.Client, retention: drover.Retention) -> Pruner:
    return Pruner(wiring(client), retention=retention, interval=timedelta(seconds=60))


def _threads(client: drover.Client) -> set[str]:
    suffix = f"-{client._id}"
    return {t.name for t in threading.enumerate() if t.name.endswith(suffix)}


def test_defaults() -> None:
    r = drover.Retention()
    assert (r.completed, r.cancelled, r.dead) == (
        timedelta(hours=24),
        timedelta(hours=24),
        timedelta(days=7),
    )
    pruner = drover.Config().plugin("pruner")
    assert pruner == drover.plugins.Pruner()
    assert isinstance(pruner, drover.plugins.Pruner)
    assert pruner.retention == r
    assert pruner.interval == timedelta(seconds=60)
    off = drover.Config(plugins=[drover.plugins.Pruner(retention=None)]).plugin("pruner")
    assert isinstance(off, drover.plugins.Pruner) and off.retention is None


def test_each_state_is_pruned_past_its_own_age(client: drover.Client, conn: Conn) -> None:
    old_completed = _plant(conn, client, "completed", "25 hours")
    new_completed = _plant(conn, client, "completed", "23 hours")
    old_cancelled = _plant(conn, client, "cancelled", "2 days")
    old_dead = _plant(conn, client, "dead", "8 days")
    young_dead = _plant(conn, client, "dead", "6 days")
    waiting = _plant(conn, client, "available", "")
    retrying = _plant(conn, client, "retryable", "")
    deleted = _pruner(client, drover.Retention()).run_once()
    assert deleted == 3
    assert _ids(conn) == {new_completed, young_dead, waiting, retrying}
    assert old_completed not in _ids(conn) and old_cancelled not in _ids(conn)
    assert old_dead not in _ids(conn)


def test_none_keeps_a_state_forever(client: drover.Client, conn: Conn) -> None:
    kept = _plant(conn, client, "dead", "400 days")
    gone = _plant(conn, client, "completed", "2 days")
    deleted = _pruner(client, drover.Retention(dead=None)).run_once()
    assert deleted == 1
    assert _ids(conn) == {kept}
    assert gone not in _ids(conn)


def test_large_backlogs_go_in_batches(client: drover.Client, conn: Conn) -> None:
    client.insert_many([Done(n=i) for i in range(2500)])
    conn.execute(
        "UPDATE drover_jobs SET state = 'completed', finalized_at = now() - interval '2 days'"
    )
    assert _pruner(client, drover.Retention()).run_once() == 2500
    assert _ids(conn) == set()


def test_only_one_client_prunes_at_a_time(client: drover.Client, conn: Conn, db_url: str) -> None:
    _plant(conn, client, "completed", "2 days")
    with psycopg.connect(db_url) as other:
        other.execute("SELECT pg_advisory_xact_lock(7237970105436602371)")  # another pruner
        assert _pruner(client, drover.Retention()).run_once() == 0
        assert len(_ids(conn)) == 1
        other.rollback()
    assert _pruner(client, drover.Retention()).run_once() == 1


def test_a_started_client_prunes_in_the_background(make_client: Any, conn: Conn, poll: Any) -> None:
    producer = make_client()
    old = _plant(conn, producer, "completed", "2 days")
    worker = make_client(plugins=[drover.plugins.Pruner(interval=0.05)], poll_interval=0.05)
    worker.start()
    assert f"drover-pruner-{worker._id}" in _threads(worker)
    poll(lambda: old not in _ids(conn), timeout=10, message="old completed job pruned")
    worker.stop(5)


def test_no_pruner_without_retention(make_client: Any, conn: Conn) -> None:
    worker = make_client(plugins=[drover.plugins.Pruner(retention=None, interval=0.05)])
    worker.start()
    assert plugin_service(worker, "pruner") is None
    assert f"drover-pruner-{worker._id}" not in _threads(worker)
    assert f"drover-refresher-{worker._id}" in _threads(worker)  # the other defaults run
    worker.stop(5)


def test_the_deprecated_fields_still_prune_and_still_turn_pruning_off(
    make_client: Any, conn: Conn, poll: Any
) -> None:
    producer = make_client()
    old = _plant(conn, producer, "completed", "2 days")
    with pytest.warns(DeprecationWarning, match=r"Config.prune_interval is deprecated: use "):
        worker = make_client(prune_interval=0.05, poll_interval=0.05)
    assert worker.config.plugin("pruner") == drover.plugins.Pruner(interval=0.05)
    worker.start()
    poll(lambda: old not in _ids(conn), timeout=10, message="old completed job pruned")
    worker.stop(5)
    with pytest.warns(DeprecationWarning, match=r"drover.plugins.Pruner\(retention=...\)"):
        keeper = make_client(retention=None)
    keeper.start()
    assert f"drover-pruner-{keeper._id}" not in _threads(keeper)
    keeper.stop(5)


@pytest.mark.parametrize(
    ("fields", "match"),
    [({"dead": -1}, "must not be negative"), ({"completed": "1d"}, "timedelta or a number")],
)
def test_bad_retention_is_a_config_error(fields: dict[str, object], match: str) -> None:
    with pytest.raises(drover.ConfigError, match=match):
        drover.Retention(**fields)  # type: ignore[arg-type]
    with pytest.raises(drover.ConfigError, match="plugin 'pruner': retention must be"):
        drover.plugins.Pruner(retention={"dead": 1})  # type: ignore[arg-type]
    with (
        pytest.warns(DeprecationWarning, match="Config.retention"),
        pytest.raises(drover.ConfigError, match="Config.retention must be"),
    ):
        drover.Config(retention={"dead": 1})  # type: ignore[arg-type]
