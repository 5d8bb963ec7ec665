"""Wake-ups for the client's own inserts: sent after the commit, by a coalescing thread.

``Client.insert`` and ``Client.insert_many`` commit first and then hand their
queues to the notifier thread (``drover-notifier-<id>``), which sends
``pg_notify('drover', queue)`` at most once per queue per round. The
transactional inserts still notify inside the caller's transaction. Every
test listens on channel ``drover`` with a connection of its own.

"Nothing else arrived" is decided with a sentinel: the test sends its own
notification after the fact and reads up to it. PostgreSQL delivers
notifications in commit order, so anything committed before the sentinel
arrives before it.
"""

from __future__ import annotations

import itertools
import logging
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

import drover
import drover._db.store as store_module
import drover._runtime.notifier as notifier_module

Conn = psycopg.Connection[tuple[Any, ...]]
MakeClient = Callable[..., drover.Client]
Poll = Callable[..., Any]

DEADLINE = 15.0
"""Longest any wait here may take before the test fails (a passing test takes far less,
but a busy machine may take seconds; ``close`` would otherwise wait out a 60 s gap)."""

_tokens = itertools.count()


class Ping(drover.JobArgs, kind="notifier_ping"):
    n: int = 0


@pytest.fixture
def listener(db_url: str) -> Iterator[Conn]:
    """An autocommit connection listening on drover's channel."""
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("LISTEN drover")
        yield c


def notifier_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("drover-notifier-")]


def receive(listener: Conn, until: Callable[[list[str]], bool]) -> list[str]:
    """Payloads in arrival order, read until ``until(payloads)`` holds; fail after DEADLINE."""
    got: list[str] = []
    deadline = time.monotonic() + DEADLINE
    while not until(got):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            pytest.fail(f"notifications so far {got}; the expected ones never arrived")
        got.extend(n.payload for n in listener.notifies(timeout=remaining, stop_after=1))
    return got


def up_to_sentinel(listener: Conn, sender: Conn) -> list[str]:
    """Everything delivered before a notification the test sends now (the sentinel excluded)."""
    token = f"sentinel-{next(_tokens)}"
    sender.execute("SELECT pg_notify('drover', %s)", (token,))
    got = receive(listener, lambda payloads: token in payloads)
    assert got[-1] == token
    return got[:-1]


def _notify_name() -> str:
    # The store runs the notifier's round: Store.notify_now -> this function.
    names = [n for n in vars(store_module) if n.startswith("notify_queues")]
    assert len(names) == 1, f"which notify function does Store.notify_now call? {names}"
    return names[0]


def real_notify() -> Callable[..., None]:
    """The function the notifier thread sends a round with (it runs the pg_notify)."""
    real: Callable[..., None] = getattr(store_module, _notify_name())
    return real


def patch_notify(monkeypatch: pytest.MonkeyPatch, wrapper: Callable[..., None]) -> None:
    """Make the notifier thread send its rounds through ``wrapper``."""
    monkeypatch.setattr(store_module, _notify_name(), wrapper)


def job_visible(c: Conn, job_id: int) -> bool:
    row = c.execute("SELECT count(*) FROM drover_jobs WHERE id = %s", (job_id,)).fetchone()
    return row == (1,)


# --- the common case ----------------------------------------------------------------------------


def test_insert_notifies_its_queue_after_the_job_is_visible(
    make_client: MakeClient, listener: Conn, conn: Conn
) -> None:
    client = make_client()
    assert notifier_threads() == [], "the notifier thread starts with the first insert"
    job = client.insert(Ping(), drover.InsertOpts(queue="q1"))

    received = receive(listener, lambda payloads: len(payloads) >= 1)
    # Checked the moment it arrived, on the listening connection itself.
    assert job_visible(listener, job.id)
    assert received == ["q1"]
    assert notifier_threads() == [f"drover-notifier-{client._id}"]
    client.close()
    assert notifier_threads() == []
    assert up_to_sentinel(listener, conn) == []


