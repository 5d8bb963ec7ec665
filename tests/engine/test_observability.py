"""Observability end to end: the Prometheus families, the stats refresher and the ops listener.

Every assertion about a metric scrapes the real ``/metrics`` endpoint of a started
client over HTTP, after real executions on a real database; readiness transitions
are driven by real events (a held drain, a database that refuses connections).
"""

from __future__ import annotations

import contextlib
import logging
import math
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import psycopg_pool
import pytest
from jobdb import idle_workers, plugin_service
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from psycopg import sql

import drover

Conn = psycopg.Connection[tuple[Any, ...]]
MakeClient = Callable[..., drover.Client]
Poll = Callable[..., Any]
Address = tuple[str, int]

SAFETY = 20.0
"""Longest a blocked handler waits on its own (a failing test never hangs)."""

FAMILIES = {
    "drover_jobs_completed": "counter",
    "drover_jobs_failed": "counter",
    "drover_job_duration_seconds": "histogram",
    "drover_jobs_executing": "gauge",
    "drover_pool_concurrency": "gauge",
    "drover_queue_depth": "gauge",
    "drover_oldest_job_age_seconds": "gauge",
    "drover_service_deaths": "counter",
    "drover_periodic_ticks": "counter",
    "drover_periodic_leader": "gauge",
    "drover_listener_reconnects": "counter",
    "drover_writes_refused": "counter",
    "drover_cancels_delivered": "counter",
    "drover_leases_lost": "counter",
    "drover_reruns": "counter",
    "drover_stale_writes_refused": "counter",
    "drover_event_loop_lag_seconds": "histogram",
    "drover_health_findings": "gauge",
    "drover_health_checked_timestamp_seconds": "gauge",
    "drover_database_errors": "counter",
}
BUCKETS = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, math.inf,
]  # fmt: skip
STATES = ("pending", "available", "scheduled", "retryable", "running", "dead")
EPHEMERAL = "127.0.0.1:0"


class Act(drover.JobArgs, kind="obs_act"):
    """Does what ``mode`` says: see :func:`_act`."""

    mode: str = "ok"
    n: int = 0


class Slow(drover.JobArgs, kind="obs_slow"):
    """Run by :class:`SlowWorker`, whose own timeout bounds the context."""


class Ghost(drover.JobArgs, kind="obs_ghost"):
    """Inserted, but no worker is ever registered for it."""


class Hold(drover.JobArgs, kind="obs_hold"):
    gate: int = 0


class SlowWorker(drover.Worker[Slow]):
    timeout = 0.2

    def work(self, job: drover.Job[Slow]) -> None:
        cancelled = job.context.wait(SAFETY)
        raise TimeoutError(f"worker deadline passed (cancelled={cancelled})")


def _act(job: drover.Job[Act]) -> None:
    mode = job.args.mode
    if mode == "ok":
        return
    if mode == "boom":
        raise ValueError("boom")
    if mode == "snooze":
        raise drover.Snooze(timedelta(hours=1))
    if mode == "cancel":
        raise drover.Cancel("not wanted")
    if mode == "exit":
        raise SystemExit(3)
    if mode == "late":
        # Timeout middleware: the context cancels at the deadline, then the handler raises.
        cancelled = job.context.wait(SAFETY)
        raise TimeoutError(f"middleware deadline passed (cancelled={cancelled})")
    raise AssertionError(f"unknown mode {mode!r}")


