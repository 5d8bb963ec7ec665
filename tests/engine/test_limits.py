"""Cluster-wide limits in running clients: declarations at start, release wake-ups, validation."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from jobdb import Conn, MakeClient, Poll, observe

import drover
from drover._runtime import starts

SAFETY = 20.0
"""Longest a blocked handler waits on its own (a failing test never hangs)."""

IDLE_POLL = 30.0
"""A poll interval no wake-up test could mistake for a wake-up."""

WAKE_BUDGET = 15.0  # half IDLE_POLL: room for a busy machine, not for a missed wake-up


class Solo(drover.JobArgs, kind="limits_solo", limits=drover.Limit(concurrency=1)):
    n: int = 0


class Tenanted(
    drover.JobArgs,
    kind="limits_tenanted",
    limits=[
        drover.Limit(concurrency=2, partition_by="tenant"),
        drover.Limit(rate=100, per="minute"),
    ],
):
    tenant: str = ""


class Gate:
    """Handlers that block until released, recording how many run at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.release = threading.Event()
        self.running = 0
        self.most = 0
        self.started: list[tuple[int, float]] = []

    def solo(self, job: drover.Job[Solo]) -> None:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            self.started.append((job.args.n, time.monotonic()))
        try:
            if job.args.n == 0:
                self.release.wait(SAFETY)
        finally:
            with self.lock:
                self.running -= 1

    def tenanted(self, job: drover.Job[Tenanted]) -> None:
        pass

    def workers(self) -> drover.Workers:
        w = drover.Workers()
        w.register(self.solo)
        w.register(args=Tenanted)(self.tenanted)
        return w


@pytest.fixture
def gate(make_client: MakeClient) -> Iterator[Gate]:
    g = Gate()
    yield g
    g.release.set()


def _limits(conn: Conn) -> list[tuple[object, ...]]:
    return conn.execute(
        "SELECT scope, target, partition_by, declared_concurrency, declared_rate, "
        "extract(epoch FROM declared_per)::int FROM drover_limits ORDER BY target, partition_by"
    ).fetchall()


def test_a_starting_client_declares_its_kinds_limits(
    make_client: MakeClient, gate: Gate, conn: Conn
) -> None:
    client = make_client(workers=gate.workers(), poll_interval=0.05)
    assert _limits(conn) == []
    client.start()
    assert _limits(conn) == [
        ("kind", "limits_solo", "", 1, None, None),
        ("kind", "limits_tenanted", "", None, 100, 60),
        ("kind", "limits_tenanted", "tenant", 2, None, None),
    ]


def test_a_declaration_keeps_an_operators_override(
    make_client: MakeClient, gate: Gate, conn: Conn, db_url: str
) -> None:
    with drover.Inspector(db_url) as inspector:
        inspector.set_limit("kind:limits_solo", concurrency=4)
    make_client(workers=gate.workers(), poll_interval=0.05).start()
    row = conn.execute(
        "SELECT declared_concurrency, override_concurrency FROM drover_limits "
        "WHERE target = 'limits_solo'"
    ).fetchone()
    assert row == (1, 4)


def test_a_release_wakes_the_fetchers_of_every_client(
    make_client: MakeClient, gate: Gate, poll: Poll
) -> None:
    # Two clients that only poll every 30 s: the held-back job can start
    # within seconds only if the first job's completion woke a fetcher.
    clients = [
        make_client(workers=gate.workers(), poll_interval=IDLE_POLL, concurrency=2)
        for _ in range(2)
    ]
    for c in clients:
        c.start()
    clients[0].insert(Solo(n=0))
    poll(lambda: gate.running == 1, message="the first job runs")
    clients[0].insert(Solo(n=1))

    # Held back: both clients claimed nothing for it and went back to sleep.
    def held_back() -> None:
        assert len(gate.started) == 1

    observe(0.5, held_back)
    released_at = time.monotonic()
    gate.release.set()
    poll(lambda: len(gate.started) == 2, timeout=WAKE_BUDGET, message="the held-back job starts")
    assert gate.started[1][1] - released_at < WAKE_BUDGET
    assert gate.most == 1