@pytest.mark.parametrize("unique", [False, True], ids=["direct_copy", "staged"])
def test_insert_many_notifies_each_queue_of_the_batch_once(
    make_client: MakeClient, listener: Conn, conn: Conn, unique: bool
) -> None:
    client = make_client()
    items: list[drover.InsertItem] = [
        (Ping(n=i), drover.InsertOpts(queue="abc"[i % 3])) for i in range(12)
    ]
    if unique:
        items.append((Ping(n=99), drover.InsertOpts(queue="c", unique_key="u")))
    rows = client.insert_many(items)
    received = receive(listener, lambda payloads: {"a", "b", "c"} <= set(payloads))
    assert all(job_visible(listener, r.id) for r in rows)
    client.close()
    received += up_to_sentinel(listener, conn)
    assert sorted(received) == ["a", "b", "c"]


def test_a_duplicate_insert_sends_no_wake_up(
    make_client: MakeClient, listener: Conn, conn: Conn
) -> None:
    client = make_client()
    client.insert(Ping(), drover.InsertOpts(queue="dup", unique_key="k"))
    assert receive(listener, lambda payloads: len(payloads) >= 1) == ["dup"]
    with pytest.raises(drover.DuplicateJob):
        client.insert(Ping(), drover.InsertOpts(queue="dup", unique_key="k"))
    with pytest.raises(drover.DuplicateJob):
        client.insert_many([(Ping(), drover.InsertOpts(queue="dup", unique_key="k"))])
    with pytest.raises(drover.InvalidJobArgs):
        client.insert_many([(Ping(), drover.InsertOpts(queue="bad")), "not args"])  # type: ignore[list-item]
    client.close()  # sends whatever is still pending
    assert up_to_sentinel(listener, conn) == []


# --- the guarantee under concurrency, and coalescing --------------------------------------------


