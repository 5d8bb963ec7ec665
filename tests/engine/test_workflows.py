"""Dependencies and workflows in running clients: chains, groups, chords, cascades (ADR 0029)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from jobdb import Conn, MakeClient, Poll

import drover

IDLE_POLL = 30.0
"""A poll interval no wake-up test could mistake for a wake-up."""


class Step(drover.JobArgs, kind="wf_step"):
    name: str
    fail: bool = False


class Journal:
    """What the handlers saw: the order they ran in and the results they were given."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.order: list[str] = []
        self.parents: dict[str, list[Any]] = {}
        self.gate = threading.Event()
        self.gate.set()

    def step(self, job: drover.Job[Step]) -> object:
        self.gate.wait(20)
        parents = job.parent_results()
        with self.lock:
            self.order.append(job.args.name)
            self.parents[job.args.name] = parents
        if job.args.fail:
            raise RuntimeError(f"{job.args.name} failed")
        return {"from": job.args.name}

    def workers(self) -> drover.Workers:
        w = drover.Workers()
        w.register(self.step)
        return w


@pytest.fixture
def journal() -> Iterator[Journal]:
    j = Journal()
    yield j
    j.gate.set()


def _client(make_client: MakeClient, journal: Journal, **fields: Any) -> drover.Client:
    fields.setdefault("poll_interval", IDLE_POLL)
    client = make_client(workers=journal.workers(), **fields)
    client.start()
    return client


def _states(conn: Conn, ids: list[int]) -> list[str]:
    rows = conn.execute(
        "SELECT id, state::text FROM drover_jobs WHERE id = ANY(%s) ORDER BY id", (ids,)
    ).fetchall()
    by_id: dict[int, str] = {int(k): str(v) for k, v in rows}
    return [by_id[i] for i in ids]


def test_a_chain_runs_in_order_and_hands_each_step_its_predecessors_result(
    make_client: MakeClient, journal: Journal, conn: Conn
) -> None:
    client = _client(make_client, journal)
    wf = client.insert(drover.chain(Step(name="a"), Step(name="b"), Step(name="c")))
    assert isinstance(wf, drover.InsertedWorkflow)
    assert [r.state for r in wf.jobs] == ["available", "pending", "pending"]
    assert wf.id == wf.jobs[0].id and [r.id for r in wf.last] == [wf.jobs[2].id]
    # Each step starts on the release's wake-up: the poll interval is 30 s.
    assert client.result(wf.last[0], timeout=10) == {"from": "c"}
    assert journal.order == ["a", "b", "c"]
    assert journal.parents == {"a": [], "b": [{"from": "a"}], "c": [{"from": "b"}]}
    ids = [r.id for r in wf.jobs]
    assert _states(conn, ids) == ["completed"] * 3
    workflow_ids = conn.execute(
        "SELECT DISTINCT workflow_id FROM drover_jobs WHERE id = ANY(%s)", (ids,)
    ).fetchall()
    assert workflow_ids == [(wf.id,)]


def test_a_chord_callback_waits_for_every_member_and_gets_their_results_in_order(
    make_client: MakeClient, journal: Journal
) -> None:
    client = _client(make_client, journal, concurrency=4)
    members = [Step(name=f"m{i}") for i in range(5)]
    wf = client.insert(drover.group(*members).then(Step(name="sum")))
    assert client.result(wf.last[0], timeout=15) == {"from": "sum"}
    assert journal.order[-1] == "sum"
    assert sorted(journal.order[:-1]) == [f"m{i}" for i in range(5)]
    assert journal.parents["sum"] == [{"from": f"m{i}"} for i in range(5)]


def test_nested_workflows_order_every_level(make_client: MakeClient, journal: Journal) -> None:
    client = _client(make_client, journal, concurrency=4)
    wf = client.insert(
        drover.chain(
            drover.group(Step(name="a1"), drover.chain(Step(name="a2"), Step(name="a3"))),
            Step(name="b"),
            drover.group(Step(name="c1"), Step(name="c2")),
        )
    )
    assert [r.args["name"] for r in wf.last] == ["c1", "c2"]
    for row in wf.last:
        client.result(row, timeout=15)
    order = journal.order
    assert order.index("a2") < order.index("a3") < order.index("b")
    assert order.index("a1") < order.index("b") < min(order.index("c1"), order.index("c2"))
    assert journal.parents["b"] == [{"from": "a1"}, {"from": "a3"}]


