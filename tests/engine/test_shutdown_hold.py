"""``drover worker``'s hold on the jobs its stop hands back (ADR 0053), with a real client.

The CLI ends its process once the hand-back is written; until then the old
handler thread can still run. The hold locks the handed-back rows ``FOR KEY
SHARE`` on a session of its own just before the write: the write goes
through, and every other worker's claim (``FOR UPDATE SKIP LOCKED``) skips
the rows until the session ends. The claims here are the kernel's own
statement, run as another worker runs it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from jobdb import Conn, MakeClient, Poll

import drover
from drover._db.store import Store

SAFETY = 30.0


class Blocked(drover.JobArgs, kind="hold_blocked"):
    pass


@pytest.fixture
def rival(db_url: str) -> Iterator[Store]:
    """Another worker's store on the test's database."""
    store = Store.open(db_url, who="the rival worker", max_size=2)
    yield store
    store.close()


def _rival_claims(store: Store) -> list[tuple[int, int]]:
    session = store.kernel.claim_session()
    try:
        claimed = session.claim("default", 10, 60.0, "rival")
    finally:
        session.release()
    return [(row.id, row.attempt) for row in claimed.rows]


def test_handed_back_jobs_stay_unclaimable_until_the_hold_s_session_ends(
    make_client: MakeClient, conn: Conn, poll: Poll, rival: Store
) -> None:
    inside = threading.Event()
    release = threading.Event()
    workers = drover.Workers()

    @workers.register(args=Blocked)
    def blocked(job: drover.Job[Blocked]) -> None:
        inside.set()
        release.wait(SAFETY)  # deaf to job.context, as a blocking call is

    # A server that ends idle transactions after 50 ms (for every new session).
    conn.execute(
        "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET idle_in_transaction_session_timeout"
        " = ''50ms''', current_database()); END $$"
    )
    client = make_client(drover.Config(workers=workers, poll_interval=0.05, concurrency=1))
    hold = client._hold_hand_backs()
    client.start()
    try:
        job = client.insert(Blocked())
        assert inside.wait(SAFETY)
        hold.open()
        assert hold.ready(SAFETY)
        with pytest.raises(drover.DrainIncomplete):
            client.stop(0.1)
        assert hold.held == [job.id]
        # The hand-back was written: due now, its attempt counted...
        row = conn.execute(
            "SELECT state::text, attempt, scheduled_at <= now() FROM drover_jobs WHERE id = %s",
            (job.id,),
        ).fetchone()
        assert row == ("retryable", 1, True)
        # ...yet no other worker can claim it while the hold's session lives.
        assert _rival_claims(rival) == []
        # Which a server's idle_in_transaction_session_timeout does not end.
        held = hold._conn
        assert held is not None
        shown = held.execute("SHOW idle_in_transaction_session_timeout").fetchone()
        assert shown == ("0",)
        hold.close()
        # The server releases the lock once the session's backend has ended,
        # a moment after the connection closed.
        claimed = poll(lambda: _rival_claims(rival), timeout=SAFETY, message="claimable")
        assert claimed == [(job.id, 2)]
    finally:
        hold.close()
        release.set()


def test_without_a_hold_the_handed_back_job_is_claimable_at_once(
    make_client: MakeClient, rival: Store
) -> None:
    """A library's ``Client.stop``: the hand-back is claimable from its commit, while the
    abandoned handler may still run (docs/workers.md, Shutdown)."""
    inside = threading.Event()
    release = threading.Event()
    workers = drover.Workers()

    @workers.register(args=Blocked)
    def blocked(job: drover.Job[Blocked]) -> None:
        inside.set()
        release.wait(SAFETY)

    client = make_client(drover.Config(workers=workers, poll_interval=0.05, concurrency=1))
    client.start()
    try:
        job = client.insert(Blocked())
        assert inside.wait(SAFETY)
        with pytest.raises(drover.DrainIncomplete):
            client.stop(0.1)
        assert _rival_claims(rival) == [(job.id, 2)]
    finally:
        release.set()


def test_a_hold_that_cannot_lock_logs_and_lets_the_hand_back_through(
    make_client: MakeClient, conn: Conn, rival: Store, caplog: pytest.LogCaptureFixture
) -> None:
    inside = threading.Event()
    release = threading.Event()
    workers = drover.Workers()

    @workers.register(args=Blocked)
    def blocked(job: drover.Job[Blocked]) -> None:
        inside.set()
        release.wait(SAFETY)

    client = make_client(drover.Config(workers=workers, poll_interval=0.05, concurrency=1))
    hold = client._hold_hand_backs()
    client.start()
    try:
        job = client.insert(Blocked())
        assert inside.wait(SAFETY)
        hold.open()
        assert hold.ready(SAFETY)
        # The session dies under the hold (an idle-in-transaction timeout, a restart).
        conn.execute(
            # With a timeout: returns once the backend has ended (PostgreSQL 14+).
            "SELECT pg_terminate_backend(pid, 30000) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = 'drover-shutdown'"
        )
        with pytest.raises(drover.DrainIncomplete):
            client.stop(0.1)
        assert hold.held == []
        assert f"could not keep jobs {job.id} from other workers" in caplog.text
        assert _rival_claims(rival) == [(job.id, 2)]
    finally:
        hold.close()
        release.set()