def test_concurrent_inserts_are_each_followed_by_a_wake_up_and_coalesced(
    make_client: MakeClient,
    listener: Conn,
    conn: Conn,
    poll: Poll,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    round_starts: list[float] = []

    real = real_notify()

    def timed(c: Conn, names: list[str], **kw: Any) -> None:
        round_starts.append(time.monotonic())  # only the notifier thread calls this
        real(c, names, **kw)

    patch_notify(monkeypatch, timed)
    client = make_client()
    threads, per_thread = 8, 50
    queues = ("q1", "q2")
    arrivals: list[tuple[str, float]] = []
    arrivals_lock = threading.Lock()
    done_listening = threading.Event()
    listen_errors: list[BaseException] = []
    end_token = "sentinel-end"

    def listen() -> None:
        try:
            deadline = time.monotonic() + 4 * DEADLINE
            while time.monotonic() < deadline:
                for n in listener.notifies(timeout=0.05):
                    if n.payload == end_token:
                        return
                    with arrivals_lock:
                        arrivals.append((n.payload, time.monotonic()))
        except BaseException as exc:  # pragma: no cover - reported below
            listen_errors.append(exc)
        finally:
            done_listening.set()

    returned: list[tuple[str, int, float]] = []
    insert_errors: list[BaseException] = []
    returned_lock = threading.Lock()
    barrier = threading.Barrier(threads)

    def produce(t: int) -> None:
        try:
            barrier.wait(timeout=DEADLINE)
            for i in range(per_thread):
                queue = queues[(t + i) % 2]
                job = client.insert(Ping(n=i), drover.InsertOpts(queue=queue))
                at = time.monotonic()
                with returned_lock:
                    returned.append((queue, job.id, at))
        except BaseException as exc:  # pragma: no cover - reported below
            insert_errors.append(exc)

    listening = threading.Thread(target=listen, name="test-listener")
    listening.start()
    producers = [threading.Thread(target=produce, args=(t,)) for t in range(threads)]
    for p in producers:
        p.start()
    for p in producers:
        p.join(timeout=4 * DEADLINE)
    assert insert_errors == []
    assert len(returned) == threads * per_thread

    def every_insert_followed() -> bool:
        with arrivals_lock:
            seen = list(arrivals)
        return all(any(q == queue and t >= at for q, t in seen) for queue, _, at in returned)

    # The guarantee, without close() flushing anything: each insert is
    # followed by a wake-up for its queue that arrived after it returned.
    poll(every_insert_followed, DEADLINE, message="a wake-up after every insert")
    # Rounds at least the 2 ms gap apart (a little slack for the clock), while running.
    starts = list(round_starts)
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert len(starts) >= 2
    assert min(gaps) >= 0.0015, gaps

    client.close()
    conn.execute("SELECT pg_notify('drover', %s)", (end_token,))
    assert done_listening.wait(DEADLINE)
    listening.join(DEADLINE)
    assert listen_errors == []
    payloads = [q for q, _ in arrivals]
    assert set(payloads) == set(queues)
    assert all(payloads.count(q) >= 1 for q in queues)
    # Coalesced: far fewer wake-ups than inserts.
    assert len(payloads) < len(returned), f"{len(payloads)} notifications for {len(returned)}"
    row = conn.execute("SELECT count(*) FROM drover_jobs").fetchone()
    assert row == (len(returned),)


def test_a_queue_named_during_a_round_gets_the_next_round(
    make_client: MakeClient, listener: Conn, conn: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    in_flight = threading.Event()
    release = threading.Event()
    rounds: list[list[str]] = []

    real = real_notify()

    def held_first(c: Conn, names: list[str], **kw: Any) -> None:
        rounds.append(list(names))
        if len(rounds) == 1:
            in_flight.set()
            assert release.wait(DEADLINE)
        real(c, names, **kw)

    patch_notify(monkeypatch, held_first)
    client = make_client()
    client.insert(Ping(), drover.InsertOpts(queue="q"))
    assert in_flight.wait(DEADLINE)
    # Named while the round that already took "q" is still being sent: that
    # round started before this commit, so it cannot count as this job's wake-up.
    late = client.insert(Ping(), drover.InsertOpts(queue="q"))
    client.insert(Ping(), drover.InsertOpts(queue="r"))
    release.set()
    received = receive(listener, lambda payloads: payloads.count("q") >= 2 and "r" in payloads)
    assert job_visible(listener, late.id)
    assert rounds == [["q"], ["q", "r"]]
    client.close()
    assert sorted(received + up_to_sentinel(listener, conn)) == ["q", "q", "r"]


def test_rounds_are_spaced_by_the_gap(
    make_client: MakeClient, listener: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    gap = 0.3
    monkeypatch.setattr(notifier_module, "_GAP", gap)
    starts: list[float] = []

    real = real_notify()

    def timed(c: Conn, names: list[str], **kw: Any) -> None:
        starts.append(time.monotonic())
        real(c, names, **kw)

    patch_notify(monkeypatch, timed)
    client = make_client()
    client.insert(Ping(), drover.InsertOpts(queue="g1"))
    assert receive(listener, lambda payloads: len(payloads) >= 1) == ["g1"]
    # The first round is over; this one waits out the gap.
    client.insert(Ping(), drover.InsertOpts(queue="g2"))
    client.insert(Ping(), drover.InsertOpts(queue="g3"))
    assert sorted(receive(listener, lambda payloads: len(payloads) >= 2)) == ["g2", "g3"]
    assert len(starts) == 2
    assert starts[1] - starts[0] >= gap * 0.95


# --- notify=False -------------------------------------------------------------------------------


def test_without_notify_nothing_is_sent_and_no_thread_starts(
    make_client: MakeClient, listener: Conn, conn: Conn, db_url: str
) -> None:
    client = make_client(drover.Config(notify=False))
    client.insert(Ping(), drover.InsertOpts(queue="silent"))
    client.insert(Ping(), drover.InsertOpts(queue="silent", unique_key="k"))
    client.insert_many([(Ping(n=i), drover.InsertOpts(queue=f"s{i}")) for i in range(3)])
    with psycopg.connect(db_url) as tx:
        client.insert_tx(tx, Ping(), drover.InsertOpts(queue="silent_tx"))
        client.insert_many_tx(tx, [(Ping(), drover.InsertOpts(queue="silent_tx"))])
        tx.commit()
    assert notifier_threads() == []
    assert list(listener.notifies(timeout=0.5)) == []
    assert notifier_threads() == []
    # The listener does hear what is sent on the channel.
    assert up_to_sentinel(listener, conn) == []
    row = conn.execute("SELECT count(*) FROM drover_jobs").fetchone()
    assert row == (7,)


# --- close --------------------------------------------------------------------------------------


def test_close_sends_what_is_pending_and_joins_the_thread(
    make_client: MakeClient, listener: Conn, conn: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rounds an eternity apart: the second queue can only go out because close() flushes it.
    monkeypatch.setattr(notifier_module, "_GAP", 60.0)
    client = make_client()
    client.insert(Ping(), drover.InsertOpts(queue="first"))
    assert receive(listener, lambda payloads: len(payloads) >= 1) == ["first"]
    client.insert(Ping(), drover.InsertOpts(queue="second"))
    client.insert(Ping(), drover.InsertOpts(queue="third"))
    started = time.monotonic()
    client.close()
    assert time.monotonic() - started < DEADLINE
    assert notifier_threads() == []
    assert sorted(up_to_sentinel(listener, conn)) == ["second", "third"]


def test_close_without_any_insert_starts_no_thread(make_client: MakeClient) -> None:
    client = make_client()
    client.close()
    assert notifier_threads() == []


def test_an_insert_after_close_on_a_borrowed_pool_notifies_inline(
    db_url: str, listener: Conn, conn: Conn
) -> None:
    with ConnectionPool(db_url, min_size=1, max_size=2) as pool:
        client = drover.Client(pool)
        client.insert(Ping(), drover.InsertOpts(queue="before"))
        client.close()
        assert notifier_threads() == []
        job = client.insert(Ping(), drover.InsertOpts(queue="after"))
        client.insert_many([(Ping(), drover.InsertOpts(queue="after_many"))])
        # Sent by the inserting thread before insert returned, so before the sentinel.
        assert notifier_threads() == []
        assert up_to_sentinel(listener, conn) == ["before", "after", "after_many"]
        assert job_visible(conn, job.id)


# A producer process as the latency report had it: its application's pool (psycopg's default,
# not autocommit), one insert, and the script ends, with neither close() nor pool.close(). The
# round for that insert is held until the notifier is told to stop, so the process always ends
# before the round unless something stops the notifier at exit (before the fix the round was
# cut off after its BEGIN, and the job waited out the workers' poll interval).
EXITING_PRODUCER = textwrap.dedent(
    """
    import sys

    from psycopg_pool import ConnectionPool

    import drover
    import drover._db.store as store_module

    class Ping(drover.JobArgs, kind="notifier_ping"):
        n: int = 0

    url, name = sys.argv[1], sys.argv[2]
    real = getattr(store_module, name)
    pool = ConnectionPool(url, min_size=1, max_size=2, open=True)
    client = drover.Client(pool)
    stopping = client._notifier._stopping

    def held(conn, queues, **kw):
        stopping.wait()
        real(conn, queues, **kw)

    setattr(store_module, name, held)
    print(client.insert(Ping(), drover.InsertOpts(queue="at_exit")).id, flush=True)
    """
)


def test_a_process_that_ends_without_close_still_sends_its_last_wake_up(
    db_url: str, listener: Conn, conn: Conn
) -> None:
    child = subprocess.run(
        [sys.executable, "-c", EXITING_PRODUCER, db_url, _notify_name()],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert child.returncode == 0, child.stderr
    assert job_visible(conn, int(child.stdout))
    # The process has ended: whatever it notified arrived before this sentinel.
    assert up_to_sentinel(listener, conn) == ["at_exit"]
    assert "did not stop" not in child.stderr


# --- transactional inserts notify inside the caller's transaction -------------------------------


def _insert_tx(client: drover.Client, tx: Conn) -> None:
    client.insert_tx(tx, Ping(), drover.InsertOpts(queue="tx"))


def _insert_many_tx(client: drover.Client, tx: Conn) -> None:
    client.insert_many_tx(tx, [(Ping(n=i), drover.InsertOpts(queue="tx")) for i in range(3)])


def _insert_many_tx_unique(client: drover.Client, tx: Conn) -> None:
    client.insert_many_tx(
        tx, [(Ping(), drover.InsertOpts(queue="tx", unique_key=f"u{next(_tokens)}"))]
    )


TX_INSERTS: dict[str, Callable[[drover.Client, Conn], None]] = {
    "insert_tx": _insert_tx,
    "insert_many_tx": _insert_many_tx,
    "insert_many_tx_unique": _insert_many_tx_unique,
}


@pytest.mark.parametrize("how", list(TX_INSERTS))
def test_a_transactional_insert_notifies_only_when_the_caller_commits(
    make_client: MakeClient, listener: Conn, conn: Conn, db_url: str, how: str
) -> None:
    client = make_client()
    with psycopg.connect(db_url) as tx:
        TX_INSERTS[how](client, tx)
        assert up_to_sentinel(listener, conn) == [], "delivered before the commit"
        tx.commit()
        assert up_to_sentinel(listener, conn) == ["tx"]

        TX_INSERTS[how](client, tx)
        tx.rollback()
        assert up_to_sentinel(listener, conn) == [], "delivered for a rolled-back insert"
    # Nothing of this went through the client's own notifier.
    assert notifier_threads() == []


# --- a failing round ----------------------------------------------------------------------------


def test_a_failed_round_is_logged_and_the_next_one_is_sent(
    make_client: MakeClient,
    listener: Conn,
    conn: Conn,
    poll: Poll,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    failed = threading.Event()

    real = real_notify()

    def fails_once(c: Conn, queues: list[str], **kw: Any) -> None:
        if not failed.is_set():
            failed.set()
            # A real failure on the real database: the round's connection is gone.
            c.close()
        real(c, queues, **kw)

    patch_notify(monkeypatch, fails_once)
    caplog.set_level(logging.ERROR, logger="drover")
    client = make_client()

    first = client.insert(Ping(), drover.InsertOpts(queue="lost"))
    assert failed.wait(DEADLINE)

    def failure_logged() -> list[logging.LogRecord]:
        return [
            r
            for r in caplog.records
            if r.levelno == logging.ERROR and "notify listeners of insert" in r.getMessage()
        ]

    (record,) = poll(failure_logged, DEADLINE, message="the failed round logged at ERROR")
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], drover.DatabaseError)
    assert getattr(record, "queues", None) == ["lost"]
    # The insert itself stood; the thread lives on.
    assert client.get_job(first.id).id == first.id
    assert job_visible(conn, first.id)
    assert notifier_threads() == [f"drover-notifier-{client._id}"]

    second = client.insert(Ping(), drover.InsertOpts(queue="next"))
    received = receive(listener, lambda payloads: "next" in payloads)
    assert received == ["next"], "the failed round's queue is dropped, the next round sent"
    assert job_visible(listener, second.id)
    assert len(failure_logged()) == 1


def test_a_round_that_raises_drover_error_keeps_the_thread(
    make_client: MakeClient,
    listener: Conn,
    poll: Poll,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[list[str]] = []

    real = real_notify()

    def fails_once(c: Conn, queues: list[str], **kw: Any) -> None:
        calls.append(list(queues))
        if len(calls) == 1:
            raise drover.DatabaseError("notify listeners: injected failure")
        real(c, queues, **kw)

    patch_notify(monkeypatch, fails_once)
    caplog.set_level(logging.ERROR, logger="drover")
    client = make_client()
    client.insert(Ping(), drover.InsertOpts(queue="one"))
    poll(
        lambda: any("notify listeners of insert" in r.getMessage() for r in caplog.records),
        DEADLINE,
        message="the failed round logged",
    )
    assert all(r.levelno == logging.ERROR for r in caplog.records)
    client.insert(Ping(), drover.InsertOpts(queue="two"))
    assert receive(listener, lambda payloads: "two" in payloads) == ["two"]
    assert calls == [["one"], ["two"]]
    assert notifier_threads() == [f"drover-notifier-{client._id}"]
