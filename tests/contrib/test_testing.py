"""drover.testing on a real database: Jobs, inline(), and the pytest plugin in a user's suite."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import drover
from drover.testing import Jobs, Worked, inline

Conn = psycopg.Connection[tuple[Any, ...]]
MakeClient = Callable[..., drover.Client]

pytest_plugins = ["pytester"]


class Welcome(drover.JobArgs, kind="testing_welcome"):
    to: str
    template: str = "welcome"


class Fragile(drover.JobArgs, kind="testing_fragile"):
    fail: bool = False


def _workers(seen: list[str]) -> drover.Workers:
    workers = drover.Workers()

    @workers.register(args=Welcome)
    def welcome(job: drover.Job[Welcome]) -> None:
        seen.append(job.args.to)

    @workers.register(args=Fragile)
    def fragile(job: drover.Job[Fragile]) -> None:
        if job.args.fail:
            raise ValueError("fragile broke")

    return workers


def test_assert_enqueued_matches_kind_queue_and_args(make_client: MakeClient) -> None:
    client = make_client()
    client.insert(Welcome(to="old@example.com"))  # before the helper: not its business
    jobs = Jobs(client)
    client.insert(Welcome(to="ada@example.com"), drover.InsertOpts(queue="mail"))
    (row,) = jobs.assert_enqueued(kind="testing_welcome", args={"to": "ada@example.com"})
    assert row.queue == "mail"
    jobs.assert_enqueued(args=Welcome(to="ada@example.com"), queue="mail", count=1)
    jobs.assert_not_enqueued(args={"to": "old@example.com"})
    with pytest.raises(AssertionError, match=r"found 0; this test inserted: testing_welcome"):
        jobs.assert_enqueued(kind="testing_welcome", queue="default")
    with pytest.raises(AssertionError, match=r"expected no job matching kind='testing_welcome'"):
        jobs.assert_not_enqueued(kind="testing_welcome")
    with pytest.raises(AssertionError, match="found 1"):
        jobs.assert_enqueued(kind="testing_welcome", count=2)


def test_drain_works_the_tests_jobs_in_this_thread_through_the_workers(
    make_client: MakeClient, conn: Conn
) -> None:
    seen: list[str] = []
    client = make_client(workers=_workers(seen))
    stranger = client.insert(Welcome(to="someone-elses-test@example.com"))
    with inline(client) as jobs:
        client.insert(Welcome(to="a@example.com"))
        client.insert(Fragile(fail=True), drover.InsertOpts(max_attempts=1))
        client.insert(Fragile(fail=True))
        worked = jobs.drain()
    assert seen == ["a@example.com"]
    states = sorted((w.job.kind, w.state.value) for w in worked)
    assert states == [
        ("testing_fragile", "dead"),
        ("testing_fragile", "retryable"),
        ("testing_welcome", "completed"),
    ]
    dead = next(w for w in worked if w.state is drover.JobState.DEAD)
    assert isinstance(dead, Worked) and dead.error == "ValueError: fragile broke"
    # The database says the same; another test's job was left alone.
    assert {r.state for r in jobs.enqueued(kind="testing_welcome")} == {drover.JobState.COMPLETED}
    assert client.get_job(stranger.id).state is drover.JobState.AVAILABLE
    assert jobs.drain() == []  # the retry is due later


def test_drain_runs_jobs_in_the_claims_order_highest_priority_first(
    make_client: MakeClient,
) -> None:
    seen: list[str] = []
    client = make_client(workers=_workers(seen))
    with inline(client) as jobs:
        for to, priority in [("low", -5), ("plain", 0), ("top", 90), ("plain-2", 0), ("mid", 3)]:
            client.insert(Welcome(to=to), drover.InsertOpts(priority=priority))
        jobs.drain()
    assert seen == ["top", "mid", "plain", "plain-2", "low"]


def test_drain_runs_jobs_that_handlers_insert(make_client: MakeClient) -> None:
    workers = drover.Workers()
    holder: list[drover.Client] = []

    @workers.register(args=Fragile)
    def chain(job: drover.Job[Fragile]) -> None:
        if job.args.fail:
            raise ValueError("the follow-up fails")
        holder[0].insert(Fragile(fail=True), drover.InsertOpts(max_attempts=1))

    client = make_client(workers=workers)
    holder.append(client)
    with inline(client) as jobs:
        client.insert(Fragile())
        worked = jobs.drain()
    assert [w.state.value for w in worked] == ["completed", "dead"]


def test_drain_limit_and_bad_arguments(make_client: MakeClient) -> None:
    client = make_client(workers=_workers([]))
    jobs = Jobs(client)
    for i in range(3):
        client.insert(Welcome(to=f"{i}@x"))
    assert len(jobs.drain(limit=2)) == 2
    assert len(jobs.drain()) == 1
    with pytest.raises(drover.InvalidArgument):
        jobs.drain(limit=0)
    with pytest.raises(drover.InvalidArgument):
        jobs.enqueued(args=["not", "a", "mapping"])  # type: ignore[arg-type]
    with pytest.raises(drover.InvalidArgument):
        Jobs("not a client")  # type: ignore[arg-type]


def test_the_pytest_plugin_in_a_users_suite(pytester: pytest.Pytester, db_url: str) -> None:
    pytester.makeconftest(
        textwrap.dedent(
            """
            import drover
            import pytest

            class SendEmail(drover.JobArgs, kind="plugin_send_email"):
                to: str

            WORKERS = drover.Workers()
            SENT = []

            @WORKERS.register(args=SendEmail)
            def send(job: drover.Job[SendEmail]) -> None:
                SENT.append(job.args.to)

            @pytest.fixture
            def drover_config():
                return drover.Config(workers=WORKERS)
            """
        )
    )
    pytester.makepyfile(
        textwrap.dedent(
            """
            import drover
            from conftest import SENT, SendEmail

            def sign_up(client, email):
                client.insert(SendEmail(to=email))

            def test_sign_up_sends_a_welcome(drover_client, drover_jobs):
                sign_up(drover_client, "ada@x")
                drover_jobs.assert_enqueued(kind="plugin_send_email", args={"to": "ada@x"})
                [worked] = drover_jobs.drain()
                assert worked.state is drover.JobState.COMPLETED
                assert SENT == ["ada@x"]

            def test_a_second_test_sees_only_its_own_jobs(drover_jobs):
                drover_jobs.assert_not_enqueued(kind="plugin_send_email")
                assert drover_jobs.drain() == []
            """
        )
    )
    pytester.makeini(f"[pytest]\ndrover_database_url = {db_url}\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


def test_the_plugin_skips_without_a_database(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("DROVER_TEST_DATABASE_URL", raising=False)
    pytester.makepyfile("def test_needs_db(drover_jobs):\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*drover fixtures need a database*"])


class Add(drover.JobArgs, kind="testing_add"):
    n: int


def test_drain_runs_a_workflow_in_dependency_order_with_parent_results(
    make_client: MakeClient,
) -> None:
    seen: list[tuple[int, list[Any]]] = []
    workers = drover.Workers()

    @workers.register(args=Add)
    def add(job: drover.Job[Add]) -> int:
        parents = job.parent_results(as_type=int)
        seen.append((job.args.n, parents))
        return job.args.n + sum(parents)

    client = make_client(workers=workers)
    jobs = Jobs(client)
    wf = client.insert(drover.chain(drover.group(Add(n=1), Add(n=2)), Add(n=10)))
    worked = jobs.drain()
    assert [w.state for w in worked] == ["completed"] * 3
    assert seen[-1] == (10, [1, 2])
    assert client.get_result(wf.last[0].id) == 13