def test_a_release_wakes_a_client_waiting_on_the_limit_from_another_queue(
    make_client: MakeClient, gate: Gate, poll: Poll
) -> None:
    # A kind limit spans queues: the job holding the slot runs from queue
    # "first", the one held back waits in queue "second", worked by another
    # client. Both poll every 30 s: the held-back job starts within
    # WAKE_BUDGET only if the release woke the second client's fetcher,
    # which listens for "second", not for the queue whose job ended.
    holder = make_client(
        workers=gate.workers(), poll_interval=IDLE_POLL, queues={"first": 1}, concurrency=2
    )
    waiter = make_client(
        workers=gate.workers(), poll_interval=IDLE_POLL, queues={"second": 1}, concurrency=2
    )
    holder.start()
    waiter.start()
    holder.insert(Solo(n=0), drover.InsertOpts(queue="first"))
    poll(lambda: gate.running == 1, message="the first job runs")
    held = holder.insert(Solo(n=1), drover.InsertOpts(queue="second"))

    def held_back() -> None:
        assert len(gate.started) == 1

    # Held back: the insert's wake-up reached the waiter, whose claim the
    # limit refused, and it went back to sleep.
    observe(0.5, held_back)
    assert waiter.get_job(held.id).state == drover.JobState.AVAILABLE
    gate.release.set()
    poll(
        lambda: len(gate.started) == 2,
        timeout=WAKE_BUDGET,
        message="the held-back job in the other queue starts",
    )
    assert gate.most == 1


def test_a_raised_limit_releases_held_back_jobs_at_once(
    make_client: MakeClient, gate: Gate, poll: Poll, db_url: str
) -> None:
    client = make_client(workers=gate.workers(), poll_interval=IDLE_POLL, concurrency=3)
    client.start()
    client.insert(Solo(n=0))
    poll(lambda: gate.running == 1, message="the first job runs")
    client.insert(Solo(n=0))
    observe(0.3, lambda: None)
    assert gate.running == 1
    with drover.Inspector(db_url) as inspector:
        inspector.set_limit("kind:limits_solo", concurrency=2)
    poll(lambda: gate.running == 2, timeout=WAKE_BUDGET, message="the second job starts")


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        (drover.Limit(concurrency=1, partition_by="tenat"), "did you mean 'tenant'"),
        ("3", "must be a drover.Limit"),
        ([drover.Limit(concurrency=1), drover.Limit(rate=2)], "two limits with no partition"),
    ],
)
def test_a_bad_limit_on_a_job_class_fails_where_the_class_is_defined(
    limits: object, message: str
) -> None:
    with pytest.raises(drover.InvalidJobArgs, match=message):

        class Bad(drover.JobArgs, kind="limits_bad", limits=limits):
            tenant: str


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({}, "needs concurrency= .* or rate="),
        ({"concurrency": 0}, "between 1 and"),
        ({"concurrency": -3}, "between 1 and"),
        ({"concurrency": True}, "positive int"),
        ({"rate": 5, "per": "fortnight"}, "'second', 'minute', 'hour'"),
        ({"rate": 5, "per": 0}, "more than 0"),
        ({"rate": 5, "per": timedelta(days=2)}, "at most one day"),
        ({"rate": 5, "per": "5"}, "'second', 'minute', 'hour'"),
        ({"concurrency": 1, "per": 1}, "give rate= too"),
        ({"concurrency": 1, "partition_by": "a.b"}, "top-level args field"),
        ({"concurrency": 1, "partition_by": ""}, "top-level args field"),
        ({"concurrency": 1, "counts": "starts"}, "give rate= too"),
        ({"rate": 1, "counts": "runs"}, '"claims" or "starts"'),
    ],
)
def test_a_bad_limit_is_refused_when_it_is_built(values: dict[str, object], message: str) -> None:
    with pytest.raises(drover.InvalidLimit, match=message):
        drover.Limit(**values)  # type: ignore[arg-type]


def test_limits_have_a_readable_repr_and_key_text() -> None:
    assert repr(drover.Limit(rate=20, per=60, partition_by="t")) == (
        "Limit(rate=20, per='minute', partition_by='t')"
    )
    assert repr(drover.Limit(rate=5, counts="starts")) == (
        "Limit(rate=5, per='second', counts='starts')"
    )
    key = drover.limits.parse_limit_key("kind:charge[tenant_id]")
    assert key == drover.LimitKey("kind", "charge", "tenant_id")
    assert str(key) == "kind:charge[tenant_id]"
    with pytest.raises(drover.InvalidLimit, match="queue:NAME or kind:NAME"):
        drover.limits.parse_limit_key("tenant:x")


class Metered(
    drover.JobArgs,
    kind="limits_metered",
    limits=drover.Limit(rate=1, per=60, counts="starts"),
):
    n: int = 0


