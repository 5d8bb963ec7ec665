"""Two drover installations in two schemas of ONE database, both running at once (ADR 0043).

The database's ``public`` schema is never migrated, so any statement that
forgot its schema fails loudly ("relation does not exist") instead of
quietly reading the wrong tables. Each test shows that one installation does
not see the other's jobs, wake-ups, periodic leader, limits or workers.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from jobdb import plugin_service

import drover
from drover._db.namespace import namespace_for
from drover._db.ticks import lock_holders
from drover._runtime.ticker import Ticker

Conn = psycopg.Connection[tuple[Any, ...]]
Poll = Callable[..., Any]


class Ping(drover.JobArgs, kind="schemas_ping"):
    tag: str


class Solo(drover.JobArgs, kind="schemas_solo", limits=drover.Limit(concurrency=1)):
    pass


class Beat(drover.JobArgs, kind="schemas_beat"):
    pass


class Ran:
    """What each installation's workers ran: ``schema -> [tag, ...]``."""

    def __init__(self) -> None:
        self.tags: dict[str, list[str]] = {"a": [], "b": []}
        self.lock = threading.Lock()

    def workers(self, schema: str) -> drover.Workers:
        workers = drover.Workers()

        @workers.register
        def ping(job: drover.Job[Ping]) -> None:
            with self.lock:
                self.tags[schema].append(job.args.tag)

        @workers.register
        def solo(job: drover.Job[Solo]) -> None:
            pass

        @workers.register
        def beat(job: drover.Job[Beat]) -> None:
            pass

        return workers


@pytest.fixture
def two_schemas(empty_db_url: str) -> str:
    drover.migrate(empty_db_url, schema="a")
    drover.migrate(empty_db_url, schema="b")
    return empty_db_url


@pytest.fixture
def clients(two_schemas: str) -> Iterator[Callable[..., drover.Client]]:
    made: list[drover.Client] = []

    def make(schema: str, ran: Ran, **fields: Any) -> drover.Client:
        fields.setdefault("poll_interval", 0.05)
        client = drover.Client(
            two_schemas, drover.Config(schema=schema, workers=ran.workers(schema), **fields)
        )
        made.append(client)
        return client

    yield make
    for client in made:
        if client.running:
            with contextlib.suppress(drover.DrainIncomplete):
                client.stop(timeout=5)
        client.close()


def test_each_installation_runs_only_its_own_jobs_and_counts_only_them(
    two_schemas: str, clients: Callable[..., drover.Client], poll: Poll
) -> None:
    ran = Ran()
    a, b = clients("a", ran), clients("b", ran)
    a.insert(Ping(tag="a1"))
    b.insert(Ping(tag="b1"))
    a.insert_many([Ping(tag="a2"), Ping(tag="a3")])
    with (
        drover.Inspector(two_schemas, schema="a") as ia,
        drover.Inspector(two_schemas, schema="b") as ib,
    ):
        assert sum(d.count for d in ia.stats().depths) == 3
        assert sum(d.count for d in ib.stats().depths) == 1
        assert sorted(j.args["tag"] for j in ia.list_jobs()) == ["a1", "a2", "a3"]
        a.start()
        b.start()
        poll(lambda: len(ran.tags["a"]) == 3 and len(ran.tags["b"]) == 1, message="all ran")
        assert sorted(ran.tags["a"]) == ["a1", "a2", "a3"]
        assert ran.tags["b"] == ["b1"]
        assert {w.client_id for w in ia.workers()}.isdisjoint({w.client_id for w in ib.workers()})
        assert len(ia.workers()) == 1 and len(ib.workers()) == 1
    with psycopg.connect(two_schemas) as conn:
        row = conn.execute("SELECT to_regclass('public.drover_jobs')").fetchone()
        assert row == (None,), "nothing may land in public"


def _notifications(conn: Conn, channels: list[str]) -> dict[str, list[str]]:
    """Payloads per channel up to each channel's ``marker`` (sent last, so all before it
    on that channel have arrived)."""
    seen: dict[str, list[str]] = {c: [] for c in channels}
    waiting = set(channels)
    for note in conn.notifies(timeout=10):
        if note.payload == "marker":
            waiting.discard(note.channel)
            if not waiting:
                return seen
        elif note.channel in seen:
            seen[note.channel].append(note.payload)
    raise AssertionError(f"the markers on {sorted(waiting)} never arrived")