def test_depends_on_an_existing_job_waits_for_it(
    make_client: MakeClient, journal: Journal, conn: Conn, poll: Poll
) -> None:
    journal.gate.clear()
    client = _client(make_client, journal)
    first = client.insert(Step(name="first"))
    then = client.insert(Step(name="then"), drover.InsertOpts(depends_on=[first]))
    assert then.state == drover.JobState.PENDING
    poll(lambda: _states(conn, [first.id]) == ["running"], message="first running")
    assert _states(conn, [then.id]) == ["pending"]
    journal.gate.set()
    assert client.result(then, timeout=10) == {"from": "then"}
    assert journal.order == ["first", "then"]
    # A dependency that already completed counts as done.
    again = client.insert(Step(name="again"), drover.InsertOpts(depends_on=[first.id]))
    assert again.state == drover.JobState.AVAILABLE


def test_a_dependency_on_a_missing_or_failed_job_is_refused_and_writes_nothing(
    make_client: MakeClient, conn: Conn, db_url: str
) -> None:
    client = make_client()
    before = conn.execute("SELECT count(*) FROM drover_jobs").fetchone()
    with pytest.raises(
        drover.InvalidInsertOpts, match="depends on job 424242, which does not exist"
    ):
        client.insert(Step(name="x"), drover.InsertOpts(depends_on=[424242]))
    dead = client.insert(Step(name="dead"))
    conn.execute(
        "UPDATE drover_jobs SET state = 'dead', finalized_at = now() WHERE id = %s", (dead.id,)
    )
    with pytest.raises(drover.InvalidInsertOpts, match=f"job {dead.id}, which ended dead"):
        client.insert(Step(name="x"), drover.InsertOpts(depends_on=[dead]))
    with psycopg.connect(db_url) as tx, pytest.raises(drover.InvalidInsertOpts):
        client.insert_tx(
            tx, drover.chain(Step(name="y"), (Step(name="z"), drover.InsertOpts(depends_on=[dead])))
        )
    after = conn.execute("SELECT count(*) FROM drover_jobs").fetchone()
    assert before is not None and after is not None
    assert after[0] == before[0] + 1  # only the planted dead job
    assert conn.execute("SELECT count(*) FROM drover_job_deps").fetchone() == (0,)


def test_a_dead_dependency_cancels_its_dependents_and_theirs(
    make_client: MakeClient, journal: Journal, conn: Conn
) -> None:
    client = _client(make_client, journal)
    wf = client.insert(
        drover.chain(
            (Step(name="a", fail=True), drover.InsertOpts(max_attempts=1)),
            Step(name="b"),
            Step(name="c"),
        )
    )
    a, b, c = wf.jobs
    with pytest.raises(drover.JobCancelled) as caught:
        client.result(c, timeout=10)
    assert _states(conn, [a.id, b.id, c.id]) == ["dead", "cancelled", "cancelled"]
    assert journal.order == ["a"]
    assert f"dependency {a.id} ended dead" in (client.get_job(b.id).errors[-1]["error"])
    assert f"dependency {b.id} ended cancelled" in (caught.value.error or "")


def test_cancelling_a_pending_job_cancels_its_dependents(
    make_client: MakeClient, conn: Conn, db_url: str
) -> None:
    client = make_client()  # nothing runs: the first step stays available
    wf = client.insert(drover.chain(Step(name="a"), Step(name="b"), Step(name="c")))
    a, b, c = wf.jobs
    inspector = drover.Inspector(db_url)
    try:
        cancelled = inspector.cancel_job(b.id)
    finally:
        inspector.close()
    assert cancelled.state == drover.JobState.CANCELLED
    assert _states(conn, [a.id, b.id, c.id]) == ["available", "cancelled", "cancelled"]


def test_a_workflow_inserted_in_a_transaction_exists_only_if_it_commits(
    make_client: MakeClient, conn: Conn, db_url: str
) -> None:
    client = make_client()
    with psycopg.connect(db_url) as tx:
        wf = client.insert_tx(tx, drover.chain(Step(name="a"), Step(name="b")))
        tx.rollback()
    assert _states(conn, []) == []
    assert conn.execute("SELECT count(*) FROM drover_jobs").fetchone() == (0,)
    with psycopg.connect(db_url) as tx:
        wf = client.insert_tx(tx, drover.group(Step(name="a"), Step(name="b")).then(Step(name="c")))
    assert _states(conn, [r.id for r in wf.jobs]) == ["available", "available", "pending"]


