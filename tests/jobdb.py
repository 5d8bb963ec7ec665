"""Test helpers: reading drover_jobs, checking rows, starting clients (tests/ is on sys.path)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import psycopg
from prometheus_client import CollectorRegistry
from psycopg.rows import dict_row

import drover
from drover._db.store import Store
from drover._kernel.claims import InFlight, Slots
from drover._kernel.kit import Kit
from drover._kernel.service import ThreadService
from drover._runtime.engine import settings_of
from drover._runtime.wiring import Wiring
from drover.config import periodic_jobs_of
from drover.ops.metrics import Metrics
from drover.queues import caps_of

Conn = psycopg.Connection[tuple[Any, ...]]
MakeClient = Callable[..., drover.Client]
Poll = Callable[..., Any]

# Values jsonb keeps exactly as Python wrote them (type included): floats that
# are not integers, integers past 64 bits, text outside ASCII, escapes, nesting.
RICH: dict[str, Any] = {
    "tenth": 0.1,
    "sum": 0.1 + 0.2,
    "tiny": 1e-7,
    "one": 1.0,
    "neg": -2.5,
    "pi": 3.141592653589793,
    "big": 2**70,
    "small": -(2**63),
    "zero": 0,
    "text": 'Grüße ✓ 日本 😀 "quoted" back\\slash \u2028 tab\t newline\n',
    "flags": [True, False, None],
    "nested": {"list": [1, [2, [3, {"deep": "é"}]]], "empty": {}, "none": []},
    # Out of jsonb's key order (shorter keys first): the dict must still match.
    "zzzzzzzzzz": 1,
    "a": {"bb": 2, "a": 1},
}


def count_jobs(conn: Conn) -> int:
    """Rows in drover_jobs."""
    row = conn.execute("SELECT count(*) FROM drover_jobs").fetchone()
    assert row is not None
    return int(row[0])


def table_snapshot(conn: Conn) -> tuple[list[tuple[Any, ...]], object]:
    """Every row with its ``xmin`` (any write changes it), and the id sequence's position."""
    rows = conn.execute("SELECT xmin::text, * FROM drover_jobs ORDER BY id").fetchall()
    seq = conn.execute(
        "SELECT pg_sequence_last_value(pg_get_serial_sequence('drover_jobs', 'id')::regclass)"
    ).fetchone()
    assert seq is not None
    return rows, seq[0]


def db_now(conn: Conn) -> datetime:
    """The database clock."""
    row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    moment: datetime = row[0]
    return moment


def job_row(conn: Conn, job_id: int) -> dict[str, Any]:
    """One job as a dict (state as text)."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            "SELECT id, kind, queue, state::text AS state, attempt, max_attempts, errors, "
            "scheduled_at, leased_until, created_at, finalized_at FROM drover_jobs WHERE id = %s",
            (job_id,),
        )
        row = cur.fetchone()
    assert row is not None
    return row


def await_job_state(
    poll: Callable[..., Any], conn: Conn, job_id: int, state: str, **match: Any
) -> dict[str, Any]:
    """Poll until the job is in ``state`` (and its columns equal ``match``); return that row."""

    def reached() -> dict[str, Any] | None:
        row = job_row(conn, job_id)
        if row["state"] == state and all(row[k] == v for k, v in match.items()):
            return row
        return None

    result: dict[str, Any] = poll(reached, 10.0, message=f"job {job_id} reaching {state} {match}")
    return result


def typed(value: Any) -> Any:
    """``value`` with every scalar paired with its type: ``1 == 1.0`` but not here."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    return (type(value).__name__, value)


def invisible(client: drover.Client, job_id: int) -> bool:
    """True when ``client`` (another connection) cannot see the job: ``get_job`` raises NotFound."""
    try:
        client.get_job(job_id)
    except drover.NotFound:
        return True
    return False


