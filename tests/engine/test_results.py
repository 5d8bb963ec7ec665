"""Job results: stored with the completion, waited for with Client.result (ADR 0028)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pydantic
import pytest
from jobdb import Conn, MakeClient, Poll

import drover

SAFETY = 20.0
"""Longest a blocked handler waits on its own (a failing test never hangs)."""

IDLE_POLL = 60.0
"""A re-read interval no notification test could mistake for a notification."""


class Ask(drover.JobArgs, kind="results_ask"):
    what: str = "dict"
    n: int = 0


class Report(pydantic.BaseModel):
    total: int
    names: list[str]


class Handlers:
    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Event()

    def ask(self, job: drover.Job[Ask]) -> object:
        what = job.args.what
        if what == "block":
            self.started.set()
            self.release.wait(SAFETY)
            return {"n": job.args.n}
        if what == "dict":
            return {"n": job.args.n, "tags": ["a", "b"]}
        if what == "model":
            return Report(total=job.args.n, names=["x"])
        if what == "none":
            return None
        if what == "big":
            return "x" * 2000
        if what == "object":
            return object()
        if what == "nul":
            return "a\x00b"
        if what == "nan":
            return {"v": float("nan")}
        if what == "fail":
            raise RuntimeError("it broke")
        if what == "cancel":
            raise drover.Cancel("not wanted any more")
        raise AssertionError(what)

    def workers(self) -> drover.Workers:
        w = drover.Workers()
        w.register(self.ask)
        return w


@pytest.fixture
def handlers() -> Iterator[Handlers]:
    h = Handlers()
    yield h
    h.release.set()


def _client(make_client: MakeClient, handlers: Handlers, **fields: Any) -> drover.Client:
    fields.setdefault("poll_interval", 0.05)
    client = make_client(workers=handlers.workers(), **fields)
    client.start()
    return client


def _stored(conn: Conn, job_id: int) -> tuple[object, ...] | None:
    return conn.execute(
        "SELECT state::text, result, awaited FROM drover_jobs WHERE id = %s", (job_id,)
    ).fetchone()


def test_a_returned_value_is_stored_and_returned(
    make_client: MakeClient, handlers: Handlers, conn: Conn
) -> None:
    client = _client(make_client, handlers)
    job = client.insert(Ask(what="dict", n=7))
    assert client.result(job, timeout=10) == {"n": 7, "tags": ["a", "b"]}
    assert _stored(conn, job.id)[:2] == ("completed", {"n": 7, "tags": ["a", "b"]})  # type: ignore[index]


def test_a_model_comes_back_as_a_dict_or_as_the_type_asked_for(
    make_client: MakeClient, handlers: Handlers
) -> None:
    client = _client(make_client, handlers)
    job = client.insert(Ask(what="model", n=3))
    assert client.result(job.id, timeout=10) == {"total": 3, "names": ["x"]}
    report = client.result(job, timeout=10, as_type=Report)
    assert report == Report(total=3, names=["x"])
    with pytest.raises(drover.InvalidResult, match=f"job {job.id} does not validate as int"):
        client.result(job, timeout=10, as_type=int)


def test_none_stores_no_result(make_client: MakeClient, handlers: Handlers, conn: Conn) -> None:
    client = _client(make_client, handlers)
    job = client.insert(Ask(what="none"))
    assert client.result(job, timeout=timedelta(seconds=10)) is None
    assert _stored(conn, job.id)[:2] == ("completed", None)  # type: ignore[index]


def test_a_job_already_finished_needs_no_wait_and_is_not_flagged(
    make_client: MakeClient, handlers: Handlers, conn: Conn, poll: Poll
) -> None:
    client = _client(make_client, handlers)
    job = client.insert(Ask(what="dict", n=1))
    poll(lambda: (_stored(conn, job.id) or ("",))[0] == "completed", message="job completed")
    client.stop()
    waiter = make_client()
    assert waiter.result(job, timeout=0) == {"n": 1, "tags": ["a", "b"]}
    assert _stored(conn, job.id) == ("completed", {"n": 1, "tags": ["a", "b"]}, False)


def test_a_dead_job_raises_job_failed_with_its_last_error(
    make_client: MakeClient, handlers: Handlers, conn: Conn
) -> None:
    client = _client(make_client, handlers)
    client._awaiter._poll = IDLE_POLL  # only the notification can end the wait in time
    job = client.insert(Ask(what="fail"), drover.InsertOpts(max_attempts=1))
    with pytest.raises(drover.JobFailed) as caught:
        client.result(job, timeout=15)
    assert not isinstance(caught.value, drover.JobCancelled)
    assert (caught.value.job_id, caught.value.state) == (job.id, "dead")
    assert "it broke" in (caught.value.error or "")
    assert f"job {job.id} ended dead" in str(caught.value)


def test_a_job_its_handler_cancels_raises_job_cancelled(
    make_client: MakeClient, handlers: Handlers
) -> None:
    client = _client(make_client, handlers)
    client._awaiter._poll = IDLE_POLL
    job = client.insert(Ask(what="cancel"))
    with pytest.raises(drover.JobCancelled, match="not wanted any more"):
        client.result(job, timeout=15)


def test_an_operator_cancel_wakes_the_waiter(
    make_client: MakeClient, db_url: str, poll: Poll
) -> None:
    waiter = make_client()  # never started: results work on any client
    waiter._awaiter._poll = IDLE_POLL
    job = waiter.insert(Ask(what="dict"), drover.InsertOpts(queue="nobody_runs_this"))
    outcome: list[BaseException] = []

    def wait() -> None:
        try:
            waiter.result(job, timeout=15)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=wait)
    thread.start()
    inspector = drover.Inspector(db_url)
    try:
        poll(
            lambda: waiter._awaiter.listening.is_set() and waiter._awaiter._waiters,
            message="the waiter never started waiting",
        )
        inspector.cancel_job(job.id)
        thread.join(10)
    finally:
        inspector.close()
    assert not thread.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], drover.JobCancelled)


def test_a_completion_wakes_every_waiter_at_once(
    make_client: MakeClient, handlers: Handlers, poll: Poll
) -> None:
    client = _client(make_client, handlers)
    client._awaiter._poll = IDLE_POLL
    job = client.insert(Ask(what="block", n=5))
    assert handlers.started.wait(10)
    results: list[object] = []
    lock = threading.Lock()

    def wait() -> None:
        value = client.result(job, timeout=15)
        with lock:
            results.append(value)

    threads = [threading.Thread(target=wait) for _ in range(4)]
    for t in threads:
        t.start()
    poll(
        lambda: len(client._awaiter._waiters.get(job.id, [])) == 4,
        message="the waiters never registered",
    )
    began = time.monotonic()
    handlers.release.set()
    for t in threads:
        t.join(15)
    assert results == [{"n": 5}] * 4
    assert time.monotonic() - began < 30  # half the re-read interval (60 s)


def test_a_timeout_raises_and_leaves_the_job_alone(
    make_client: MakeClient, handlers: Handlers, conn: Conn
) -> None:
    client = _client(make_client, handlers)
    job = client.insert(Ask(what="block"))
    assert handlers.started.wait(10)
    with pytest.raises(drover.ResultTimeout) as caught:
        client.result(job, timeout=0.2)
    assert isinstance(caught.value, TimeoutError)
    assert (caught.value.job_id, caught.value.state) == (job.id, "running")
    assert _stored(conn, job.id) == ("running", None, True)
    handlers.release.set()
    assert client.result(job, timeout=10) == {"n": 0}


def test_a_missing_job_and_bad_arguments_are_clear_errors(make_client: MakeClient) -> None:
    client = make_client()
    with pytest.raises(drover.NotFound, match="no job with id 999999"):
        client.result(999999, timeout=1)
    with pytest.raises(drover.InvalidArgument, match="job id must be an int, not str"):
        client.result("7", timeout=1)  # type: ignore[call-overload]
    with pytest.raises(drover.InvalidArgument, match="job id must be between 1 and"):
        client.result(0)
    with pytest.raises(drover.InvalidArgument, match="timeout must not be negative"):
        client.result(1, timeout=-1)
    with pytest.raises(drover.InvalidArgument, match="timeout"):
        client.result(1, timeout="soon")  # type: ignore[call-overload]


@pytest.mark.parametrize(
    ("what", "message"),
    [
        ("big", "is 2002 bytes as JSON, over the limit of 1000"),
        ("object", "cannot be stored as JSON"),
        ("nul", "holds a NUL character"),
        ("nan", "holds NaN or Infinity"),
    ],
)
def test_a_result_that_cannot_be_stored_fails_the_attempt(
    make_client: MakeClient, handlers: Handlers, conn: Conn, what: str, message: str
) -> None:
    client = _client(make_client, handlers, max_result_bytes=1000)
    job = client.insert(Ask(what=what), drover.InsertOpts(max_attempts=1))
    with pytest.raises(drover.JobFailed) as caught:
        client.result(job, timeout=15)
    assert message in (caught.value.error or "")
    assert 'kind "results_ask"' in (caught.value.error or "")
    assert _stored(conn, job.id)[:2] == ("dead", None)  # type: ignore[index]


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "1k", 64 * 1024 * 1024 + 1])
def test_max_result_bytes_is_validated(bad: object) -> None:
    with pytest.raises(drover.ConfigError, match="Config.max_result_bytes"):
        drover.Config(max_result_bytes=bad)  # type: ignore[arg-type]


class Pay(drover.JobArgs, kind="results_pay"):
    amount: int


def test_complete_tx_stores_the_result_it_is_given(
    make_client: MakeClient, db_url: str, conn: Conn
) -> None:
    import psycopg

    def pay(job: drover.Job[Pay]) -> object:
        with psycopg.connect(db_url) as tx:
            job.complete_tx(tx, result={"paid": job.args.amount})
        return {"ignored": True}  # the job is complete already: not stored

    workers = drover.Workers()
    workers.register(pay)
    client = make_client(workers=workers, poll_interval=0.05)
    client.start()
    job = client.insert(Pay(amount=12))
    assert client.result(job, timeout=15) == {"paid": 12}


def test_complete_tx_refuses_a_result_it_cannot_store_before_writing(
    make_client: MakeClient, db_url: str, conn: Conn
) -> None:
    import psycopg

    seen: list[BaseException] = []

    def pay(job: drover.Job[Pay]) -> None:
        with psycopg.connect(db_url) as tx:
            try:
                job.complete_tx(tx, result=object())
            except drover.InvalidResult as exc:
                seen.append(exc)
                raise

    workers = drover.Workers()
    workers.register(pay)
    client = make_client(workers=workers, poll_interval=0.05)
    client.start()
    job = client.insert(Pay(amount=1), drover.InsertOpts(max_attempts=1))
    with pytest.raises(drover.JobFailed):
        client.result(job, timeout=15)
    assert len(seen) == 1
    assert _stored(conn, job.id)[:2] == ("dead", None)  # type: ignore[index]


def test_get_result_reads_what_is_stored_now_without_waiting(
    make_client: MakeClient, handlers: Handlers, db_url: str
) -> None:
    client = _client(make_client, handlers)
    blocked = client.insert(Ask(what="block", n=2))
    assert handlers.started.wait(10)
    inspector = drover.Inspector(db_url)
    try:
        assert inspector.get_result(blocked.id) is None  # running: nothing yet
        handlers.release.set()
        client.result(blocked, timeout=10)
        assert inspector.get_result(blocked.id) == {"n": 2}
        assert client.get_result(blocked.id) == {"n": 2}
        with pytest.raises(drover.NotFound, match="job 999999 does not exist"):
            inspector.get_result(999999)
        with pytest.raises(drover.InvalidArgument, match="job id must be an int"):
            inspector.get_result("1")  # type: ignore[arg-type]
    finally:
        inspector.close()


# --- AsyncClient.result, get_job, get_result --------------------------------------------------


def test_the_async_client_waits_for_results_without_a_thread(
    make_client: MakeClient, handlers: Handlers, conn: Conn, db_url: str
) -> None:
    client = _client(make_client, handlers)

    async def main() -> None:
        async with drover.AsyncClient(db_url) as aclient:
            aclient._awaiter._poll = IDLE_POLL  # only the notification can end the wait in time
            blocked = await aclient.insert(Ask(what="block", n=5))
            others = [await aclient.insert(Ask(what="dict", n=n)) for n in range(20)]
            waiting = asyncio.ensure_future(aclient.result(blocked, timeout=15))
            # Many tasks wait at once on one listening connection.
            results = await asyncio.gather(*(aclient.result(j, timeout=15) for j in others))
            assert results == [{"n": n, "tags": ["a", "b"]} for n in range(20)]
            await asyncio.wait_for(aclient._awaiter.listening.wait(), SAFETY)
            assert not waiting.done()
            handlers.release.set()
            assert await waiting == {"n": 5}
            assert await aclient.result(blocked.id, timeout=15, as_type=dict) == {"n": 5}
            model = await aclient.insert(Ask(what="model", n=2))
            assert await aclient.result(model, timeout=15, as_type=Report) == Report(
                total=2, names=["x"]
            )
            row = await aclient.get_job(blocked.id)
            assert (row.id, row.state) == (blocked.id, drover.JobState.COMPLETED)
            assert await aclient.get_result(blocked.id) == {"n": 5}
        assert aclient._awaiter._task is None  # close ended the listener

    asyncio.run(main())
    assert client.running


def test_the_async_client_raises_what_client_result_raises(
    make_client: MakeClient, handlers: Handlers, conn: Conn, db_url: str
) -> None:
    _client(make_client, handlers)

    async def main() -> None:
        async with drover.AsyncClient(db_url) as aclient:
            dead = await aclient.insert(Ask(what="fail"), max_attempts=1)
            with pytest.raises(drover.JobFailed) as failed:
                await aclient.result(dead, timeout=15)
            assert (failed.value.state, failed.value.error) == ("dead", "RuntimeError: it broke")
            cancelled = await aclient.insert(Ask(what="cancel"))
            with pytest.raises(drover.JobCancelled):
                await aclient.result(cancelled, timeout=15)
            later = await aclient.insert(Ask(what="dict"), delay=3600)
            with pytest.raises(drover.ResultTimeout):
                await aclient.result(later, timeout=0.2)
            with pytest.raises(drover.NotFound):
                await aclient.result(10**12, timeout=1)
            with pytest.raises(drover.NotFound):
                await aclient.get_job(10**12)
            with pytest.raises(drover.NotFound):
                await aclient.get_result(10**12)
            with pytest.raises(drover.InvalidArgument, match="timeout must not be negative"):
                await aclient.result(later, timeout=-1)
            with pytest.raises(drover.InvalidArgument):
                await aclient.get_job(0)
        with pytest.raises(drover.InvalidArgument, match="closed"):
            await aclient.result(later, timeout=1)

    asyncio.run(main())
    # The timed-out job was only flagged as awaited, not changed.
    assert conn.execute(
        "SELECT state::text, awaited FROM drover_jobs WHERE kind = 'results_ask'"
        " AND scheduled_at > now() + interval '1 minute'"
    ).fetchall() == [("scheduled", True)]
