"""Periodic jobs end to end: one leader among real clients, one row per tick, failover.

Schedules here tick every 250 ms and clients poll every 100 ms, so failover
bounds are short; every wait is a poll on a condition with a deadline.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from jobdb import plugin_service
from prometheus_client import CollectorRegistry

import drover
from drover._db.ticks import fire_tick, lock_holders
from drover._insert.encode import encode_insert
from drover._records import JobInsertParams
from drover._runtime.ticker import Ticker
from drover.periodic import tick_key, tick_opts

Conn = psycopg.Connection[tuple[Any, ...]]
MakeClient = Callable[..., drover.Client]
Poll = Callable[..., Any]

PERIOD = timedelta(milliseconds=250)
POLL = 0.1


class Beat(drover.JobArgs, kind="periodic_beat"):
    pass


def _beat(run_on_start: bool = False, queue: str = "parked") -> drover.PeriodicJob:
    # A queue no client works: the ticks stay waiting, so they can be counted.
    return drover.PeriodicJob(
        "beat", "@every 250ms", Beat(), drover.InsertOpts(queue=queue), run_on_start=run_on_start
    )


def _client(make_client: MakeClient, *jobs: drover.PeriodicJob, **fields: Any) -> drover.Client:
    fields.setdefault("poll_interval", POLL)
    client = make_client(plugins=[drover.plugins.Periodic(jobs=list(jobs))], **fields)
    client.start()
    return client


def _scheduler(client: drover.Client) -> Ticker:
    ticker = plugin_service(client, "periodic")
    assert isinstance(ticker, Ticker)
    return ticker


def _ticks(conn: Conn, periodic_id: str = "beat") -> list[str]:
    rows = conn.execute(
        "SELECT unique_key FROM drover_jobs WHERE unique_key LIKE %s ORDER BY id",
        (f"{periodic_id}/%",),
    ).fetchall()
    return [str(r[0]) for r in rows]


def _fire_times(keys: list[str]) -> list[datetime]:
    return [datetime.fromisoformat(k.split("/", 1)[1].replace("Z", "+00:00")) for k in keys]


def _holders(conn: Conn) -> list[int]:
    return lock_holders(conn)


def _leaders(*clients: drover.Client) -> list[drover.Client]:
    return [c for c in clients if c.running and _scheduler(c).leading]


def _assert_one_row_per_tick(keys: list[str]) -> None:
    assert len(keys) == len(set(keys)), f"a tick was inserted twice: {keys}"
    for fire in _fire_times(keys):
        assert (fire.timestamp() * 1000) % 250 == 0, f"{fire} is not on the 250 ms grid"


def test_without_periodic_jobs_there_is_no_scheduler_and_no_lock(
    make_client: MakeClient, conn: Conn
) -> None:
    client = make_client(poll_interval=POLL)
    empty = make_client(poll_interval=POLL, plugins=[drover.plugins.Periodic(jobs=[])])
    client.start()
    empty.start()
    assert plugin_service(client, "periodic") is None
    assert plugin_service(empty, "periodic") is None
    assert not [t for t in threading.enumerate() if t.name.startswith("drover-periodic-")]
    assert _holders(conn) == []
    assert conn.execute("SELECT count(*) FROM drover_periodic_ticks").fetchone() == (0,)


def test_the_deprecated_field_still_schedules(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    with pytest.warns(DeprecationWarning, match=r"drover.plugins.Periodic\(jobs=\[...\]\)"):
        client = make_client(periodic_jobs=[_beat()], poll_interval=POLL)
    client.start()
    poll(lambda: len(_ticks(conn)) >= 2, message="two ticks from the deprecated field")
    assert f"drover-periodic-{client._id}" in {t.name for t in threading.enumerate()}


def test_two_clients_one_leader_one_row_per_tick_and_failover_on_stop(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    first = _client(make_client, _beat())
    second = _client(make_client, _beat())
    poll(lambda: len(_ticks(conn)) >= 6, message="six ticks")
    assert len(_holders(conn)) == 1
    (leader,) = _leaders(first, second)
    follower = second if leader is first else first
    _assert_one_row_per_tick(_ticks(conn))

    before = len(_ticks(conn))
    leader.stop(timeout=5)
    poll(lambda: _scheduler(follower).leading, message="the other client leads")
    poll(lambda: len(_ticks(conn)) >= before + 4, message="ticks continue after failover")
    assert len(_holders(conn)) == 1
    _assert_one_row_per_tick(_ticks(conn))
    follower.stop(timeout=5)
    assert _holders(conn) == []


def test_failover_when_the_leaders_backend_is_terminated(
    make_client: MakeClient, conn: Conn, poll: Poll, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="drover")
    first = _client(make_client, _beat())
    second = _client(make_client, _beat())
    poll(lambda: len(_holders(conn)) == 1 and len(_ticks(conn)) >= 2, message="a leader ticking")
    (leader,) = _leaders(first, second)
    (pid,) = _holders(conn)
    conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    poll(
        lambda: _holders(conn) not in ([], [pid]) and len(_holders(conn)) == 1,
        message="a new lock holder (the lock is free at once; it is tried every 0.1 s)",
    )
    before = len(_ticks(conn))
    poll(lambda: len(_ticks(conn)) >= before + 3, message="ticks continue")
    poll(lambda: len(_leaders(first, second)) == 1, message="exactly one client believes it leads")
    assert any(
        getattr(r, "event", None) == "periodic_leader_lost" and r.levelno == logging.INFO
        for r in caplog.records
    )
    _assert_one_row_per_tick(_ticks(conn))
    assert leader.ready()[0] and leader.running  # losing leadership is not an error


def test_a_tick_fires_once_even_when_its_earlier_job_finished(db_url: str, conn: Conn) -> None:
    # The split-brain hole of a unique key alone: once the first tick's job has
    # completed, its key is free again. The watermark refuses the second insert.
    job = _beat()
    conn.execute(
        "INSERT INTO drover_periodic_ticks (id, schedule, timezone, kind, queue, fired_through, "
        "defined_by) VALUES ('beat', '@every 250ms', 'UTC', 'periodic_beat', 'parked', "
        "now() - interval '1 minute', 'test')"
    )
    row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    fire: datetime = row[0] - timedelta(seconds=10)
    params: JobInsertParams = encode_insert(job.args, tick_opts(job, fire))
    with psycopg.connect(db_url, autocommit=True) as leader_a:
        first = fire_tick(
            leader_a, params, periodic_id="beat", fire=fire, upto=fire, next_fire=None
        )
    assert first.claimed and first.row is not None
    conn.execute("UPDATE drover_jobs SET state = 'completed', finalized_at = now()")
    with psycopg.connect(db_url, autocommit=True) as leader_b:  # a stale second leader
        second = fire_tick(
            leader_b, params, periodic_id="beat", fire=fire, upto=fire, next_fire=None
        )
    assert not second.claimed and second.row is None
    assert _ticks(conn) == [tick_key("beat", fire)]


def test_a_tick_already_held_by_a_waiting_job_is_absorbed_without_an_error(
    make_client: MakeClient, conn: Conn, poll: Poll, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="drover")
    registry = CollectorRegistry()
    client = _client(make_client, _beat(), metrics_registry=registry)
    # Its watermark starts when it takes the lead (however long a busy machine
    # takes to get there): the planted fire times come after that, in one insert.
    poll(lambda: _scheduler(client).leading, message="the client leads")
    row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    now: datetime = row[0]
    start = drover.Schedule("@every 250ms").next(now + timedelta(seconds=3))
    assert start is not None
    planted = [start + i * PERIOD for i in range(3)]
    make_client().insert_many(
        [
            (Beat(), drover.InsertOpts(queue="parked", unique_key=tick_key("beat", fire)))
            for fire in planted
        ]
    )
    last = planted[-1]

    def past_the_planted_ticks() -> bool:
        row = conn.execute(
            "SELECT fired_through >= %s FROM drover_periodic_ticks WHERE id = 'beat'", (last,)
        ).fetchone()
        return bool(row and row[0])

    poll(past_the_planted_ticks, message="the schedule running past the planted ticks")
    keys = _ticks(conn)
    for fire in planted:
        assert keys.count(tick_key("beat", fire)) == 1
    assert registry.get_sample_value(
        "drover_periodic_ticks_total", {"id": "beat", "outcome": "duplicate"}
    ) == pytest.approx(3.0)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert any(getattr(r, "event", None) == "periodic_duplicate" for r in caplog.records)


def test_ticks_missed_while_nobody_led_fire_once_not_once_per_period(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    job = drover.PeriodicJob("minutely", "@every 1m", Beat(), drover.InsertOpts(queue="parked"))
    conn.execute(
        "INSERT INTO drover_periodic_ticks (id, schedule, timezone, kind, queue, fired_through, "
        "defined_by) VALUES ('minutely', '@every 1m', 'UTC', 'periodic_beat', 'parked', "
        "now() - interval '1 hour', 'an earlier deploy')"
    )
    client = _client(make_client, job)
    poll(lambda: len(_ticks(conn, "minutely")) == 1, message="the one catch-up tick")
    row = conn.execute(
        "SELECT fired_through >= now() - interval '5 seconds', next_fire > now() "
        "FROM drover_periodic_ticks WHERE id = 'minutely'"
    ).fetchone()
    # The watermark covers the whole missed hour, so no later turn fires again.
    assert row == (True, True)
    assert len(_ticks(conn, "minutely")) == 1
    assert _scheduler(client).leading


def test_a_new_entry_starts_from_now_and_run_on_start_fires_at_once(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    yearly = drover.PeriodicJob("yearly", "@yearly", Beat(), drover.InsertOpts(queue="parked"))
    eager = drover.PeriodicJob(
        "eager", "@yearly", Beat(), drover.InsertOpts(queue="parked"), run_on_start=True
    )
    client = _client(make_client, yearly, eager)
    poll(lambda: len(_ticks(conn, "eager")) == 1, message="run_on_start's tick")
    assert _ticks(conn, "yearly") == []
    # A yearly schedule never holds up stop.
    started = datetime.now()
    client.stop(timeout=5)
    assert datetime.now() - started < timedelta(seconds=2)


def test_a_failing_insert_is_retried_next_turn_and_the_loop_lives_on(
    make_client: MakeClient, conn: Conn, poll: Poll, caplog: pytest.LogCaptureFixture
) -> None:
    conn.execute("CREATE TABLE refuse_ticks (on_ boolean)")
    conn.execute("INSERT INTO refuse_ticks VALUES (true)")
    conn.execute(
        "CREATE FUNCTION refuse_tick() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "IF EXISTS (SELECT 1 FROM refuse_ticks) THEN RAISE EXCEPTION 'refused by test'; END IF; "
        "RETURN NEW; END $$"
    )
    conn.execute(
        "CREATE TRIGGER refuse BEFORE INSERT ON drover_jobs FOR EACH ROW EXECUTE FUNCTION "
        "refuse_tick()"
    )
    registry = CollectorRegistry()
    client = _client(make_client, _beat(), metrics_registry=registry)

    def failures() -> float:
        value = registry.get_sample_value(
            "drover_periodic_ticks_total", {"id": "beat", "outcome": "failed"}
        )
        return value or 0.0

    poll(lambda: failures() >= 2, message="failed attempts, retried")
    assert _ticks(conn) == []
    record = next(r for r in caplog.records if r.getMessage().startswith("enqueue periodic job"))
    assert record.levelno == logging.ERROR and "refused by test" in str(record.exc_info)
    conn.execute("DELETE FROM refuse_ticks")
    poll(lambda: len(_ticks(conn)) >= 2, message="ticks once inserts work again")
    assert client.ready() == (True, "ok") or client.ready()[1] == "queue stats stale"
    engine = client._engine
    assert engine is not None and engine.dead_services() == []
    _assert_one_row_per_tick(_ticks(conn))


def test_inspector_and_metrics_show_the_schedule_and_the_leader(
    make_client: MakeClient, db_url: str, conn: Conn, poll: Poll
) -> None:
    nightly = drover.PeriodicJob(
        "nightly", "30 2 * * *", Beat(), drover.InsertOpts(queue="parked"), timezone="Europe/Berlin"
    )
    registry = CollectorRegistry()
    client = _client(make_client, _beat(), nightly, metrics_registry=registry)
    poll(lambda: len(_ticks(conn)) >= 2, message="ticks")
    assert registry.get_sample_value("drover_periodic_leader") == 1.0
    # The scheduler counts a tick just after its insert commits: under load the
    # rows can be seen before the count, so wait for the count as well.
    poll(lambda: (registry.get_sample_value(
        "drover_periodic_ticks_total", {"id": "beat", "outcome": "enqueued"}
    ) or 0) >= 2, message="two ticks counted")  # fmt: skip
    with drover.Inspector(db_url) as inspector:
        entries = {e.id: e for e in inspector.periodic()}
    assert set(entries) == {"beat", "nightly"}
    night = entries["nightly"]
    assert (night.schedule, night.timezone, night.kind, night.queue) == (
        "30 2 * * *",
        "Europe/Berlin",
        "periodic_beat",
        "parked",
    )
    assert night.current and night.leader is not None and night.leader.startswith(client._id)
    assert night.next_fire is not None and night.last_fire is None
    beat = entries["beat"]
    assert beat.last_fire is not None and beat.last_job_id is not None
    client.stop(timeout=5)
    assert registry.get_sample_value("drover_periodic_leader") == 0.0
    with drover.Inspector(db_url) as inspector:
        assert all(e.leader is None and not e.current for e in inspector.periodic())


def test_dedicated_connections_carry_their_role_in_application_name(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    # The client opens its own pool (named "drover"); the LISTEN connection and
    # the scheduler's lock connection are opened apart from it and must say so
    # in pg_stat_activity, not inherit the pool's name.
    client = _client(make_client, _beat())
    poll(lambda: _scheduler(client).leading, message="the ticker leads")

    def names() -> set[str]:
        rows = conn.execute(
            "SELECT application_name FROM pg_stat_activity WHERE datname = current_database()"
        ).fetchall()
        return {r[0] for r in rows}

    poll(
        lambda: {"drover", "drover-listener", "drover-scheduler"} <= names(),
        message="the pool's, the listener's and the scheduler's connections, each by name",
    )