def assert_stored(client: drover.Client, rows: list[drover.JobRow]) -> None:
    """Each returned row equals, field for field and type for type, what ``get_job`` reads."""
    for row in rows:
        stored = client.get_job(row.id)  # NotFound if it was not stored
        assert row == stored
        assert typed(row.args) == typed(stored.args)
        assert type(row.state) is type(stored.state) is drover.JobState


def sample_row(**changes: Any) -> drover.JobRow:
    """A plausible ``JobRow`` built in memory (no database), with ``changes`` applied."""
    now = datetime.now(UTC)
    row = drover.JobRow(
        id=1,
        kind="k",
        queue="default",
        args={},
        state=drover.JobState.AVAILABLE,
        attempt=0,
        max_attempts=25,
        errors=(),
        scheduled_at=now,
        leased_until=None,
        created_at=now,
        finalized_at=None,
        unique_key=None,
        priority=0,
    )
    return row._replace(**changes)


def start_client(make_client: MakeClient, workers: drover.Workers, **fields: Any) -> drover.Client:
    """A started client for ``workers`` that polls every 50 ms; ``fields`` go to ``Config``."""
    fields.setdefault("poll_interval", 0.05)
    client = make_client(workers=workers, **fields)
    client.start()
    return client


def observe(duration: float, check: Callable[[], None], interval: float = 0.02) -> int:
    """Run ``check`` repeatedly for ``duration`` seconds; return how many times it ran.

    An observation window for something that must *stay* true, not a wait for a
    condition (that is ``poll``).
    """
    end = time.monotonic() + duration
    pause = threading.Event()
    samples = 0
    while True:
        check()
        samples += 1
        if time.monotonic() >= end:
            return samples
        pause.wait(interval)


def wiring(source: drover.Client | Store, **fields: Any) -> Wiring:
    """What a started client builds its services from, for a service built alone in a test.

    ``source`` is a client (its store) or a store; ``fields`` go to ``Config``.
    The metrics record on a registry of their own (``wiring.metrics.registry``).
    """
    store = source._store if isinstance(source, drover.Client) else source
    config = drover.Config(**fields)
    metrics = Metrics(
        CollectorRegistry(),
        concurrency=config.concurrency,
        queues=list(config.queues),
        periodic_ids=[job.id for job in periodic_jobs_of(config)],
    )
    return Wiring(
        store=store,
        config=config,
        inflight=InFlight(caps_of(config.queues)),
        slots=Slots(config.concurrency),
        metrics=metrics,
        client_id="test",
    )


def kit(source: drover.Client | Store, **fields: Any) -> Kit:
    """What a started client builds its kernel's services from, for one built alone in a test.

    As ``wiring``: the kernel's store of ``source``, its settings from ``Config(**fields)``,
    the metrics (on a registry of their own: ``kit.events.registry``) as its events.
    """
    wired = wiring(source, **fields)
    return Kit(
        store=wired.store.kernel,
        settings=settings_of(wired.config),
        inflight=wired.inflight,
        slots=wired.slots,
        client_id="test",
        events=wired.metrics,
    )


def plugin_service(client: drover.Client, name: str) -> ThreadService | None:
    """The running service of a started client's plugin, by name (``"periodic"``,
    ``"pruner"``, ``"refresher"``, ``"health"``...), or None when it runs none."""
    engine = client._engine
    assert engine is not None, "the client is not started"
    return engine.plugins.service(name)


class _Idle(drover.JobArgs, kind="test_idle"):
    """A kind no test inserts: the registry of clients whose test is not about workers."""


def idle_workers() -> drover.Workers:
    """A registry with one kind no test inserts.

    A client with no workers refuses to start, so a test about something else
    (the lifecycle, services, metrics, the scheduler) gives it this one.
    """
    workers = drover.Workers()

    @workers.register
    def idle(job: drover.Job[_Idle]) -> None:
        """Never runs: nothing inserts the kind."""

    return workers
