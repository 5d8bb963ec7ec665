"""The insert funnel (ADR 0047): every entry point goes through the insert middleware.

A recording insert middleware (an object with ``around_insert``) in
``Config.middleware`` sees the batch of every insert call before the
write and its rows after; it can change the jobs (tags, metadata, queue,
priority), and what it leaves is what is stored. Without middleware and
without options an insert sends exactly the statements it sent before the
funnel. The periodic tick, Django and SQLAlchemy doors are tested beside
their own tests (tests/engine/test_periodic.py, tests/contrib/).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import psycopg
import pytest
from jobdb import Conn
from psycopg_pool import ConnectionPool

import drover
from drover._db.queries import query

T = TypeVar("T")


class Mail(drover.JobArgs, kind="funnel_mail"):
    to: str = "a@example.com"


class Other(drover.JobArgs, kind="funnel_other", queue="other"):
    n: int = 0


def run(factory: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await factory()

    return asyncio.run(main())


class Recorder:
    """An insert middleware that writes down what it saw: the batch before, the rows after."""

    def __init__(self, name: str = "rec", log: list[str] | None = None) -> None:
        self.name = name
        self.log = log if log is not None else []
        self.seen: list[tuple[str, list[drover.InsertParams], list[drover.JobRow]]] = []
        self.errors: list[BaseException] = []

    @contextlib.contextmanager
    def around_insert(self, batch: drover.InsertBatch) -> Iterator[None]:
        before = list(batch)
        assert batch.rows == ()
        self.log.append(f"{self.name} enter")
        try:
            yield
        except BaseException as exc:
            self.errors.append(exc)
            self.log.append(f"{self.name} error")
            raise
        self.log.append(f"{self.name} exit")
        self.seen.append((batch.operation, before, list(batch.rows)))

    def operations(self) -> list[str]:
        return [operation for operation, _, _ in self.seen]


@contextlib.contextmanager
def inserting(source: Any, config: drover.Config | None = None) -> Iterator[drover.Client]:
    """A client that only inserts (never started), closed at the end."""
    client = drover.Client(source, config)
    try:
        yield client
    finally:
        client.close()


def stored(conn: Conn, job_id: int) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT queue, priority, tags, meta FROM drover_jobs WHERE id = %s", (job_id,)
    ).fetchone()
    assert row is not None
    return tuple(row)


# --- every door ----------------------------------------------------------------------------------


def test_every_client_insert_goes_through_the_middleware(db_url: str, conn: Conn) -> None:
    recorder = Recorder()
    with inserting(db_url, drover.Config(middleware=[recorder])) as client:
        row = client.insert(Mail(to="one"))
        with psycopg.connect(db_url) as tx_conn:
            in_tx = client.insert_tx(tx_conn, Mail(to="tx"))
            many_tx = client.insert_many_tx(tx_conn, [Mail(to="mtx1"), Mail(to="mtx2")])
        many = client.insert_many([Mail(to="m1"), Other(n=2)])
        flow = client.insert(drover.chain(Mail(to="w1"), Mail(to="w2")))
        waiting = client.insert(Mail(to="dep"), drover.InsertOpts(depends_on=[row]))
        unique = client.insert(Mail(to="u"), drover.InsertOpts(unique=drover.Unique()))
        again = client.insert(Mail(to="u"), drover.InsertOpts(unique=drover.Unique()))
    assert recorder.operations() == [
        "insert",
        "insert_tx",
        "insert_many_tx",
        "insert_many",
        "insert",
        "insert",
        "insert",
        "insert",
    ]
    rows = [seen[2] for seen in recorder.seen]
    assert rows == [
        [row],
        [in_tx],
        many_tx,
        many,
        list(flow.jobs),
        [waiting],
        [unique],
        [again],
    ]
    assert again.duplicate and again.id == unique.id
    assert [p.args_json for p in recorder.seen[3][1]] == ['{"to":"m1"}', '{"n":2}']
    assert [p.kind for p in recorder.seen[4][1]] == ["funnel_mail", "funnel_mail"]
    assert waiting.state is drover.JobState.PENDING


def test_every_async_client_insert_goes_through_the_middleware(db_url: str, conn: Conn) -> None:
    recorder = Recorder()

    async def go() -> list[drover.JobRow]:
        async with drover.AsyncClient(db_url, drover.Config(middleware=[recorder])) as client:
            one = await client.insert(Mail(to="a1"))
            many = await client.insert_many([Mail(to="a2"), Mail(to="a3")])
            async with await psycopg.AsyncConnection.connect(db_url) as tx_conn:
                in_tx = await client.insert_tx(tx_conn, Mail(to="a4"))
                many_tx = await client.insert_many_tx(tx_conn, [Mail(to="a5")])
            return [one, *many, in_tx, *many_tx]

    rows = run(go)
    assert recorder.operations() == ["insert", "insert_many", "insert_tx", "insert_many_tx"]
    assert [r for _, _, seen in recorder.seen for r in seen] == rows
    found = conn.execute("SELECT count(*) FROM drover_jobs").fetchone()
    assert found is not None and found[0] == 5


def test_inspector_enqueue_goes_through_its_middleware(db_url: str, conn: Conn) -> None:
    recorder = Recorder()
    with drover.Inspector(db_url, middleware=[recorder]) as inspector:
        row = inspector.enqueue("raw_kind", '{"x": 1}', drover.InsertOpts(queue="ops"))
    assert recorder.operations() == ["enqueue"]
    (_, params, rows) = recorder.seen[0]
    assert [(p.kind, p.queue, p.args_json) for p in params] == [("raw_kind", "ops", '{"x":1}')]
    assert rows == [row]


def test_an_inspector_refuses_a_middleware_list_it_cannot_use(db_url: str) -> None:
    with pytest.raises(drover.InvalidArgument, match="around_insert"):
        drover.Inspector(db_url, middleware=[42])  # type: ignore[list-item]
    with pytest.raises(drover.InvalidArgument, match="list of middleware"):
        drover.Inspector(db_url, middleware="rec")  # type: ignore[arg-type]


def test_config_takes_an_insert_only_middleware_and_refuses_other_objects(db_url: str) -> None:
    config = drover.Config(middleware=[Recorder()])
    assert len(config.middleware) == 1
    with pytest.raises(drover.ConfigError, match="around_insert"):
        drover.Config(middleware=[object()])  # type: ignore[list-item]


# --- what a middleware may change ----------------------------------------------------------------


class Stamper:
    """Adds a tag and metadata to every job and moves one job to another queue."""

    @contextlib.contextmanager
    def around_insert(self, batch: drover.InsertBatch) -> Iterator[None]:
        batch.add_meta({"tenant": "t1"})
        batch.add_tags("stamped")
        if len(batch):
            batch.replace(0, queue="moved", priority=7)
        yield


def test_a_middleware_changes_what_every_route_stores(db_url: str, conn: Conn) -> None:
    with inserting(db_url, drover.Config(middleware=[Stamper()])) as client:
        single = client.insert(Mail(), drover.InsertOpts(meta={"own": 1}, tags=["mine"]))
        many = client.insert_many([Mail(to="b1"), Mail(to="b2")])
        flow = client.insert(drover.group(Mail(to="g1"), Mail(to="g2")))
        unique = client.insert(Mail(to="uq"), drover.InsertOpts(unique=drover.Unique()))
        with psycopg.connect(db_url) as tx_conn:
            in_tx = client.insert_tx(tx_conn, Mail(to="t"))
    for row in (single, many[0], flow.jobs[0], unique, in_tx):
        assert row.queue == "moved" and row.priority == 7, row
        assert "stamped" in row.tags and row.meta["tenant"] == "t1", row
        assert stored(conn, row.id) == (row.queue, row.priority, list(row.tags), dict(row.meta))
    for row in (many[1], flow.jobs[1]):
        assert row.queue == "default" and row.tags == ("stamped",)
        assert stored(conn, row.id) == ("default", 0, ["stamped"], {"tenant": "t1"})
    assert single.tags == ("mine", "stamped")
    assert dict(single.meta) == {"tenant": "t1", "own": 1}


class MetaOnly:
    def __init__(self, meta: dict[str, Any], *, replace: bool = False) -> None:
        self.meta = meta
        self.replace = replace

    @contextlib.contextmanager
    def around_insert(self, batch: drover.InsertBatch) -> Iterator[None]:
        batch.add_meta(self.meta, replace=self.replace)
        yield


def test_added_metadata_keeps_the_direct_copy_and_the_jobs_own_keys_win(
    db_url: str, conn: Conn
) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    config = drover.Config(middleware=[MetaOnly({"a": 1, "own": "mw"})])
    with inserting(db_url, config) as client, psycopg.connect(db_url) as app:
        uniform = client.insert_many_tx(app, [Mail(to=f"u{i}") for i in range(3)])
        timed = client.insert_many_tx(
            app, [Mail(), (Other(), drover.InsertOpts(scheduled_at=later))]
        )
        # The staging COPY creates a temporary table in the session it runs
        # on; the direct COPY creates none.
        staged = app.execute("SELECT to_regclass('pg_temp.drover_insert_batch')").fetchone()
        own = client.insert_many_tx(app, [(Mail(), drover.InsertOpts(meta={"own": "job"}))])
        app.commit()
        own_many = client.insert_many([(Mail(), drover.InsertOpts(meta={"own": "job"}))])
    assert staged == (None,), "a batch with added metadata left the direct COPY"
    for row in (*uniform, *timed):
        assert dict(row.meta) == {"a": 1, "own": "mw"}
        assert stored(conn, row.id)[3] == {"a": 1, "own": "mw"}
    assert timed[1].state is drover.JobState.SCHEDULED
    for row in (*own, *own_many):
        assert dict(row.meta) == {"a": 1, "own": "job"} == stored(conn, row.id)[3]
    replacing = drover.Config(middleware=[MetaOnly({"own": "mw"}, replace=True)])
    with inserting(db_url, replacing) as client:
        (row,) = client.insert_many([(Mail(), drover.InsertOpts(meta={"own": "job"}))])
        one = client.insert(Mail(), drover.InsertOpts(meta={"own": "job"}))
    assert dict(row.meta) == {"own": "mw"} == stored(conn, row.id)[3]
    assert dict(one.meta) == {"own": "mw"} == stored(conn, one.id)[3]


class Refusing:
    @contextlib.contextmanager
    def around_insert(self, batch: drover.InsertBatch) -> Iterator[None]:
        if any(p.queue == "forbidden" for p in batch):
            raise drover.InvalidArgument("queue forbidden is closed")
        yield


def test_a_middleware_that_raises_before_the_write_writes_nothing(db_url: str, conn: Conn) -> None:
    outer = Recorder("outer")
    with inserting(db_url, drover.Config(middleware=[outer, Refusing()])) as client:
        with pytest.raises(drover.InvalidArgument, match="forbidden"):
            client.insert_many([Mail(), (Mail(), drover.InsertOpts(queue="forbidden"))])
        with pytest.raises(drover.InvalidArgument, match="forbidden"):
            client.insert(Mail(), drover.InsertOpts(queue="forbidden"))
    found = conn.execute("SELECT count(*) FROM drover_jobs").fetchone()
    assert found == (0,), "a refused batch wrote some of its jobs"
    assert [type(e) for e in outer.errors] == [drover.InvalidArgument] * 2


def test_bad_changes_are_refused_naming_the_field(db_url: str, conn: Conn) -> None:
    class Bad:
        def __init__(self, change: Callable[[drover.InsertBatch], None]) -> None:
            self.change = change

        @contextlib.contextmanager
        def around_insert(self, batch: drover.InsertBatch) -> Iterator[None]:
            self.change(batch)
            yield

    cases: list[tuple[Callable[[drover.InsertBatch], None], type[Exception], str]] = [
        (lambda b: b.replace(0, kind="other"), drover.InvalidArgument, "not kind"),
        (lambda b: b.replace(0, priority=500), drover.InvalidInsertOpts, "priority"),
        (lambda b: b.replace(0, queue=None), drover.InvalidInsertOpts, "queue cannot be None"),
        (lambda b: b.replace(3, priority=1), drover.InvalidArgument, "no job at index 3"),
        (lambda b: b.add_tags("a,b"), drover.InvalidInsertOpts, "comma"),
        (lambda b: b.add_meta({"x": {1, 2}}), drover.InvalidInsertOpts, "not JSON"),
    ]
    for change, error, match in cases:
        with (
            inserting(db_url, drover.Config(middleware=[Bad(change)])) as client,
            pytest.raises(error, match=match),
        ):
            client.insert(Mail())
    found = conn.execute("SELECT count(*) FROM drover_jobs").fetchone()
    assert found == (0,)


def test_an_around_insert_that_returns_no_context_manager_is_named(db_url: str, conn: Conn) -> None:
    class Broken:
        def around_insert(self, batch: drover.InsertBatch) -> None:
            return None

        def __repr__(self) -> str:
            return "Broken()"

    outer = Recorder()
    config = drover.Config(middleware=[outer, Broken()])  # type: ignore[list-item]
    with inserting(db_url, config) as client, pytest.raises(drover.ConfigError, match="Broken"):
        client.insert(Mail())
    assert isinstance(outer.errors[0], drover.ConfigError)
    assert conn.execute("SELECT count(*) FROM drover_jobs").fetchone() == (0,)


def test_the_write_error_reaches_each_middleware_and_cannot_be_swallowed(
    db_url: str, conn: Conn
) -> None:
    log: list[str] = []

    class Swallower:
        def around_insert(self, batch: drover.InsertBatch) -> contextlib.suppress:
            return contextlib.suppress(drover.DuplicateJob)

    outer, inner = Recorder("outer", log), Recorder("inner", log)
    config = drover.Config(middleware=[outer, Swallower(), inner])
    with inserting(db_url, config) as client:
        client.insert(Mail(), drover.InsertOpts(unique_key="k"))
        log.clear()
        with pytest.raises(drover.DuplicateJob):
            client.insert(Mail(), drover.InsertOpts(unique_key="k"))
    assert log == ["outer enter", "inner enter", "inner error", "outer error"]
    assert isinstance(inner.errors[0], drover.DuplicateJob)
    assert outer.errors[0] is inner.errors[0]


def test_middleware_nest_outermost_first(db_url: str) -> None:
    log: list[str] = []
    config = drover.Config(middleware=[Recorder("a", log), Recorder("b", log)])

    async def go() -> None:
        async with drover.AsyncClient(db_url, config) as client:
            await client.insert(Mail())

    with inserting(db_url, config) as client:
        client.insert(Mail())
    assert log == ["a enter", "b enter", "b exit", "a exit"]
    log.clear()
    run(go)
    assert log == ["a enter", "b enter", "b exit", "a exit"]


# --- a feature nobody uses costs nothing ---------------------------------------------------


class Recording(psycopg.Cursor[Any]):
    """A cursor that writes down every statement it sends (COPY included)."""

    sent: list[str] = []  # noqa: RUF012 - one list for the test, cleared by it

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        Recording.sent.append(str(query))
        return super().execute(query, params, **kwargs)

    def copy(self, statement: Any, params: Any = None, **kwargs: Any) -> Any:
        Recording.sent.append(str(statement))
        return super().copy(statement, params, **kwargs)


class Passive:
    @contextlib.contextmanager
    def around_insert(self, batch: drover.InsertBatch) -> Iterator[None]:
        yield


@pytest.mark.parametrize("middleware", [[], [Passive()]], ids=["none", "passive"])
def test_without_options_an_insert_sends_the_statements_it_always_sent(
    db_url: str, middleware: list[Passive]
) -> None:
    kwargs = {"autocommit": True, "cursor_factory": Recording}
    with (
        ConnectionPool(db_url, min_size=1, max_size=2, kwargs=kwargs) as pool,
        inserting(pool, drover.Config(middleware=middleware, notify=False)) as client,
    ):
        Recording.sent.clear()
        client.insert(Mail())
        assert Recording.sent == [query("job_insert_now")]
        Recording.sent.clear()
        client.insert_many([Mail(to=str(i)) for i in range(5)])
        # The batch's BEGIN goes on the cursor, pipelined with the reserving
        # statement (issue 41), where conn.transaction() sent it unrecorded.
        direct = ["BEGIN", query("job_insert_batch_reserve"), query("job_insert_batch_direct")]
        assert Recording.sent == direct
        Recording.sent.clear()
        client.insert(Mail(), drover.InsertOpts(unique=drover.Unique()))
        assert Recording.sent == [query("job_insert_identified_now")]
        with pool.connection() as conn, conn.transaction():
            Recording.sent.clear()
            client.insert_tx(conn, Mail())
            assert Recording.sent == [query("job_insert_now")]


# --- AsyncClient: workflows and dependencies --------------------------------------------------


def test_async_client_inserts_workflows_and_dependents(db_url: str, conn: Conn) -> None:
    async def go() -> tuple[
        drover.JobRow, drover.InsertedWorkflow, drover.JobRow, list[drover.JobRow]
    ]:
        async with drover.AsyncClient(db_url) as client:
            first = await client.insert(Mail(to="first"))
            flow = await client.insert(
                drover.chain(Mail(to="c1"), drover.group(Mail(to="g1"), Other(n=1)), Mail(to="c3"))
            )
            waiting = await client.insert(Mail(to="w"), drover.InsertOpts(depends_on=[first]))
            batch = await client.insert_many(
                [Mail(to="b1"), (Mail(to="b2"), drover.InsertOpts(depends_on=[first.id]))]
            )
            return first, flow, waiting, batch

    first, flow, waiting, batch = run(go)
    assert [r.state for r in flow.jobs] == [
        drover.JobState.AVAILABLE,
        drover.JobState.PENDING,
        drover.JobState.PENDING,
        drover.JobState.PENDING,
    ]
    assert flow.id == flow.jobs[0].id and [r.id for r in flow.last] == [flow.jobs[3].id]
    assert waiting.state is drover.JobState.PENDING
    assert [r.state for r in batch] == [drover.JobState.AVAILABLE, drover.JobState.PENDING]
    edges = conn.execute(
        "SELECT job_id, depends_on FROM drover_job_deps ORDER BY job_id, depends_on"
    ).fetchall()
    c1, g1, g2, c3 = (r.id for r in flow.jobs)
    first_id = first.id
    assert edges == [
        (g1, c1),
        (g2, c1),
        (c3, g1),
        (c3, g2),
        (waiting.id, first_id),
        (batch[1].id, first_id),
    ]
    with drover.Inspector(db_url) as inspector:
        workflow = inspector.workflow(flow.id)
    assert [j.row.id for j in workflow.jobs] == [c1, g1, g2, c3]


def test_async_workflows_and_dependents_commit_with_the_callers_transaction(
    db_url: str, conn: Conn
) -> None:
    class Rollback(Exception):
        pass

    async def go() -> tuple[drover.InsertedWorkflow, drover.JobRow]:
        async with drover.AsyncClient(db_url) as client:
            with contextlib.suppress(Rollback):
                async with (
                    await psycopg.AsyncConnection.connect(db_url) as tx_conn,
                    tx_conn.transaction(),
                ):
                    await client.insert_tx(tx_conn, drover.chain(Mail(), Mail()))
                    raise Rollback
            base = await client.insert(Mail(to="base"))
            async with await psycopg.AsyncConnection.connect(db_url) as tx_conn:
                flow = await client.insert_tx(tx_conn, drover.chain(Mail(to="x"), Other(n=3)))
                (waiting,) = await client.insert_many_tx(
                    tx_conn, [(Mail(to="y"), drover.InsertOpts(depends_on=[base]))]
                )
                unseen = await asyncio.to_thread(
                    lambda: conn.execute("SELECT count(*) FROM drover_jobs").fetchone()
                )
                assert unseen == (1,), "the caller's transaction leaked before its commit"
            return flow, waiting

    flow, waiting = run(go)
    found = conn.execute(
        "SELECT id, state::text, workflow_id FROM drover_jobs ORDER BY id"
    ).fetchall()
    assert [(i, s) for i, s, _ in found][1:] == [
        (flow.jobs[0].id, "available"),
        (flow.jobs[1].id, "pending"),
        (waiting.id, "pending"),
    ]
    assert found[1][2] == found[2][2] == flow.id


def test_async_dependencies_are_checked_before_anything_is_written(db_url: str, conn: Conn) -> None:
    async def go() -> None:
        async with drover.AsyncClient(db_url) as client:
            with pytest.raises(drover.InvalidInsertOpts, match="does not exist"):
                await client.insert(Mail(), drover.InsertOpts(depends_on=[999_999]))
            with pytest.raises(drover.InvalidInsertOpts, match="unique"):
                await client.insert_many(
                    [
                        (Mail(), drover.InsertOpts(unique=drover.Unique())),
                        (Mail(), drover.InsertOpts(depends_on=[1])),
                    ]
                )

    run(go)
    found = conn.execute("SELECT count(*) FROM drover_jobs").fetchone()
    assert found == (0,)