def test_workflow_and_dependency_input_is_validated(make_client: MakeClient) -> None:
    client = make_client()
    with pytest.raises(drover.InvalidArgument, match="a chain needs at least one step"):
        drover.chain()
    with pytest.raises(drover.InvalidArgument, match="a group needs at least one member"):
        drover.group()
    with pytest.raises(drover.InvalidJobArgs, match="a chain step must be a drover.JobArgs"):
        drover.chain(Step(name="a"), "b")  # type: ignore[arg-type]
    with pytest.raises(drover.InvalidInsertOpts, match="has a unique_key"):
        client.insert(drover.chain((Step(name="a"), drover.InsertOpts(unique_key="k"))))
    with pytest.raises(drover.InvalidInsertOpts, match="depends_on must be a list of jobs"):
        drover.InsertOpts(depends_on=7)  # type: ignore[arg-type]
    with pytest.raises(drover.InvalidInsertOpts, match="is not a job id"):
        drover.InsertOpts(depends_on=[0])
    with pytest.raises(drover.InvalidInsertOpts, match="holds drover.JobRow rows or job ids"):
        drover.InsertOpts(depends_on=["3"])  # type: ignore[list-item]
    assert drover.InsertOpts(depends_on=[5, 3, 5]).depends_on == (3, 5)
    with pytest.raises(drover.InvalidArgument, match="insert options of a workflow"):
        client.insert(drover.chain(Step(name="a")), drover.InsertOpts())  # type: ignore[call-overload]


def test_the_inspector_reads_a_workflow_back_from_any_of_its_jobs(
    make_client: MakeClient, journal: Journal, db_url: str
) -> None:
    client = _client(make_client, journal)
    wf = client.insert(drover.group(Step(name="a"), Step(name="b")).then(Step(name="c")))
    client.result(wf.last[0], timeout=10)
    lone = client.insert(Step(name="lone"))
    inspector = drover.Inspector(db_url)
    try:
        read = inspector.workflow(wf.jobs[2].id)
        assert read == inspector.workflow(wf.id)
        assert read.id == wf.id and read.state == "completed"
        a, b, _ = (j.row.id for j in read.jobs)
        assert [j.depends_on for j in read.jobs] == [(), (), (a, b)]
        assert [j.row.args["name"] for j in read.jobs] == ["a", "b", "c"]
        assert [j.result for j in read.jobs] == [{"from": n} for n in "abc"]
        with pytest.raises(drover.NotFound, match="belongs to no workflow"):
            inspector.workflow(lone.id)
        with pytest.raises(drover.NotFound):
            inspector.workflow(987654)
    finally:
        inspector.close()


def test_a_retried_step_waits_again_for_its_dependencies(
    make_client: MakeClient, conn: Conn, db_url: str
) -> None:
    client = make_client()  # nothing runs
    a, b, c = client.insert(drover.chain(Step(name="a"), Step(name="b"), Step(name="c"))).jobs
    inspector = drover.Inspector(db_url)
    try:
        inspector.cancel_job(a.id)  # b and c are cancelled with it
        with pytest.raises(
            drover.InvalidTransition, match=f"waits for job {a.id}, which ended cancelled"
        ):
            inspector.retry_job(b.id)
        assert inspector.retry_jobs([b.id]) == []  # skipped, not an error
        assert _states(conn, [a.id, b.id, c.id]) == ["cancelled"] * 3
        inspector.retry_job(a.id)
        assert inspector.retry_job(b.id).state == drover.JobState.PENDING
        assert inspector.retry_jobs([c.id]) == [c.id]
        assert _states(conn, [a.id, b.id, c.id]) == ["available", "pending", "pending"]
    finally:
        inspector.close()


def test_retried_steps_run_in_order_once_their_dependency_completes(
    make_client: MakeClient, journal: Journal, conn: Conn, db_url: str
) -> None:
    idle = make_client()
    a, b = idle.insert(drover.chain(Step(name="a"), Step(name="b"))).jobs
    inspector = drover.Inspector(db_url)
    try:
        inspector.cancel_job(a.id)
        inspector.retry_job(a.id)
        inspector.retry_job(b.id)
    finally:
        inspector.close()
    client = _client(make_client, journal)
    assert client.result(b, timeout=10) == {"from": "b"}
    assert journal.order == ["a", "b"]
