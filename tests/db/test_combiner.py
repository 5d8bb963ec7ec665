"""Combined single-row inserts: ``Client.insert`` under concurrency, and ``job_insert_rows``.

``Client.insert`` goes through ``drover._inserter.Combiner``: a call that finds
fewer than ``max_in_flight`` (2) groups in flight leads at once, taking along
whoever is queued; any other call waits at a gate until a leader serves it or
hands it the next group. A group of one runs the single-row statement; a
bigger one runs ``job_insert_rows``, one statement in one transaction.

To make a group on purpose, a second connection holds ``drover_jobs`` in
SHARE mode (which blocks INSERT): the first two callers lead and block in the
database, the next ones queue at the gate, and releasing the lock lets the
first leader to finish hand the whole queue over as one group.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from jobdb import RICH as EXACT
from jobdb import assert_stored, count_jobs, db_now, typed

import drover
from drover._db import insert as store
from drover._insert.encode import encode_insert

Conn = psycopg.Connection[tuple[Any, ...]]
Poll = Callable[..., Any]

JOIN_TIMEOUT = 5.0
WAIT = 5.0

# Values jsonb keeps exactly, plus 1e23, which jsonb reads back as an integer.
RICH: dict[str, Any] = {**EXACT, "huge": 1e23}


class Plain(drover.JobArgs, kind="combiner_plain"):
    n: int


class Other(drover.JobArgs, kind="combiner_other", queue="other_q", max_attempts=4):
    n: int


class Rich(drover.JobArgs, kind="combiner_rich"):
    payload: dict[str, Any]


class Boom(drover.JobArgs, kind="boom"):
    n: int


def table_ids(conn: Conn) -> list[int]:
    return [r[0] for r in conn.execute("SELECT id FROM drover_jobs ORDER BY id").fetchall()]


def blocked_inserts(conn: Conn) -> int:
    """Sessions of this database waiting for a lock on drover_jobs."""
    row = conn.execute(
        """
        SELECT count(*)
        FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND l.relation = 'drover_jobs'::regclass
          AND NOT l.granted
          AND a.wait_event_type = 'Lock'
        """
    ).fetchone()
    assert row is not None
    return int(row[0])


class Caller(threading.Thread):
    """Runs one callable on its own thread and keeps its result or its exception."""

    def __init__(self, fn: Callable[[], Any], name: str) -> None:
        super().__init__(name=name, daemon=True)
        self._fn = fn
        self.result: Any = None
        self.error: BaseException | None = None
        self.finished = threading.Event()

    def run(self) -> None:
        try:
            self.result = self._fn()
        except BaseException as exc:
            self.error = exc
        finally:
            self.finished.set()

    def row(self) -> drover.JobRow:
        assert self.error is None, f"{self.name} raised {self.error!r}"
        assert isinstance(self.result, drover.JobRow), self.result
        return self.result


class Forcer:
    """Holds drover_jobs in SHARE mode and starts callers so that they form a known group."""

    def __init__(self, db_url: str, conn: Conn, client: drover.Client, poll: Poll) -> None:
        self._lock_conn: Conn = psycopg.connect(db_url, autocommit=True)
        self._conn = conn
        self._client = client
        self._poll = poll
        self._locked = False
        self._names = itertools.count()
        self.threads: list[Caller] = []

    @property
    def combiner(self) -> Any:
        return self._client._combiner

    def hold(self) -> None:
        assert not self._locked
        self._lock_conn.execute("BEGIN")
        self._lock_conn.execute("LOCK TABLE drover_jobs IN SHARE MODE")
        self._locked = True

    def release(self) -> None:
        if self._locked:
            self._locked = False
            self._lock_conn.execute("ROLLBACK")

    def start(self, fn: Callable[[], Any]) -> Caller:
        caller = Caller(fn, f"test-caller-{next(self._names)}")
        self.threads.append(caller)
        caller.start()
        return caller

    def run(self, fn: Callable[[], Any]) -> Any:
        """Call ``fn`` on a thread of its own; its result, or its exception raised here.

        For an insert made alone: if the combiner leaked its leadership the
        call would wait at the gate forever, and this fails instead of hanging.
        """
        caller = self.start(fn)
        if not caller.finished.wait(WAIT):
            pytest.fail(f"{caller.name} did not return within {WAIT}s")
        if caller.error is not None:
            raise caller.error
        return caller.result

    def _waiting(self, callers: list[Caller], condition: Callable[[], bool], what: str) -> None:
        def met() -> bool:
            for caller in callers:
                if caller.finished.is_set():
                    pytest.fail(f"{caller.name} returned early ({what}): {caller.error!r}")
            return condition()

        self._poll(met, WAIT, message=what)

    def leaders(self, *fns: Callable[[], Any]) -> list[Caller]:
        """Start one caller per fn; return once each leads and is blocked in the database."""
        assert self._locked
        assert len(fns) == self.combiner._max_in_flight
        callers = [self.start(fn) for fn in fns]
        self._waiting(
            callers,
            lambda: blocked_inserts(self._conn) == len(fns),
            f"{len(fns)} leaders blocked on the table lock",
        )
        assert self.combiner._in_flight == len(fns)
        assert self.combiner._queue == []
        return callers

    def enqueue(self, *fns: Callable[[], Any]) -> list[Caller]:
        """Start callers one at a time, each waiting until it has joined the queue."""
        assert self._locked
        callers: list[Caller] = []
        for fn in fns:
            callers.append(self.start(fn))
            size = len(callers)
            self._waiting(
                callers,
                lambda size=size: len(self.combiner._queue) == size,  # type: ignore[misc]
                f"{size} callers queued",
            )
        return callers

    def finish(self) -> None:
        """Release the lock, join every caller, and fail if any is still running."""
        self.release()
        deadline = time.monotonic() + JOIN_TIMEOUT
        for caller in self.threads:
            caller.join(max(0.0, deadline - time.monotonic()))
        alive = [c.name for c in self.threads if c.is_alive()]
        assert not alive, f"callers still running: {alive}"

    def close(self) -> None:
        try:
            self.release()
        finally:
            deadline = time.monotonic() + JOIN_TIMEOUT
            for caller in self.threads:
                caller.join(max(0.0, deadline - time.monotonic()))
            self._lock_conn.close()


@pytest.fixture
def forcer(db_url: str, conn: Conn, client: drover.Client, poll: Poll) -> Iterator[Forcer]:
    f = Forcer(db_url, conn, client, poll)
    try:
        yield f
    finally:
        f.close()


def inserting(
    client: drover.Client, args: drover.JobArgs, opts: drover.InsertOpts | None = None
) -> Callable[[], drover.JobRow]:
    return lambda: client.insert(args, opts)


# --- a forced group -----------------------------------------------------------------------------


def test_queued_callers_are_inserted_as_one_group(
    client: drover.Client, conn: Conn, forcer: Forcer
) -> None:
    combiner = client._combiner
    assert combiner.groups == 0
    future = datetime.now(UTC) + timedelta(hours=1)
    forcer.hold()
    leaders = forcer.leaders(inserting(client, Plain(n=0)), inserting(client, Plain(n=1)))
    plan: list[tuple[drover.JobArgs, drover.InsertOpts | None]] = [
        (Plain(n=10), None),
        (Other(n=11), None),
        (Rich(payload=RICH), drover.InsertOpts(queue="rich_q")),
        (Plain(n=13), drover.InsertOpts(scheduled_at=future, max_attempts=2)),
        (Plain(n=14), drover.InsertOpts(unique_key="k14")),
        (Other(n=15), drover.InsertOpts(scheduled_at=datetime(2000, 1, 1, tzinfo=UTC))),
    ]
    queued = forcer.enqueue(*(inserting(client, a, o) for a, o in plan))
    # Everyone is still waiting: nothing committed while the table is locked.
    assert not any(c.finished.is_set() for c in leaders + queued)
    assert count_jobs(conn) == 0
    forcer.finish()

    leader_rows = [c.row() for c in leaders]
    rows = [c.row() for c in queued]
    assert combiner.groups == 1
    # One transaction for the whole group, begun after both leaders' transactions.
    assert len({r.created_at for r in rows}) == 1
    assert rows[0].created_at > max(r.created_at for r in leader_rows)
    ids = [r.id for r in leader_rows + rows]
    assert len(set(ids)) == len(ids)
    # Ids are drawn in the order the callers arrived.
    assert [r.id for r in rows] == sorted(r.id for r in rows)
    for (args, _opts), row in zip(plan, rows, strict=True):
        assert row.kind == args.kind
        if not isinstance(args, Rich):
            assert typed(row.args) == typed(args.model_dump(mode="json"))
    assert [r.queue for r in rows] == [
        "default",
        "other_q",
        "rich_q",
        "default",
        "default",
        "other_q",
    ]
    assert [r.max_attempts for r in rows] == [25, 4, 25, 2, 25, 4]
    assert rows[4].unique_key == "k14"
    assert rows[3].state is drover.JobState.SCHEDULED and rows[3].scheduled_at == future
    for i in (0, 1, 2, 4, 5):
        assert rows[i].state is drover.JobState.AVAILABLE
        assert rows[i].scheduled_at == rows[i].created_at
    assert rows[2].args["payload"]["huge"] == 10**23
    assert_stored(client, leader_rows + rows)
    assert sorted(ids) == table_ids(conn)
    assert combiner._in_flight == 0
    assert combiner._queue == []


def test_equal_unique_keys_in_one_group_let_only_the_first_in(
    client: drover.Client, conn: Conn, forcer: Forcer
) -> None:
    combiner = client._combiner
    existing = forcer.run(inserting(client, Plain(n=-1), drover.InsertOpts(unique_key="taken")))
    forcer.hold()
    leaders = forcer.leaders(inserting(client, Plain(n=0)), inserting(client, Plain(n=1)))
    same = drover.InsertOpts(unique_key="same")
    plan: list[tuple[drover.JobArgs, drover.InsertOpts | None]] = [
        (Plain(n=10), same),  # wins: the earliest of the equal keys
        (Plain(n=11), drover.InsertOpts(unique_key="k11")),
        (Plain(n=12), same),
        (Plain(n=13), drover.InsertOpts(unique_key="same", queue="elsewhere")),  # other queue
        (Other(n=14), drover.InsertOpts(unique_key="same", queue="default")),  # other kind
        (Plain(n=15), same),
        (Plain(n=16), drover.InsertOpts(unique_key="taken")),  # held by an existing job
        (Plain(n=17), None),
    ]
    queued = forcer.enqueue(*(inserting(client, a, o) for a, o in plan))
    forcer.finish()

    assert combiner.groups == 1
    losers = {2: "same", 5: "same", 6: "taken"}
    winners: list[drover.JobRow] = []
    for i, caller in enumerate(queued):
        if i in losers:
            assert caller.result is None
            error = caller.error
            assert isinstance(error, drover.DuplicateJob), (i, error)
            assert (error.queue, error.kind, error.unique_key) == (
                "default",
                "combiner_plain",
                losers[i],
            )
            assert repr(losers[i]) in str(error)
        else:
            row = caller.row()
            assert row.args == {"n": 10 + i}
            winners.append(row)
    assert [r.unique_key for r in winners] == ["same", "k11", "same", "same", None]
    assert len({r.created_at for r in winners}) == 1
    successful = [existing, *(c.row() for c in leaders), *winners]
    assert_stored(client, successful)
    assert table_ids(conn) == sorted(r.id for r in successful)
    assert combiner._in_flight == 0
    assert combiner._queue == []


# --- a database failure -------------------------------------------------------------------------


@pytest.fixture
def boom_trigger(conn: Conn) -> None:
    conn.execute(
        """
        CREATE FUNCTION refuse_boom() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.kind = 'boom' THEN
                RAISE EXCEPTION 'boom refused: job %', NEW.args;
            END IF;
            RETURN NEW;
        END $$
        """
    )
    conn.execute(
        "CREATE TRIGGER refuse_boom BEFORE INSERT ON drover_jobs "
        "FOR EACH ROW EXECUTE FUNCTION refuse_boom()"
    )


@pytest.mark.usefixtures("boom_trigger")
@pytest.mark.parametrize("position", [0, 2], ids=["boom_leads_the_group", "boom_waits"])
def test_a_database_failure_fails_its_whole_group_and_only_it(
    client: drover.Client, conn: Conn, forcer: Forcer, position: int
) -> None:
    combiner = client._combiner
    with pytest.raises(drover.DatabaseError, match="boom refused"):
        forcer.run(inserting(client, Boom(n=-1)))  # the trigger works on the single-row path too
    forcer.hold()
    leaders = forcer.leaders(inserting(client, Plain(n=0)), inserting(client, Plain(n=1)))
    fns = [
        inserting(client, Plain(n=10 + i), drover.InsertOpts(unique_key=f"g{i}")) for i in range(4)
    ]
    fns[position] = inserting(client, Boom(n=99))
    queued = forcer.enqueue(*fns)
    forcer.finish()

    leader_rows = [c.row() for c in leaders]
    errors = [c.error for c in queued]
    assert all(c.result is None for c in queued)
    for error in errors:
        assert isinstance(error, drover.DatabaseError), errors
        assert "boom refused" in str(error)
        assert isinstance(error.__cause__, psycopg.errors.RaiseException)
    # Each caller raises its own exception object.
    assert len({id(e) for e in errors}) == len(errors)
    assert combiner.groups == 0
    assert combiner._in_flight == 0
    assert combiner._queue == []
    # Only the leaders' jobs went in; nothing of the failed group did.
    assert table_ids(conn) == sorted(r.id for r in leader_rows)

    # A later lone insert works, and so does a later group: the failed group's
    # keys are free, except g1, which the lone insert has taken meanwhile.
    later = forcer.run(inserting(client, Plain(n=50), drover.InsertOpts(unique_key="g1")))
    forcer.hold()
    second_leaders = forcer.leaders(inserting(client, Plain(n=2)), inserting(client, Plain(n=3)))
    regroup = forcer.enqueue(
        *(
            inserting(client, Plain(n=60 + i), drover.InsertOpts(unique_key=f"g{i}"))
            for i in range(4)
        )
    )
    forcer.finish()
    assert isinstance(regroup[1].error, drover.DuplicateJob)
    rows = [c.row() for i, c in enumerate(regroup) if i != 1]
    assert [r.unique_key for r in rows] == ["g0", "g2", "g3"]
    assert len({r.created_at for r in rows}) == 1
    assert combiner.groups == 1
    assert combiner._in_flight == 0
    assert combiner._queue == []
    successful = [later, *leader_rows, *(c.row() for c in second_leaders), *rows]
    assert_stored(client, successful)
    assert table_ids(conn) == sorted(r.id for r in successful)


# --- no concurrency -----------------------------------------------------------------------------


def test_lone_inserts_take_the_single_row_path(
    client: drover.Client, conn: Conn, forcer: Forcer
) -> None:
    combiner = client._combiner
    future = datetime.now(UTC) + timedelta(hours=1)
    plan: list[tuple[drover.JobArgs, drover.InsertOpts | None]] = [
        (Plain(n=0), None),
        (Other(n=1), drover.InsertOpts(scheduled_at=future)),
        (Plain(n=2), drover.InsertOpts(unique_key="lone")),
        (Rich(payload=RICH), drover.InsertOpts(queue="rich_q")),
    ]
    rows: list[drover.JobRow] = []
    for args, opts in plan:
        rows.append(forcer.run(inserting(client, args, opts)))
        assert combiner._in_flight == 0
    with pytest.raises(drover.DuplicateJob, match="'lone'"):
        forcer.run(inserting(client, Plain(n=3), drover.InsertOpts(unique_key="lone")))
    assert combiner.groups == 0
    assert combiner._in_flight == 0
    assert combiner._queue == []
    # Separate statements, separate transactions.
    assert len({r.created_at for r in rows}) == len(rows)
    assert rows[1].state is drover.JobState.SCHEDULED
    assert_stored(client, rows)
    assert table_ids(conn) == [r.id for r in rows]


# --- heavy concurrency --------------------------------------------------------------------------

THREADS = 16
PER_THREAD = 40


def _plan(t: int, i: int, future: datetime) -> tuple[drover.JobArgs, drover.InsertOpts | None]:
    n = t * PER_THREAD + i
    match n % 5:
        case 0:
            return Plain(n=n), None
        case 1:
            return Other(n=n), drover.InsertOpts(scheduled_at=future + timedelta(seconds=n))
        case 2:
            return Plain(n=n), drover.InsertOpts(unique_key=f"u{n}", queue=f"q{t % 3}")
        case 3:
            return Other(n=n), drover.InsertOpts(
                unique_key=f"u{n}", scheduled_at=datetime(2001, 1, 1, tzinfo=UTC), max_attempts=3
            )
        case _:
            return Rich(payload={"n": n, "text": "ünï ✓", "tenth": 0.1}), drover.InsertOpts(
                queue=f"q{t % 3}"
            )


def test_many_threads_inserting_at_once(
    client: drover.Client, conn: Conn, forcer: Forcer, poll: Poll
) -> None:
    combiner = client._combiner
    future = datetime.now(UTC) + timedelta(hours=1)

    def work(t: int) -> list[drover.JobRow]:
        out = []
        for i in range(PER_THREAD):
            args, opts = _plan(t, i, future)
            out.append(client.insert(args, opts))
        return out

    # Start every thread while the table is locked, so the first round is
    # certainly combined; after that the threads race freely.
    forcer.hold()
    workers = [forcer.start(lambda t=t: work(t)) for t in range(THREADS)]  # type: ignore[misc]

    def all_waiting() -> bool:
        for w in workers:
            if w.finished.is_set():
                pytest.fail(f"{w.name} finished early: {w.error!r}")
        return combiner._in_flight == 2 and len(combiner._queue) == THREADS - 2

    poll(all_waiting, WAIT, message="every thread inside insert")
    forcer.finish()

    assert [w.error for w in workers] == [None] * THREADS
    rows = [row for w in workers for row in w.result]
    total = THREADS * PER_THREAD
    assert len(rows) == total
    assert len({r.id for r in rows}) == total
    assert combiner.groups >= 1
    assert combiner._in_flight == 0
    assert combiner._queue == []
    expected: dict[str, int] = {}
    for t, w in enumerate(workers):
        for i, row in enumerate(w.result):
            n = t * PER_THREAD + i
            params = encode_insert(*_plan(t, i, future))
            assert (row.kind, row.queue, row.max_attempts, row.unique_key) == (
                params.kind,
                params.queue,
                params.max_attempts,
                params.unique_key,
            )
            assert n == (row.args["payload"] if params.kind == "combiner_rich" else row.args)["n"]
            expected[row.queue] = expected.get(row.queue, 0) + 1
            if n % 5 == 1:
                assert row.state is drover.JobState.SCHEDULED
                assert row.scheduled_at == future + timedelta(seconds=n)
            else:
                assert row.state is drover.JobState.AVAILABLE
                assert row.scheduled_at == row.created_at
    assert_stored(client, rows)
    assert count_jobs(conn) == total
    counts: dict[str, int] = dict(
        conn.execute("SELECT queue, count(*) FROM drover_jobs GROUP BY queue").fetchall()
    )
    assert counts == expected
    assert set(counts) == {"default", "other_q", "q0", "q1", "q2"}


# --- job_insert_rows itself ---------------------------------------------------------------------


def test_job_insert_rows_directly(client: drover.Client, conn: Conn) -> None:
    taken = store.job_insert(
        conn, encode_insert(Plain(n=-1), drover.InsertOpts(unique_key="taken")), notify=False
    )
    done = store.job_insert(
        conn, encode_insert(Plain(n=-2), drover.InsertOpts(unique_key="done")), notify=False
    )
    conn.execute(
        "UPDATE drover_jobs SET state = 'completed', finalized_at = now() WHERE id = %s",
        (done.id,),
    )
    now = db_now(conn)
    future = now + timedelta(days=1, microseconds=7)
    past = now - timedelta(microseconds=1)
    plan: list[tuple[drover.JobArgs, drover.InsertOpts | None]] = [
        (Rich(payload=RICH), None),
        (Other(n=1), drover.InsertOpts(scheduled_at=future, queue="a")),
        (Plain(n=2), drover.InsertOpts(unique_key="taken")),  # loses to an existing job
        (Plain(n=3), drover.InsertOpts(unique_key="fresh", scheduled_at=past)),
        (Plain(n=4), drover.InsertOpts(unique_key="fresh")),  # loses to position 3
        (Plain(n=5), drover.InsertOpts(unique_key="done")),  # the holder is finished
        (Plain(n=6), drover.InsertOpts(unique_key="fresh", queue="b")),
        (Other(n=7), drover.InsertOpts(max_attempts=7)),
        (Plain(n=8), drover.InsertOpts(unique_key="later", scheduled_at=future)),
    ]
    batch = [encode_insert(a, o) for a, o in plan]
    rows = store.job_insert_rows(conn, batch)

    assert len(rows) == len(batch)
    assert [i for i, r in enumerate(rows) if r is None] == [2, 4]
    inserted = [r for r in rows if r is not None]
    created = inserted[0].created_at
    assert all(r.created_at == created for r in inserted)
    assert now <= created
    for params, row in zip(batch, rows, strict=True):
        if row is None:
            continue
        assert (row.kind, row.queue, row.max_attempts, row.unique_key) == (
            params.kind,
            params.queue,
            params.max_attempts,
            params.unique_key,
        )
        assert (row.attempt, row.errors, row.leased_until, row.finalized_at) == (0, (), None, None)
        if params.scheduled_at is not None and params.scheduled_at > created:
            assert row.state is drover.JobState.SCHEDULED
            assert row.scheduled_at == params.scheduled_at
        else:
            assert row.state is drover.JobState.AVAILABLE
            assert row.scheduled_at == created
    # Input order: each position holds its own job.
    assert [None if r is None else r.args.get("n") for r in rows] == [
        None,
        1,
        None,
        3,
        None,
        5,
        6,
        7,
        8,
    ]
    assert [None if r is None else r.state.value for r in rows] == [
        "available",
        "scheduled",
        None,
        "available",
        None,
        "available",
        "available",
        "available",
        "scheduled",
    ]
    rich = rows[0]
    assert rich is not None
    payload = rich.args["payload"]
    assert typed(payload["huge"]) == ("int", 10**23)
    assert typed(payload["tenth"]) == ("float", 0.1)
    assert typed(payload["sum"]) == ("float", 0.1 + 0.2)
    assert payload["text"] == RICH["text"]
    assert payload["nested"] == RICH["nested"]
    ids = [r.id for r in inserted]
    assert ids == sorted(ids)
    assert_stored(client, inserted)
    assert table_ids(conn) == sorted([taken.id, done.id, *ids])


def test_job_insert_rows_failure_writes_nothing(
    client: drover.Client, conn: Conn, boom_trigger: None
) -> None:
    batch = [encode_insert(Plain(n=1), None), encode_insert(Boom(n=2), None)]
    with pytest.raises(drover.DatabaseError, match="boom refused"):
        store.job_insert_rows(conn, batch)
    assert count_jobs(conn) == 0
    # The autocommit connection is usable again and the good row alone goes in.
    (row,) = store.job_insert_rows(conn, batch[:1])
    assert row is not None
    assert_stored(client, [row])


# --- an interrupted waiter ----------------------------------------------------------------------


def test_a_waiter_interrupted_while_queued_withdraws_and_nothing_hangs(
    client: drover.Client, conn: Conn, forcer: Forcer, poll: Poll
) -> None:
    """Ctrl-C while waiting at the gate: the caller leaves, its job is not inserted.

    The waiting caller is the main thread (only it receives KeyboardInterrupt);
    a real SIGINT interrupts its blocked lock acquire.
    """
    import os
    import signal

    forcer.hold()
    leaders = forcer.leaders(inserting(client, Plain(n=0)), inserting(client, Plain(n=1)))
    (queued,) = forcer.enqueue(inserting(client, Plain(n=2)))
    combiner = client._combiner
    interrupted = threading.Event()

    def interrupt_when_queued() -> None:
        poll(lambda: len(combiner._queue) == 2, WAIT, message="main thread queued")
        os.kill(os.getpid(), signal.SIGINT)
        if not interrupted.wait(WAIT):
            # The signal did not get through: unblock the main thread so the
            # test fails on its assertions instead of hanging the suite.
            forcer.release()

    # A shell that starts a process in the background makes it ignore SIGINT,
    # and then Python installs no handler: install the default one here.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    interrupter = threading.Thread(target=interrupt_when_queued, daemon=True)
    interrupter.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            client.insert(Plain(n=99))
        interrupted.set()
    finally:
        interrupted.set()
        signal.signal(signal.SIGINT, previous)
        interrupter.join(JOIN_TIMEOUT)
    # Withdrawn: the queue holds only the other waiter.
    assert len(combiner._queue) == 1
    forcer.finish()
    rows = [c.row() for c in (*leaders, queued)]
    assert sorted(r.args["n"] for r in rows) == [0, 1, 2]
    assert count_jobs(conn) == 3
    assert combiner._in_flight == 0
    assert combiner._queue == []
