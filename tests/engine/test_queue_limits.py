"""Limits declared on a ``drover.Queue``: written when a client starts, held across clients.

Handlers hold their slots on a semaphore, so the test decides when each job
ends; every wait is a ``poll`` with a deadline or an ``observe`` window.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

import pytest
from jobdb import Conn, MakeClient, Poll, observe

import drover

SAFETY = 20.0
"""Longest a held handler waits on its own (a failing test never hangs)."""


class Report(drover.JobArgs, kind="qlimits_report", queue="reports"):
    tenant: int = 0


class Export(drover.JobArgs, kind="qlimits_export", queue="reports"):
    tenant: int = 0


class Holder:
    """Records running jobs (in all, and per tenant) and holds each until released."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.gate = threading.Semaphore(0)
        self.running = 0
        self.most = 0
        self.done = 0
        self.by_tenant: Counter[int] = Counter()
        self.most_by_tenant: Counter[int] = Counter()

    def _run(self, tenant: int) -> None:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            self.by_tenant[tenant] += 1
            self.most_by_tenant[tenant] = max(self.most_by_tenant[tenant], self.by_tenant[tenant])
        try:
            self.gate.acquire(timeout=SAFETY)
        finally:
            with self.lock:
                self.running -= 1
                self.by_tenant[tenant] -= 1
                self.done += 1

    def report(self, job: drover.Job[Report]) -> None:
        self._run(job.args.tenant)

    def export(self, job: drover.Job[Export]) -> None:
        self._run(job.args.tenant)

    def workers(self) -> drover.Workers:
        w = drover.Workers()
        w.register(args=Report)(self.report)
        w.register(args=Export)(self.export)
        return w


@pytest.fixture
def holder(make_client: MakeClient) -> Iterator[Holder]:
    h = Holder()
    yield h
    h.gate.release(1000)  # before make_client stops the clients


def _config(holder: Holder, limits: drover.Limit | list[drover.Limit]) -> drover.Config:
    return drover.Config(
        workers=holder.workers(),
        concurrency=4,
        queues={"reports": drover.Queue(limits=limits), "default": 1},
        poll_interval=0.05,
    )


def _declared(conn: Conn) -> list[tuple[object, ...]]:
    return conn.execute(
        "SELECT scope, target, partition_by, declared_concurrency, declared_rate, "
        "extract(epoch FROM declared_per)::int FROM drover_limits ORDER BY target, partition_by"
    ).fetchall()


def test_a_starting_client_declares_its_queues_limits(
    make_client: MakeClient, holder: Holder, conn: Conn, db_url: str
) -> None:
    client = make_client(
        _config(
            holder,
            [
                drover.Limit(concurrency=3),
                drover.Limit(rate=100, per="minute", partition_by="tenant"),
            ],
        )
    )
    assert _declared(conn) == []
    client.start()
    assert _declared(conn) == [
        ("queue", "reports", "", 3, None, None),
        ("queue", "reports", "tenant", None, 100, 60),
    ]
    with drover.Inspector(db_url) as inspector:
        keys = {str(state.key): state.declared for state in inspector.limits()}
    assert keys == {
        "queue:reports": drover.Limit(concurrency=3),
        "queue:reports[tenant]": drover.Limit(rate=100, per="minute", partition_by="tenant"),
    }


def test_a_queue_limit_holds_across_two_clients(
    make_client: MakeClient, holder: Holder, poll: Poll
) -> None:
    # Eight slots between the two clients, eight jobs of both kinds: the
    # queue's limit, not the slots, keeps the running jobs at three.
    clients = [make_client(_config(holder, drover.Limit(concurrency=3))) for _ in range(2)]
    clients[0].insert_many([Report(tenant=i) if i % 2 else Export(tenant=i) for i in range(8)])
    for client in clients:
        client.start()
    poll(lambda: holder.running == 3, message="three jobs of the queue run")

    def at_the_limit() -> None:
        assert holder.running == 3

    observe(0.5, at_the_limit)
    holder.gate.release(1)
    poll(
        lambda: holder.done == 1 and holder.running == 3, message="a held-back job takes its place"
    )
    holder.gate.release(1000)
    poll(lambda: holder.done == 8, message="every job ran")
    assert holder.most == 3


def test_a_queue_limit_partitioned_by_a_field_counts_it_across_the_queues_kinds(
    make_client: MakeClient, holder: Holder, poll: Poll
) -> None:
    client = make_client(_config(holder, drover.Limit(concurrency=1, partition_by="tenant")))
    client.insert_many([Report(tenant=1), Export(tenant=1), Report(tenant=2), Export(tenant=3)])
    client.start()
    poll(lambda: holder.running == 3, message="one job of each tenant runs")

    def one_per_tenant() -> None:
        assert holder.running == 3
        assert holder.by_tenant[1] == 1

    # Tenant 1's second job, of the other kind, waits for the first.
    observe(0.5, one_per_tenant)
    holder.gate.release(1000)
    poll(lambda: holder.done == 4, message="every job ran")
    assert holder.most_by_tenant == Counter({1: 1, 2: 1, 3: 1})