class Gates:
    """Blocks ``Hold`` handlers until their gate opens; counts who got in."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[int, threading.Event] = {}
        self.entered: dict[int, threading.Event] = {}
        self._all = False

    def _pair(self, gate: int) -> tuple[threading.Event, threading.Event]:
        with self._lock:
            if gate not in self._events:
                self._events[gate] = threading.Event()
                self.entered[gate] = threading.Event()
                if self._all:
                    self._events[gate].set()
            return self._events[gate], self.entered[gate]

    def work(self, job: drover.Job[Hold]) -> None:
        release, entered = self._pair(job.args.gate)
        entered.set()
        release.wait(SAFETY)

    def wait_entered(self, gate: int) -> None:
        assert self._pair(gate)[1].wait(10), f"handler {gate} never started"

    def release(self, gate: int) -> None:
        self._pair(gate)[0].set()

    def release_all(self) -> None:
        with self._lock:
            self._all = True
            events = list(self._events.values())
        for event in events:
            event.set()


@pytest.fixture
def gates() -> Iterator[Gates]:
    made = Gates()
    yield made
    made.release_all()


class RetryNow:
    def next_retry(self, job: drover.JobRow) -> datetime:
        return datetime.now(UTC)


def stats(interval: float) -> drover.plugins.QueueStats:
    """The queue-stats plugin refreshing every ``interval`` seconds."""
    return drover.plugins.QueueStats(interval=interval)


def _workers(gates: Gates | None = None) -> drover.Workers:
    workers = drover.Workers()
    workers.register(args=Act)(_act)
    workers.add(SlowWorker())
    if gates is not None:
        workers.register(args=Hold)(gates.work)
    return workers


# --- HTTP and parsing ------------------------------------------------------------------------

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _request(addr: Address, path: str, method: str = "GET") -> tuple[int, str]:
    host, port = addr
    req = urllib.request.Request(f"http://{host}:{port}{path}", method=method)
    try:
        with _OPENER.open(req, timeout=10) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode()


def _refused(addr: Address) -> bool:
    try:
        with socket.create_connection(addr, timeout=2):
            return False
    except ConnectionRefusedError:
        return True


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


class Scrape:
    """One parsed ``GET /metrics``: the families (``_created`` ones dropped) and samples."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.types: dict[str, str] = {}
        self.samples: list[Sample] = []
        for family in text_string_to_metric_families(text):
            if family.name.endswith("_created"):
                continue
            self.types[family.name] = family.type
            for s in family.samples:
                if s.name.endswith("_created"):
                    continue
                self.samples.append(Sample(s.name, dict(s.labels), float(s.value)))

    def find(self, name: str, **labels: str) -> list[Sample]:
        return [
            s
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        ]

    def value(self, name: str, **labels: str) -> float:
        """The one sample with exactly these labels (``le`` aside, it must be unique)."""
        found = [s for s in self.find(name, **labels) if set(s.labels) == set(labels)]
        assert len(found) == 1, f"expected one {name}{labels}, got {found}\n{self.text}"
        return found[0].value

    def queues(self, name: str) -> set[str]:
        return {s.labels["queue"] for s in self.find(name)}

    def depth(self, queue: str) -> dict[str, float]:
        return {s.labels["state"]: s.value for s in self.find("drover_queue_depth", queue=queue)}

    def age(self, queue: str) -> float | None:
        found = self.find("drover_oldest_job_age_seconds", queue=queue)
        return found[0].value if found else None


def _scrape(client: drover.Client) -> Scrape:
    addr = client.ops_addr
    assert addr is not None, "the client has no ops listener"
    status, body = _request(addr, "/metrics")
    assert status == 200, body
    return Scrape(body)


def _ready(client: drover.Client) -> tuple[int, str]:
    addr = client.ops_addr
    assert addr is not None
    status, body = _request(addr, "/readyz")
    return status, body.strip()


def _start(make_client: MakeClient, **fields: Any) -> drover.Client:
    fields.setdefault("ops_addr", EPHEMERAL)
    fields.setdefault("poll_interval", 0.05)
    fields.setdefault("retry_policy", RetryNow())
    client = make_client(**fields)
    client.start()
    return client


# --- database helpers ------------------------------------------------------------------------


def _state(conn: Conn, job_id: int) -> str:
    row = conn.execute("SELECT state::text FROM drover_jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return str(row[0])


def _await_state(poll: Poll, conn: Conn, job_id: int, state: str) -> None:
    poll(lambda: _state(conn, job_id) == state, 10.0, message=f"job {job_id} reaching {state}")


def _insert_sql(conn: Conn, queue: str, state: str = "available", **cols: str) -> int:
    """Insert a row directly; ``cols`` are SQL expressions for extra columns."""
    names = ["kind", "queue", "state", *cols]
    values: list[sql.Composable] = [
        sql.Literal("obs_sql"),
        sql.Literal(queue),
        sql.SQL("{}::drover_job_state").format(sql.Literal(state)),
    ]
    values += [sql.SQL(expr) for expr in cols.values()]
    query = sql.SQL("INSERT INTO drover_jobs ({}) VALUES ({}) RETURNING id").format(
        sql.SQL(", ").join(sql.Identifier(n) for n in names), sql.SQL(", ").join(values)
    )
    row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0])


def _db_name(conn: Conn) -> str:
    row = conn.execute("SELECT current_database()").fetchone()
    assert row is not None
    return str(row[0])


@contextlib.contextmanager
def _database_refusing(admin_url: str, conn: Conn) -> Iterator[None]:
    """Make the test database refuse new connections and cut every one of them but ``conn``.

    PostgreSQL refuses ``ALLOW_CONNECTIONS false`` from inside the database
    itself, so the switch is thrown from the server's admin database.
    """
    name = _db_name(conn)
    ident = sql.Identifier(name)
    with psycopg.connect(admin_url, autocommit=True) as admin:
        try:
            admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(ident))
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> %s",
                (name, conn.info.backend_pid),
            )
            yield
        finally:
            admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(ident))


# --- per-execution metrics -------------------------------------------------------------------