def test_an_insert_wakes_only_its_own_schemas_listeners(
    two_schemas: str, clients: Callable[..., drover.Client]
) -> None:
    ran = Ran()
    a = clients("a", ran)
    ns_a, ns_b = namespace_for("a"), namespace_for("b")
    assert ns_a.channel("drover") != ns_b.channel("drover") != "drover"
    with psycopg.connect(two_schemas, autocommit=True) as listener:
        channels = [ns_a.channel("drover"), ns_b.channel("drover"), "drover"]
        for channel in channels:
            listener.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
        with psycopg.connect(two_schemas) as caller:
            a.insert_tx(caller, Ping(tag="tx"), drover.InsertOpts(queue="q_tx"))
        # The markers follow the insert's commit: whatever it sent to a channel
        # arrives before that channel's marker.
        with psycopg.connect(two_schemas, autocommit=True) as sender:
            for channel in channels:
                sender.execute("SELECT pg_notify(%s, 'marker')", (channel,))
        seen = _notifications(listener, channels)
        assert seen[ns_a.channel("drover")][:1] == ["q_tx"]
        assert seen[ns_b.channel("drover")] == []
        assert seen["drover"] == []


def test_a_started_client_is_woken_through_its_schemas_channel(
    clients: Callable[..., drover.Client], poll: Poll
) -> None:
    ran = Ran()
    # Polling every minute: only the wake-up can make the job run promptly.
    a = clients("a", ran, poll_interval=60.0)
    a.start()
    engine = a._engine
    assert engine is not None
    assert engine.listener is not None
    assert engine.listener.listening.wait(10), "the listener never listened"
    a.insert(Ping(tag="woken"))
    poll(lambda: ran.tags["a"] == ["woken"], timeout=10, message="woken by the schema's channel")


def test_each_schema_has_its_own_periodic_leader_at_the_same_time(
    two_schemas: str, clients: Callable[..., drover.Client], poll: Poll
) -> None:
    ran = Ran()
    entry = drover.PeriodicJob("beat", "@every 1h", Beat(), drover.InsertOpts(queue="parked"))
    a = clients("a", ran, plugins=[drover.plugins.Periodic(jobs=[entry])])
    b = clients("b", ran, plugins=[drover.plugins.Periodic(jobs=[entry])])
    a.start()
    b.start()

    def leading(client: drover.Client) -> bool:
        ticker = plugin_service(client, "periodic")
        return isinstance(ticker, Ticker) and ticker.leading

    poll(lambda: leading(a) and leading(b), message="both schemas have a leader")
    with psycopg.connect(two_schemas, autocommit=True) as conn:
        holders_a = lock_holders(conn, ns=namespace_for("a"))
        holders_b = lock_holders(conn, ns=namespace_for("b"))
    assert len(holders_a) == 1 and len(holders_b) == 1 and holders_a != holders_b
    with drover.Inspector(two_schemas, schema="a") as ia:
        (info,) = ia.periodic()
        assert info.leader is not None


def test_limits_are_per_installation(
    two_schemas: str, clients: Callable[..., drover.Client], poll: Poll
) -> None:
    ran = Ran()
    a = clients("a", ran)
    b = clients("b", ran)
    a.start()
    with (
        drover.Inspector(two_schemas, schema="a") as ia,
        drover.Inspector(two_schemas, schema="b") as ib,
    ):
        poll(lambda: ia.limits(), message="a's client declared its limits")
        assert ib.limits() == []
        ia.set_limit("kind:schemas_solo", concurrency=3)
        b.start()
        poll(lambda: ib.limits(), message="b's client declared its limits")
        (limit_a,) = ia.limits()
        (limit_b,) = ib.limits()
        assert limit_a.concurrency == 3
        assert limit_b.concurrency == 1
        # A limited job runs in each: the limited claim (its advisory locks
        # keyed on each schema's drover_limits) works in both at once.
        a.insert(Solo())
        b.insert(Solo())
        poll(
            lambda: ia.stats().depths == [] and ib.stats().depths == [],
            message="both limited jobs ran",
        )


def test_a_rescue_in_one_schema_writes_that_schemas_duplicate_ledger(
    two_schemas: str, clients: Callable[..., drover.Client], poll: Poll
) -> None:
    """The rescue, its outcome and its ledger entry (ADR 0037) all land in the client's schema."""
    ran = Ran()
    a = clients("a", ran, lease_duration=1.0, rescue_interval=0.05)
    job = a.insert(Ping(tag="lost"))
    with psycopg.connect(two_schemas, autocommit=True) as conn:
        # A worker that died holding the job: running, its lease long gone.
        conn.execute(
            "UPDATE a.drover_jobs SET state = 'running', attempt = 1, attempted_at = now(),"
            " leased_until = now() - interval '1 minute', leased_by = 'gone-worker'"
            " WHERE id = %s",
            (job.id,),
        )
    with drover.Inspector(two_schemas, schema="a") as inspector:
        a.start()
        poll(lambda: ran.tags["a"] == ["lost"], message="the rescued job ran again")
        ledger = poll(
            lambda: inspector.get_job(job.id).ledger, message="the rescue left no ledger entry"
        )
    assert [(e.event, e.worker) for e in ledger][:1] == [("rescued", "gone-worker")]