def test_a_job_waiting_for_its_start_goes_back_to_the_queue_when_the_client_stops(
    make_client: MakeClient, conn: Conn, poll: Poll, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One start a minute, counted when handlers start: the second job waits
    # in its slot for the window (the hold is raised past the minute here).
    # A stop must not wait for it: the job goes back, its attempt refunded.
    monkeypatch.setattr(starts, "HOLD_AT_MOST", 120.0)
    started: list[tuple[int, object]] = []

    def metered(job: drover.Job[Metered]) -> None:
        started.append((job.args.n, job.context.values.get(starts.STARTED_AT)))

    workers = drover.Workers()
    workers.register(metered)
    client = make_client(workers=workers, poll_interval=0.05, concurrency=2)
    client.start()
    row = conn.execute(
        "SELECT counts_starts, declared_rate FROM drover_limits WHERE target = 'limits_metered'"
    ).fetchone()
    assert row == (True, 1)
    first = client.insert(Metered(n=1))
    poll(lambda: client.get_job(first.id).state == drover.JobState.COMPLETED, message="job 1")
    second = client.insert(Metered(n=2))
    poll(
        lambda: client.get_job(second.id).state == drover.JobState.RUNNING,
        message="job 2 claimed, waiting for its start",
    )
    observe(0.3, lambda: None)
    assert [n for n, _ in started] == [1]
    stopping = time.monotonic()
    client.stop(timeout=SAFETY)
    took = time.monotonic() - stopping
    back = conn.execute(
        "SELECT state::text, attempt FROM drover_jobs WHERE id = %s", (second.id,)
    ).fetchone()
    assert back == ("scheduled", 0)  # snoozed for no time (claimable at once), attempt refunded
    assert [n for n, _ in started] == [1]
    assert started[0][1] is not None  # the handler sees its start's database time
    assert took < 30.0, took  # half the window: the stop did not wait for it


def test_operators_see_what_a_rate_counts(make_client: MakeClient, db_url: str) -> None:
    def metered(job: drover.Job[Metered]) -> None:
        pass

    workers = drover.Workers()
    workers.register(metered)
    make_client(workers=workers, poll_interval=IDLE_POLL).start()
    with drover.Inspector(db_url) as inspector:
        (state,) = [s for s in inspector.limits() if s.key.target == "limits_metered"]
    assert state.counts == "starts"
    assert state.declared == drover.Limit(rate=1, per=60, counts="starts")


class MeteredAsync(
    drover.JobArgs,
    kind="limits_metered_async",
    limits=drover.Limit(rate=2, per=60, counts="starts"),
):
    n: int = 0


def test_an_async_job_whose_start_is_far_off_is_snoozed_until_the_window_has_room(
    make_client: MakeClient, conn: Conn, poll: Poll
) -> None:
    # Two starts a minute: the third job would wait most of a minute, longer
    # than a slot is held, so it goes back to the queue until then.
    started: list[object] = []
    workers = drover.Workers()

    @workers.register
    async def metered(job: drover.Job[MeteredAsync]) -> None:
        started.append(job.context.values.get(starts.STARTED_AT))

    client = make_client(workers=workers, poll_interval=0.05, concurrency=3)
    client.start()
    jobs = client.insert_many([MeteredAsync(n=i) for i in range(3)])
    ids = [j.id for j in jobs]

    def settled() -> list[tuple[str, int]]:
        rows = conn.execute(
            "SELECT state::text, attempt FROM drover_jobs WHERE id = ANY(%s) ORDER BY 1",
            (ids,),
        ).fetchall()
        return [(state, attempt) for state, attempt in rows]

    poll(
        lambda: settled() == [("completed", 1), ("completed", 1), ("scheduled", 0)],
        timeout=SAFETY,
        message="two run, the third is snoozed",
    )
    assert len(started) == 2 and all(s is not None for s in started)
    row = conn.execute(
        "SELECT j.scheduled_at - (SELECT min(started_at) FROM drover_limit_starts) "
        "FROM drover_jobs j WHERE j.id = ANY(%s) AND j.state = 'scheduled'",
        (ids,),
    ).fetchone()
    assert row is not None
    # Due when the first start leaves the window (the snooze's own clock is
    # the worker's: a second of slack for a busy machine).
    assert timedelta(seconds=58) < row[0] < timedelta(seconds=62), row[0]