# mode → (how the job is inserted, the state it must end in, completed?)
EXECUTIONS = {
    "success": ("act:ok", "completed", True),
    "exception": ("act:boom", "dead", False),
    "system-exit": ("act:exit", "dead", False),
    "snooze": ("act:snooze", "scheduled", False),
    "cancel": ("act:cancel", "cancelled", False),
    "timeout-middleware": ("act:late", "dead", False),
    "worker-timeout": ("slow", "dead", False),
    "unregistered-kind": ("ghost", "dead", False),
    "undecodable-args": ("sql", "dead", False),
}


def _insert_execution(client: drover.Client, conn: Conn, how: str, queue: str) -> int:
    opts = drover.InsertOpts(queue=queue, max_attempts=1)
    if how.startswith("act:"):
        return client.insert(Act(mode=how[4:]), opts).id
    if how == "slow":
        return client.insert(Slow(), opts).id
    if how == "ghost":
        return client.insert(Ghost(), opts).id
    assert how == "sql"
    row = conn.execute(
        "INSERT INTO drover_jobs (kind, queue, args, max_attempts)"
        " VALUES ('obs_act', %s, '{\"n\": \"not-an-int\"}', 1) RETURNING id",
        (queue,),
    ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("mode", list(EXECUTIONS))
def test_each_execution_moves_exactly_one_counter_and_one_observation(
    make_client: MakeClient, conn: Conn, poll: Poll, mode: str
) -> None:
    how, final, completed = EXECUTIONS[mode]
    client = _start(
        make_client,
        workers=_workers(),
        queues={"obs": 1},
        middleware=[drover.Timeout(0.2)] if mode == "timeout-middleware" else [],
    )
    before = _scrape(client)
    assert before.value("drover_jobs_completed_total", queue="obs") == 0
    assert before.value("drover_jobs_failed_total", queue="obs") == 0
    assert before.value("drover_job_duration_seconds_count", queue="obs") == 0

    job_id = _insert_execution(client, conn, how, "obs")
    # The metrics middleware records before the outcome is written, so the row's
    # final state means the execution is fully counted.
    _await_state(poll, conn, job_id, final)

    after = _scrape(client)
    assert after.value("drover_jobs_completed_total", queue="obs") == (1 if completed else 0)
    assert after.value("drover_jobs_failed_total", queue="obs") == (0 if completed else 1)
    assert after.value("drover_job_duration_seconds_count", queue="obs") == 1
    assert after.value("drover_job_duration_seconds_bucket", queue="obs", le="+Inf") == 1
    assert after.value("drover_jobs_executing") == 0
    duration = after.value("drover_job_duration_seconds_sum", queue="obs")
    if mode.endswith("timeout"):
        # The observation covers the whole chain, the wait for the deadline included.
        assert duration >= 0.2
        assert after.value("drover_job_duration_seconds_bucket", queue="obs", le="0.1") == 0
    else:
        assert 0 < duration < 5
    assert not [s for s in after.samples if "kind" in s.labels], "kind must never be a label"


def test_counters_and_histogram_are_labelled_by_each_jobs_own_queue(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    client = _start(make_client, workers=_workers(), queues={"alpha": 1, "beta": 1})
    ids: dict[int, str] = {}
    for _ in range(3):
        ids[client.insert(Act(mode="ok"), drover.InsertOpts(queue="alpha")).id] = "completed"
    # Two attempts of one job: failed counts attempts, not dead jobs.
    twice = client.insert(Act(mode="boom"), drover.InsertOpts(queue="alpha", max_attempts=2))
    ids[twice.id] = "dead"
    ids[client.insert(Act(mode="ok"), drover.InsertOpts(queue="beta")).id] = "completed"
    ids[client.insert(Act(mode="cancel"), drover.InsertOpts(queue="beta")).id] = "cancelled"
    ids[client.insert(Ghost(), drover.InsertOpts(queue="beta", max_attempts=1)).id] = "dead"
    for job_id, state in ids.items():
        _await_state(poll, conn, job_id, state)

    scrape = _scrape(client)
    assert scrape.value("drover_jobs_completed_total", queue="alpha") == 3
    assert scrape.value("drover_jobs_failed_total", queue="alpha") == 2
    assert scrape.value("drover_job_duration_seconds_count", queue="alpha") == 5
    assert scrape.value("drover_jobs_completed_total", queue="beta") == 1
    assert scrape.value("drover_jobs_failed_total", queue="beta") == 2
    assert scrape.value("drover_job_duration_seconds_count", queue="beta") == 3
    for name in (
        "drover_jobs_completed_total",
        "drover_jobs_failed_total",
        "drover_job_duration_seconds_count",
    ):
        assert scrape.queues(name) == {"alpha", "beta"}, name
    assert not [s for s in scrape.samples if "kind" in s.labels], "kind must never be a label"
    assert "obs_act" not in scrape.text and "obs_ghost" not in scrape.text


def test_duration_histogram_has_exactly_the_specified_buckets(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    client = _start(make_client, workers=_workers(), queues={"obs": 1})
    for mode in ("ok", "boom"):
        job = client.insert(Act(mode=mode), drover.InsertOpts(queue="obs", max_attempts=1))
        _await_state(poll, conn, job.id, "completed" if mode == "ok" else "dead")
    scrape = _scrape(client)
    buckets = scrape.find("drover_job_duration_seconds_bucket", queue="obs")
    assert [float(s.labels["le"]) for s in buckets] == BUCKETS
    counts = [s.value for s in buckets]
    assert counts == sorted(counts), "buckets are cumulative"
    assert counts[-1] == 2 == scrape.value("drover_job_duration_seconds_count", queue="obs")


def test_executing_gauge_follows_running_handlers(
    make_client: MakeClient, conn: Conn, poll: Poll, gates: Gates
) -> None:
    client = _start(make_client, workers=_workers(gates), concurrency=4)
    assert _scrape(client).value("drover_jobs_executing") == 0
    first = client.insert(Hold(gate=1))
    gates.wait_entered(1)
    assert _scrape(client).value("drover_jobs_executing") == 1
    second = client.insert(Hold(gate=2))
    gates.wait_entered(2)
    assert _scrape(client).value("drover_jobs_executing") == 2

    gates.release(1)
    _await_state(poll, conn, first.id, "completed")
    assert _scrape(client).value("drover_jobs_executing") == 1
    gates.release(2)
    _await_state(poll, conn, second.id, "completed")
    scrape = _scrape(client)
    assert scrape.value("drover_jobs_executing") == 0
    assert scrape.value("drover_jobs_completed_total", queue="default") == 2


@pytest.mark.parametrize("configured", [1, 7, 64])
def test_pool_concurrency_gauge_is_the_configured_concurrency(
    make_client: MakeClient, configured: int
) -> None:
    client = _start(make_client, concurrency=configured)
    assert client.config.concurrency == configured
    assert _scrape(client).value("drover_pool_concurrency") == configured


def test_only_drovers_own_families_are_exposed(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    client = _start(make_client, workers=_workers(), plugins=[stats(0.1)])
    job = client.insert(Act(mode="ok"))
    _await_state(poll, conn, job.id, "completed")
    scrape = _scrape(client)
    assert scrape.types == FAMILIES
    for prefix in ("process_", "python_", "go_"):
        assert not [s for s in scrape.samples if s.name.startswith(prefix)], prefix
    labels: dict[str, set[str]] = {name: set() for name in FAMILIES}
    for s in scrape.samples:
        family = next(f for f in FAMILIES if s.name.startswith(f))
        labels[family] |= set(s.labels) - {"le"}
    assert labels == {
        "drover_jobs_completed": {"queue"},
        "drover_jobs_failed": {"queue"},
        "drover_job_duration_seconds": {"queue"},
        "drover_jobs_executing": set(),
        "drover_pool_concurrency": set(),
        "drover_queue_depth": {"queue", "state"},
        "drover_oldest_job_age_seconds": {"queue"},
        "drover_service_deaths": {"service"},
        "drover_periodic_ticks": set(),  # no periodic jobs configured: no series
        "drover_periodic_leader": set(),
        "drover_listener_reconnects": set(),
        "drover_writes_refused": {"reason"},
        "drover_cancels_delivered": {"via"},
        "drover_leases_lost": set(),
        "drover_reruns": {"reason"},
        "drover_stale_writes_refused": {"reason", "write"},
        "drover_event_loop_lag_seconds": set(),
        "drover_health_findings": {"code"},
        "drover_health_checked_timestamp_seconds": set(),
        "drover_database_errors": set(),  # no failure yet: no series
    }


# --- depth and age -----------------------------------------------------------------------------


def test_depth_and_age_reflect_the_database_after_a_refresh(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    client = _start(make_client, workers=_workers(), queues={"work": 1}, plugins=[stats(0.1)])
    # "parked" and "later" are not worked by this client, so their rows stay put.
    for _ in range(3):
        _insert_sql(conn, "parked")
    oldest = _insert_sql(conn, "parked")
    conn.execute(
        "UPDATE drover_jobs SET scheduled_at = now() - interval '100 seconds' WHERE id = %s",
        (oldest,),
    )
    future = datetime.now(UTC) + timedelta(hours=1)
    for _ in range(2):
        client.insert(Act(), drover.InsertOpts(queue="parked", scheduled_at=future))
    _insert_sql(conn, "parked", "retryable", scheduled_at="now() + interval '1 hour'")
    _insert_sql(conn, "parked", "running", attempt="1", leased_until="now() + interval '1 hour'")
    for _ in range(2):
        _insert_sql(conn, "parked", "dead", finalized_at="now()")
    # Terminal history is never counted.
    _insert_sql(conn, "parked", "completed", finalized_at="now()")
    _insert_sql(conn, "parked", "cancelled", finalized_at="now()")
    # A queue whose only job is in the future: depth, but nothing claimable.
    client.insert(Act(), drover.InsertOpts(queue="later", scheduled_at=future))

    expected = {
        "pending": 0,
        "available": 4,
        "scheduled": 2,
        "retryable": 1,
        "running": 1,
        "dead": 2,
    }
    scrape = poll(
        lambda: (s := _scrape(client)).depth("parked") == expected and s,
        10.0,
        message="the refresher publishing the parked queue",
    )
    assert scrape.depth("later") == {**dict.fromkeys(STATES, 0), "scheduled": 1}
    assert scrape.depth("work") == dict.fromkeys(STATES, 0)
    assert {s.labels["state"] for s in scrape.find("drover_queue_depth")} == set(STATES)
    assert 'state="completed"' not in scrape.text
    assert 'state="cancelled"' not in scrape.text

    # Age on the database clock, from the oldest claimable job.
    age = scrape.age("parked")
    assert age is not None
    assert 99.0 <= age <= 105.0
    assert scrape.age("later") == 0
    assert scrape.age("work") == 0

    # Same predicate as the fetch loop: a paused queue has nothing claimable.
    client.pause_queue("parked")
    paused = poll(
        lambda: (s := _scrape(client)).age("parked") == 0 and s,
        10.0,
        message="the paused queue's age dropping to 0",
    )
    assert paused.depth("parked") == expected


def test_age_grows_with_the_database_clock(make_client: MakeClient, conn: Conn, poll: Poll) -> None:
    client = _start(make_client, queues={"work": 1}, plugins=[stats(0.1)])
    _insert_sql(conn, "parked", scheduled_at="now() - interval '30 seconds'")
    first = poll(lambda: _scrape(client).age("parked"), 10.0, message="an age for parked")
    assert 29.0 <= first <= 35.0
    poll(
        lambda: (_scrape(client).age("parked") or 0) >= first + 0.3,
        10.0,
        message="the age growing on later refreshes",
    )
    conn.execute("UPDATE drover_jobs SET scheduled_at = now() - interval '500 seconds'")
    later = poll(
        lambda: (a := _scrape(client).age("parked") or 0) > 400 and a,
        10.0,
        message="the age following the row",
    )
    assert 499.0 <= later <= 505.0


def test_configured_queues_publish_zeros_before_the_first_refresh(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    _insert_sql(conn, "parked")
    client = make_client(queues={"work": 1, "idle": 2}, plugins=[stats(0.1)], ops_addr=EPHEMERAL)
    # Hold the first refresh (and every claim) behind a table lock: whatever the
    # scrape shows now cannot have come from the database.
    with conn.transaction():
        conn.execute("LOCK TABLE drover_jobs IN ACCESS EXCLUSIVE MODE")
        client.start()
        started = time.monotonic()
        scrape = _scrape(client)
        # A scrape that waited for the lock would wait until the block ends (the
        # request's own timeout is 10 s); the margin is for a busy machine.
        assert time.monotonic() - started < 8.0, "a scrape must not wait for the database"
        for queue in ("work", "idle"):
            assert scrape.depth(queue) == dict.fromkeys(STATES, 0), queue
            assert scrape.age(queue) == 0, queue
            assert scrape.value("drover_jobs_completed_total", queue=queue) == 0
            assert scrape.value("drover_jobs_failed_total", queue=queue) == 0
            assert scrape.value("drover_job_duration_seconds_count", queue=queue) == 0
        assert scrape.queues("drover_queue_depth") == {"work", "idle"}
        assert scrape.queues("drover_oldest_job_age_seconds") == {"work", "idle"}
        assert _ready(client) == (503, "queue stats stale"), "no refresh has succeeded yet"
    # Lock released: the first refresh lands.
    after = poll(
        lambda: (s := _scrape(client)).depth("parked").get("available") == 1 and s,
        10.0,
        message="the first refresh after the lock",
    )
    assert after.depth("work") == dict.fromkeys(STATES, 0)
    poll(lambda: _ready(client) == (200, "ok"), 10.0, message="/readyz turning ready")


def test_series_of_a_vanished_queue_are_removed_and_configured_ones_stay(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    client = _start(make_client, queues={"work": 1}, plugins=[stats(0.1)])
    for _ in range(2):
        client.insert(Act(), drover.InsertOpts(queue="gone"))
    poll(
        lambda: _scrape(client).depth("gone").get("available") == 2,
        10.0,
        message="the gone queue published",
    )
    conn.execute("DELETE FROM drover_jobs WHERE queue = 'gone'")

    def gone() -> bool:
        scrape = _scrape(client)
        # A surviving series never goes missing, not even mid-refresh.
        assert scrape.depth("work") == dict.fromkeys(STATES, 0)
        assert scrape.age("work") == 0
        return "gone" not in scrape.queues("drover_queue_depth") | scrape.queues(
            "drover_oldest_job_age_seconds"
        )

    poll(gone, 10.0, message="the gone queue's series removed")
    assert 'queue="gone"' not in _scrape(client).text


def test_a_scrape_never_touches_the_database(
    make_client: MakeClient, conn: Conn, poll: Poll, pg_server: str
) -> None:
    for _ in range(3):
        _insert_sql(conn, "parked")
    # A long interval: after the refresh at start nothing reads the database for the gauges.
    client = _start(make_client, queues={"work": 1}, plugins=[stats(60)])
    before = poll(
        lambda: (s := _scrape(client)).depth("parked").get("available") == 3 and s,
        10.0,
        message="the refresh at start",
    )
    assert _ready(client) == (200, "ok")
    with _database_refusing(pg_server, conn):
        for _ in range(3):
            started = time.monotonic()
            scrape = _scrape(client)
            # Reading the database would wait out the pool or fail the scrape.
            assert time.monotonic() - started < 8.0, "a scrape must be a memory read"
            assert scrape.depth("work") == before.depth("work")
            assert scrape.depth("parked") == before.depth("parked")
    # The stats stay fresh for two intervals, but the loops that lost their
    # connections say the database is unavailable (ADR 0044).
    poll(
        lambda: _ready(client)[1].startswith("database unavailable"),
        10.0,
        message="not ready while the database refuses",
    )


# --- ops endpoints -----------------------------------------------------------------------------


def test_routes_answer_as_specified(make_client: MakeClient, poll: Poll) -> None:
    client = _start(make_client, plugins=[stats(0.1)])
    addr = client.ops_addr
    assert addr is not None
    assert addr[0] == "127.0.0.1"
    assert addr[1] > 0
    assert _request(addr, "/healthz")[0] == 200
    poll(lambda: _ready(client) == (200, "ok"), 10.0, message="/readyz turning ready")
    status, body = _request(addr, "/metrics")
    assert status == 200
    assert "drover_pool_concurrency 10.0" in body
    assert _request(addr, "/nope")[0] == 404
    assert _request(addr, "/metrics/extra")[0] == 404
    for method in ("POST", "PUT", "DELETE"):
        assert _request(addr, "/metrics", method)[0] == 405, method
    assert _request(addr, "/readyz", "POST")[0] == 405


def test_the_port_is_bound_only_between_start_and_stop(make_client: MakeClient) -> None:
    port = _free_port()
    addr = ("127.0.0.1", port)
    client = make_client(ops_addr=f"127.0.0.1:{port}")
    assert client.ops_addr is None
    assert _refused(addr), "nothing listens before start()"
    client.start()
    assert client.ops_addr == addr
    assert _request(addr, "/healthz")[0] == 200
    ops = [t for t in threading.enumerate() if t.name.startswith("drover-ops-")]
    assert len(ops) == 1
    client.stop(timeout=5)
    assert _refused(addr), "the listener closes with stop()"
    assert not ops[0].is_alive()


def test_an_empty_ops_addr_means_no_listener_and_no_thread(make_client: MakeClient) -> None:
    client = make_client()
    assert client.config.ops_addr == ""
    client.start()
    assert client.ops_addr is None
    names = [t.name for t in threading.enumerate()]
    assert any(n.startswith("drover-") and "ops" not in n for n in names), names
    assert not [n for n in names if n.startswith("drover-ops-")], names
    # The registry is still there, to be served some other way.
    assert "drover_pool_concurrency" in {m.name for m in client.metrics_registry.collect()}


def test_ops_address_is_the_deprecated_name_of_ops_addr(make_client: MakeClient) -> None:
    client = make_client(ops_addr=EPHEMERAL)
    client.start()
    bound = client.ops_addr
    assert bound is not None and bound[1] > 0
    with pytest.warns(DeprecationWarning, match="use Client.ops_addr"):
        assert client.ops_address == bound
    client.stop(timeout=5)


def test_readyz_reports_draining_during_a_held_stop(
    make_client: MakeClient, conn: Conn, poll: Poll, gates: Gates
) -> None:
    client = _start(make_client, workers=_workers(gates), plugins=[stats(0.1)])
    addr = client.ops_addr
    assert addr is not None
    poll(lambda: _ready(client) == (200, "ok"), 10.0, message="/readyz turning ready")
    job = client.insert(Hold(gate=1))
    gates.wait_entered(1)

    errors: list[BaseException] = []

    def stop() -> None:
        try:
            client.stop(timeout=SAFETY)  # held open until the gate opens
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    stopper = threading.Thread(target=stop, name="test-stopper")
    stopper.start()
    try:
        poll(lambda: _ready(client) == (503, "draining"), 10.0, message="/readyz draining")
        assert _request(addr, "/healthz")[0] == 200
        status, body = _request(addr, "/metrics")
        assert status == 200
        assert Scrape(body).value("drover_jobs_executing") == 1
        assert stopper.is_alive(), "the drain is still held by the handler"
    finally:
        gates.release(1)
        stopper.join(10)
    assert not stopper.is_alive()
    assert errors == []
    assert _state(conn, job.id) == "completed"
    assert _refused(addr), "the listener closes at the end of stop()"


# --- database outage ---------------------------------------------------------------------------


@pytest.fixture
def pooled_client(db_url: str) -> Iterator[Callable[..., drover.Client]]:
    """Clients on a pool the test builds (so its timeout and checks can be chosen).

    Clients are stopped, then the pools closed, at teardown.
    """
    made: list[tuple[drover.Client, psycopg_pool.ConnectionPool[Any]]] = []

    def make(*, pool_timeout: float, check: bool, **fields: Any) -> drover.Client:
        pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
            db_url,
            min_size=1,
            max_size=4,
            timeout=pool_timeout,
            check=psycopg_pool.ConnectionPool.check_connection if check else None,
            kwargs={"autocommit": True},
            name="obs-test-pool",
            open=True,
        )
        pool.wait()
        fields.setdefault("ops_addr", EPHEMERAL)
        fields.setdefault("workers", idle_workers())
        client = drover.Client(pool, drover.Config(**fields))
        made.append((client, pool))
        return client

    yield make
    for client, pool in made:
        if client.running:
            with contextlib.suppress(drover.DrainIncomplete):
                client.stop(timeout=5)
        pool.close()


def _refresher(client: drover.Client) -> Any:
    return plugin_service(client, "refresher")


@pytest.mark.slow
def test_a_database_outage_turns_readyz_stale_and_recovery_ready_again(
    pooled_client: Callable[..., drover.Client], conn: Conn, poll: Poll, pg_server: str
) -> None:
    # The pool checks connections before handing them out and waits long for
    # one, so during the outage the refresher waits instead of failing: this
    # test is about the readiness transitions (failures: the next test).
    client = pooled_client(pool_timeout=60, check=True, queues={"work": 1}, plugins=[stats(0.2)])
    client.start()
    addr = client.ops_addr
    assert addr is not None
    poll(lambda: _ready(client) == (200, "ok"), 10.0, message="/readyz turning ready")
    # Cut just after a refresh finished, not in the middle of one.
    refresher = _refresher(client)
    last = refresher.last_success
    poll(lambda: refresher.last_success != last, 10.0, message="a refresh completing")

    with _database_refusing(pg_server, conn):
        cut = time.monotonic()
        poll(lambda: _ready(client)[0] == 503, 10.0, message="/readyz turning not ready")
        # Two intervals are 0.4 s; allow generously for a busy machine's scheduling,
        # not for a wrong bound (the pool's 60 s timeout).
        assert time.monotonic() - cut < 6.0
        assert _request(addr, "/healthz") == (200, "ok\n")
        started = time.monotonic()
        assert _scrape(client).depth("work") == dict.fromkeys(STATES, 0)
        assert time.monotonic() - started < 8.0, "a scrape must not wait for the database"
        # Stale stats, or (first) a loop that lost its connection (ADR 0044).
        status, reason = _ready(client)
        assert status == 503
        assert reason == "queue stats stale" or reason.startswith("database unavailable")
        assert _request(addr, "/healthz")[0] == 200

    poll(lambda: _ready(client) == (200, "ok"), 30.0, message="/readyz ready after recovery")
    assert _request(addr, "/healthz")[0] == 200


@pytest.mark.slow
def test_failed_refreshes_are_logged_and_retried_until_the_database_is_back(
    pooled_client: Callable[..., drover.Client],
    conn: Conn,
    poll: Poll,
    pg_server: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="drover")
    # A short pool timeout: during the outage every refresh fails within about a second.
    client = pooled_client(pool_timeout=1.0, check=False, queues={"work": 1}, plugins=[stats(0.2)])
    client.start()
    addr = client.ops_addr
    assert addr is not None
    poll(lambda: _ready(client) == (200, "ok"), 10.0, message="/readyz turning ready")

    def refresh_failures() -> float:
        return (
            client.metrics_registry.get_sample_value(
                "drover_database_errors_total", {"service": "refresher", "kind": "connection"}
            )
            or 0.0
        )

    with _database_refusing(pg_server, conn):
        poll(lambda: _ready(client)[0] == 503, 10.0, message="/readyz turning not ready")
        assert _request(addr, "/healthz")[0] == 200
        # Counted, and tried again on the next interval: more than one failure,
        # logged once for the whole episode (ADR 0044).
        poll(lambda: refresh_failures() >= 2, 15.0, message="refresh failures counted")
        assert _ready(client)[0] == 503
        warnings = [
            r for r in caplog.records if r.name == "drover" and r.levelno == logging.WARNING
        ]
        assert [getattr(r, "event", None) for r in warnings].count("database_trouble") == 1

    poll(lambda: _ready(client) == (200, "ok"), 30.0, message="/readyz ready after recovery")
    assert _request(addr, "/healthz")[0] == 200


# --- start failures ----------------------------------------------------------------------------


def test_a_busy_ops_port_fails_start_and_leaves_the_client_startable(
    make_client: MakeClient, poll: Poll
) -> None:
    blocker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = int(blocker.getsockname()[1])
        client = make_client(ops_addr=f"127.0.0.1:{port}", plugins=[stats(0.1)])
        before = set(threading.enumerate())
        with pytest.raises(drover.ConfigError, match=f"127.0.0.1:{port}"):
            client.start()
        started = [t.name for t in threading.enumerate() if t not in before]
        assert not [n for n in started if n.startswith("drover-")], started
        assert not client.running
        assert client.ops_addr is None
    finally:
        blocker.close()

    client.start()
    assert client.running
    assert client.ops_addr == ("127.0.0.1", port)
    poll(lambda: _ready(client) == (200, "ok"), 10.0, message="/readyz turning ready")
    # A second start is refused for being started, not for the (now ours) port.
    with pytest.raises(drover.AlreadyStarted):
        client.start()
    assert _request(("127.0.0.1", port), "/healthz")[0] == 200


# --- registries --------------------------------------------------------------------------------


def test_sharing_a_registry_between_clients_is_a_config_error(make_client: MakeClient) -> None:
    registry = CollectorRegistry()
    first = make_client(metrics_registry=registry)
    assert first.metrics_registry is registry
    with pytest.raises(drover.ConfigError, match="metrics_registry"):
        make_client(metrics_registry=registry)
    # The first client's metrics are intact.
    names = {m.name for m in registry.collect()}
    assert set(FAMILIES) <= names


def test_two_clients_with_default_registries_each_count_their_own(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    a = _start(make_client, workers=_workers(), queues={"qa": 1})
    b = _start(make_client, workers=_workers(), queues={"qb": 1})
    assert a.metrics_registry is not b.metrics_registry
    assert a.ops_addr != b.ops_addr
    jobs = [a.insert(Act(), drover.InsertOpts(queue="qa")) for _ in range(2)]
    jobs += [b.insert(Act(), drover.InsertOpts(queue="qb")) for _ in range(3)]
    for job in jobs:
        _await_state(poll, conn, job.id, "completed")

    for client, own, other, count in ((a, "qa", "qb", 2), (b, "qb", "qa", 3)):
        scrape = _scrape(client)
        assert scrape.value("drover_jobs_completed_total", queue=own) == count
        assert scrape.value("drover_job_duration_seconds_count", queue=own) == count
        for name in (
            "drover_jobs_completed_total",
            "drover_jobs_failed_total",
            "drover_job_duration_seconds_count",
        ):
            assert scrape.queues(name) == {own}, (own, name)
        assert not scrape.find("drover_jobs_completed_total", queue=other)


# --- configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize("interval", [0, -1, timedelta(seconds=-3)])
def test_a_stats_interval_that_is_not_positive_is_refused(interval: float | timedelta) -> None:
    with pytest.raises(drover.ConfigError, match="plugin 'refresher': interval must be positive"):
        drover.plugins.QueueStats(interval=interval)
    assert drover.plugins.QueueStats(interval=0.25).interval == timedelta(seconds=0.25)
    assert drover.Config().plugin("refresher") == drover.plugins.QueueStats(interval=15)
    with (
        pytest.warns(DeprecationWarning, match="Config.stats_interval is deprecated"),
        pytest.raises(drover.ConfigError, match="Config.stats_interval must be positive"),
    ):
        drover.Config(stats_interval=interval)


@pytest.mark.parametrize("addr", ["nonsense", "127.0.0.1:", "127.0.0.1:99999", "host:port"])
def test_a_malformed_ops_addr_is_a_config_error(addr: str) -> None:
    with pytest.raises(drover.ConfigError, match="ops_addr"):
        drover.Config(ops_addr=addr)


def test_a_metrics_registry_must_be_a_collector_registry() -> None:
    with pytest.raises(drover.ConfigError, match="metrics_registry"):
        drover.Config(metrics_registry=object())  # type: ignore[arg-type]
