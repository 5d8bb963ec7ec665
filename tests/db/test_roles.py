"""The SQL `drover roles` prints, applied for real: each role does its job, and no more.

Roles are cluster-global and grants are per database: the session makes one
LOGIN role per drover role (unique names, dropped at the end); each test applies
the printed SQL to its own database and makes each LOGIN role a member of its
group role, then connects as it (the embedded server trusts local connections).
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from clihelp import invoke, one_line, run
from jobdb import Conn, Poll
from prometheus_client import CollectorRegistry
from psycopg import errors as pgerrors
from psycopg import sql
from werkzeug.test import Client as WsgiClient

import drover
from drover._db.claims import job_claim
from drover._db.pool import borrow
from drover._db.retention import job_prune_batch
from drover._db.roles import render_roles
from drover.health import HealthFinding
from drover.web import make_app

KINDS = ("producer", "worker", "reader")


@dataclass(frozen=True)
class Names:
    groups: dict[str, str]
    logins: dict[str, str]


@dataclass(frozen=True)
class Roles:
    names: Names
    urls: dict[str, str]
    owner: str

    def url(self, kind: str) -> str:
        return self.urls[kind]


@pytest.fixture(scope="session")
def role_names(pg_server: str, run_tag: str) -> Iterator[Names]:
    tag = run_tag.lower()
    names = Names(
        groups={k: f"drover_{k}_{tag}" for k in KINDS},
        logins={k: f"drover_{k}_login_{tag}" for k in KINDS},
    )
    with psycopg.connect(pg_server, autocommit=True) as admin:
        for login in names.logins.values():
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(login)))
            admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(login)))
    yield names
    # Every test database (where the grants lived) is gone by now.
    with psycopg.connect(pg_server, autocommit=True) as admin:
        for role in [*names.logins.values(), *names.groups.values()]:
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def _apply(db_url: str, names: Names, *, retention: bool = True) -> None:
    text = render_roles(
        producer=names.groups["producer"],
        worker=names.groups["worker"],
        reader=names.groups["reader"],
        retention=retention,
    )
    with psycopg.connect(db_url, autocommit=True) as owner:
        owner.execute(text.encode())
        for kind in KINDS:
            owner.execute(
                sql.SQL("GRANT {} TO {}").format(
                    sql.Identifier(names.groups[kind]), sql.Identifier(names.logins[kind])
                )
            )


def _roles(db_url: str, names: Names) -> Roles:
    urls = {k: psycopg.conninfo.make_conninfo(db_url, user=names.logins[k]) for k in KINDS}
    return Roles(names, urls, db_url)


@pytest.fixture
def roles(db_url: str, role_names: Names) -> Roles:
    _apply(db_url, role_names)
    return _roles(db_url, role_names)


class Ping(drover.JobArgs, kind="roles_ping"):
    n: int = 0


class Flaky(drover.JobArgs, kind="roles_flaky"):
    pass


class Nap(drover.JobArgs, kind="roles_nap"):
    pass


class Hold(drover.JobArgs, kind="roles_hold"):
    pass


class Now:
    """Retry at once: the test waits on the second attempt, not on a backoff."""

    def next_retry(self, job: drover.JobRow) -> datetime:
        return datetime.now(UTC)


def _states(conn: Conn) -> dict[str, int]:
    rows = conn.execute("SELECT state::text, count(*) FROM drover_jobs GROUP BY 1").fetchall()
    return {str(s): int(n) for s, n in rows}


def _says_who_and_where(error: drover.PermissionDenied, action: str, login: str) -> None:
    text = str(error)
    assert text.startswith(f"{action}:"), text
    assert login in text and "drover roles" in text and "permission denied" in text, text
    assert error.role == login and error.action == action
    assert isinstance(error, drover.DatabaseError)
    assert isinstance(error.__cause__, pgerrors.InsufficientPrivilege)


# --- producer -----------------------------------------------------------------------------------


def test_the_producer_inserts_every_way(roles: Roles, conn: Conn) -> None:
    with closing(drover.Client(roles.url("producer"))) as producer:
        producer.insert(Ping(n=1))
        producer.insert_many([Ping(n=i) for i in range(50)])  # COPY
        with psycopg.connect(roles.url("producer")) as tx:
            producer.insert_tx(tx, Ping(n=99))
            producer.insert_many_tx(tx, [Ping(n=i) for i in range(50)])
        unique = drover.InsertOpts(unique=drover.Unique(by_args=True))
        first = producer.insert(Ping(n=7), unique)
        again = producer.insert(Ping(n=7), unique)
        assert again.id == first.id
        debounced = drover.InsertOpts(debounce=60)
        assert producer.insert(Ping(n=8), debounced).id == producer.insert(Ping(n=8), debounced).id
        throttled = drover.InsertOpts(throttle=60)
        assert producer.insert(Ping(n=9), throttled).id == producer.insert(Ping(n=9), throttled).id
        flow = producer.insert(drover.chain(Ping(n=1), Ping(n=2)))
        assert len(flow.jobs) == 2
        # A job depending on one already in the table marks it has_dependents.
        producer.insert(Ping(n=3), drover.InsertOpts(depends_on=[first.id]))
    count = conn.execute("SELECT count(*) FROM drover_jobs").fetchone()
    assert count is not None and count[0] == 1 + 50 + 1 + 50 + 1 + 1 + 1 + 2 + 1
    deps = conn.execute("SELECT count(*) FROM drover_job_deps").fetchone()
    assert deps is not None and deps[0] == 2
    marked = conn.execute("SELECT has_dependents FROM drover_jobs WHERE id = %s", (first.id,))
    assert marked.fetchone() == (True,)


def test_the_producer_waits_for_a_result(roles: Roles) -> None:
    """docs/roles.md lets producers read results: ``Client.result`` flags the job
    ``awaited`` before it waits (a column UPDATE), refused before the producer had it."""
    workers = drover.Workers()

    @workers.register
    def ping(job: drover.Job[Ping]) -> dict[str, int]:
        return {"twice": job.args.n * 2}

    config = drover.Config(workers=workers, poll_interval=0.05)
    with (
        closing(drover.Client(roles.url("producer"))) as producer,
        closing(drover.Client(roles.url("worker"), config)) as worker,
    ):
        job = producer.insert(Ping(n=21))
        worker.start()
        try:
            assert producer.result(job, timeout=30) == {"twice": 42}
            # A second wait on a job already ended reads it at once.
            assert producer.result(job.id, timeout=30) == {"twice": 42}
        finally:
            worker.stop(timeout=10)


def test_the_producer_cannot_claim(roles: Roles, conn: Conn) -> None:
    with closing(drover.Client(roles.url("producer"))) as producer:
        producer.insert(Ping())
    with (
        psycopg.connect(roles.url("producer")) as as_producer,
        pytest.raises(drover.PermissionDenied) as raised,
        borrow(as_producer, "claim") as c,
    ):
        job_claim(c, "default", 10, 30.0)
    _says_who_and_where(
        raised.value, "claim jobs from queue 'default'", roles.names.logins["producer"]
    )
    assert _states(conn) == {"available": 1}


@pytest.mark.parametrize("kind", ["producer", "reader"])
def test_a_client_with_workers_refuses_to_start_under_a_role_that_cannot_claim(
    roles: Roles, conn: Conn, kind: str
) -> None:
    """Before ADR 0054 such a client started without a word and its fetcher logged a
    refused claim on every poll; now start() refuses, naming the role, what it lacks
    and the fix, and nothing runs."""
    workers = drover.Workers()

    @workers.register
    def ping(job: drover.Job[Ping]) -> None:
        """Never runs: the client does not start."""

    login = roles.names.logins[kind]
    with closing(drover.Client(roles.url("producer"))) as producer:
        producer.insert(Ping())
    client = drover.Client(roles.url(kind), drover.Config(workers=workers, poll_interval=0.05))
    try:
        with pytest.raises(drover.CannotClaim) as raised:
            client.start()
        error = raised.value
        assert isinstance(error, drover.PermissionDenied)
        text = str(error)
        assert text.startswith(f"start: role '{login}' may not claim and run jobs: it lacks "), text
        assert error.role == login and error.action == "start workers"
        assert error.missing[0].startswith("UPDATE (state, attempt, leased_until, leased_by"), text
        assert "SELECT, INSERT, UPDATE, DELETE ON drover_clients" in error.missing, text
        assert "`drover roles`" in text and f"GRANT drover_worker TO {login}" in text, text
        # Refused before anything started: the client is not running, and may start again
        # once its role is granted the worker's privileges.
        with pytest.raises(drover.NotStarted):
            client.stop()
    finally:
        client.close()
    assert _states(conn) == {"available": 1}
    registered = conn.execute("SELECT count(*) FROM drover_clients").fetchone()
    assert registered == (0,)


def test_drover_worker_under_the_producer_role_exits_1_with_the_fix(roles: Roles) -> None:
    cli_dir = Path(__file__).resolve().parent.parent / "cli"
    result = run("worker", "cli_app:make_client", url=roles.url("producer"), cwd=cli_dir)
    login = roles.names.logins["producer"]
    assert result.returncode == 1, result.stderr
    # The start line (logged), then the refusal: one line, and no traceback.
    starting, refusal = result.stderr.split("\n", 1)
    assert "worker starting" in starting, result.stderr
    line = one_line(refusal)
    assert f"start: role '{login}' may not claim and run jobs" in line, line
    assert f"GRANT drover_worker TO {login}" in line, line


def test_a_client_with_workers_starts_under_the_worker_role(roles: Roles) -> None:
    workers = drover.Workers()

    @workers.register
    def ping(job: drover.Job[Ping]) -> None:
        """Nothing to run: the test only starts and stops."""

    client = drover.Client(roles.url("worker"), drover.Config(workers=workers))
    try:
        client.start()
        client.stop(timeout=5)
    finally:
        client.close()


def test_drover_worker_s_hold_on_handed_back_jobs_works_under_the_worker_role(
    roles: Roles, conn: Conn
) -> None:
    """The hold (ADR 0053) locks rows FOR KEY SHARE, which needs UPDATE on the table: the
    worker role's grant covers it."""
    inside = threading.Event()
    release = threading.Event()
    workers = drover.Workers()

    @workers.register
    def hold(job: drover.Job[Hold]) -> None:
        inside.set()
        release.wait(30)  # deaf to its context

    client = drover.Client(
        roles.url("worker"), drover.Config(workers=workers, poll_interval=0.05, concurrency=1)
    )
    hold_session = client._hold_hand_backs()
    try:
        client.start()
        job = client.insert(Hold())
        assert inside.wait(30)
        hold_session.open()
        assert hold_session.ready(30)
        with pytest.raises(drover.DrainIncomplete):
            client.stop(0.1)
        assert hold_session.held == [job.id]
        locked = conn.execute(
            "SELECT id FROM drover_jobs WHERE id = %s FOR UPDATE SKIP LOCKED", (job.id,)
        ).fetchall()
        assert locked == [], "a claim's lock did not skip the held row"
    finally:
        hold_session.close()
        release.set()
        client.close()


# --- worker -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_worker_runs_jobs_end_to_end(roles: Roles, conn: Conn, poll: Poll) -> None:
    seen: dict[str, int] = {"flaky": 0, "nap": 0}
    lock = threading.Lock()
    workers = drover.Workers()

    @workers.register
    def ping(job: drover.Job[Ping]) -> dict[str, int]:
        job.set_progress(0.5, "half way")
        return {"n": job.args.n}

    @workers.register
    def flaky(job: drover.Job[Flaky]) -> None:
        with lock:
            seen["flaky"] += 1
            if seen["flaky"] == 1:
                raise RuntimeError("first attempt fails")

    holding = threading.Event()

    @workers.register
    def hold(job: drover.Job[Hold]) -> None:
        holding.set()
        assert job.context.wait(30), "the cancel request never reached the handler"

    @workers.register
    def nap(job: drover.Job[Nap]) -> None:
        with lock:
            seen["nap"] += 1
            if seen["nap"] == 1:
                raise drover.Snooze(0)

    config = drover.Config(
        workers=workers,
        poll_interval=0.05,
        retry_policy=Now(),
        rescue_interval=0.1,
        plugins=[
            drover.plugins.Periodic(
                jobs=[drover.PeriodicJob("roles_beat", "@every 1h", Ping(n=-1), run_on_start=True)]
            )
        ],
        queues={"default": drover.Queue(limits=drover.Limit(concurrency=2))},
    )
    with closing(drover.Client(roles.url("producer"))) as producer:
        producer.insert(drover.chain(Ping(n=1), Ping(n=2)))
        producer.insert_many([Ping(n=i) for i in range(10)])
        producer.insert(Flaky())
        producer.insert(Nap())
        held = producer.insert(Hold()).id
    # A job whose worker died: running, its lease long gone; the rescuer takes it back.
    conn.execute(
        "INSERT INTO drover_jobs (kind, queue, args, state, attempt, attempted_at, leased_until)"
        " VALUES ('roles_ping', 'default', '{\"n\": 5}', 'running', 1, now(),"
        " now() - interval '1 hour')"
    )
    total = 2 + 10 + 2 + 1 + 1  # chain, many, flaky and nap, the rescued one, the periodic one
    with closing(drover.Client(roles.url("worker"), config)) as worker:
        worker.start()
        assert holding.wait(30)
        with drover.Inspector(roles.owner) as owner:
            owner.cancel_job(held, reason="roles test")
        poll(
            lambda: _states(conn) == {"completed": total, "cancelled": 1},
            message="all jobs completed, the held one cancelled",
        )
        with drover.Inspector(roles.url("reader")) as reader:
            assert [w.client_id for w in reader.workers()] != []
        worker.stop(timeout=10)
    results = conn.execute(
        "SELECT count(*) FROM drover_jobs WHERE kind = 'roles_ping' AND result IS NOT NULL"
        " AND progress = 0.5"
    ).fetchone()
    assert results is not None and results[0] == 2 + 10 + 1 + 1
    assert seen == {"flaky": 2, "nap": 2}
    declared = conn.execute("SELECT count(*) FROM drover_limits").fetchone()
    assert declared is not None and declared[0] == 1


def test_the_worker_cannot_change_the_schema(roles: Roles) -> None:
    with psycopg.connect(roles.url("worker"), autocommit=True) as as_worker:
        with pytest.raises(pgerrors.InsufficientPrivilege):
            as_worker.execute("CREATE TABLE drover_sneaky (id int)")
        with pytest.raises(pgerrors.InsufficientPrivilege):
            as_worker.execute("ALTER TABLE drover_jobs ADD COLUMN sneaky int")
        with pytest.raises(pgerrors.InsufficientPrivilege):
            as_worker.execute("TRUNCATE drover_jobs")


def _finish_one(owner_url: str) -> None:
    with psycopg.connect(owner_url, autocommit=True) as owner:
        owner.execute(
            "INSERT INTO drover_jobs (kind, queue, args, state, attempt, finalized_at)"
            " VALUES ('roles_ping', 'default', '{}', 'completed', 1, now() - interval '1 day')"
        )


def _prune_as(url: str) -> int | None:
    with psycopg.connect(url) as as_role, borrow(as_role, "prune") as c:
        deleted = job_prune_batch(c, "completed", 60.0, 100)
        as_role.commit()
        return deleted


def test_the_worker_deletes_only_when_it_runs_retention(
    db_url: str, role_names: Names, conn: Conn
) -> None:
    _apply(db_url, role_names, retention=False)
    roles = _roles(db_url, role_names)
    _finish_one(db_url)
    with pytest.raises(drover.PermissionDenied) as raised:
        _prune_as(roles.url("worker"))
    _says_who_and_where(raised.value, "prune completed jobs", role_names.logins["worker"])
    assert _states(conn) == {"completed": 1}
    # The same statement with the retention grant (printed again, idempotently) deletes.
    _apply(db_url, role_names, retention=True)
    assert _prune_as(roles.url("worker")) == 1
    assert _states(conn) == {}


# --- reader -------------------------------------------------------------------------------------


def _plant_dead(conn: Conn) -> int:
    row = conn.execute(
        "INSERT INTO drover_jobs (kind, queue, args, state, attempt, finalized_at)"
        " VALUES ('roles_ping', 'default', '{}', 'dead', 1, now()) RETURNING id"
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_the_reader_reads_stats_jobs_and_the_read_only_page(roles: Roles, conn: Conn) -> None:
    dead = _plant_dead(conn)
    with drover.Inspector(roles.url("reader")) as reader:
        assert reader.stats() is not None
        assert [j.id for j in reader.list_jobs(state="dead")] == [dead]
        assert reader.get_job(dead).state == "dead"
        page = WsgiClient(make_app(reader, read_only=True))
        for path in ("/", "/jobs", f"/jobs/{dead}", "/workers"):
            response = page.get(path, headers={"Host": "status.example"})
            assert response.status_code == 200, (path, response.text[:300])
    result = invoke(["stats", "-d", roles.url("reader")])
    assert result.exit_code == 0, result.output
    listed = invoke(["jobs", "list", "--state", "dead", "-d", roles.url("reader")])
    assert listed.exit_code == 0 and str(dead) in listed.output


def test_the_reader_cannot_retry_or_cancel(roles: Roles, conn: Conn) -> None:
    dead = _plant_dead(conn)
    with closing(drover.Client(roles.url("producer"))) as producer:
        waiting = producer.insert(Ping()).id
    login = roles.names.logins["reader"]
    with drover.Inspector(roles.url("reader")) as reader:
        with pytest.raises(drover.PermissionDenied) as retried:
            reader.retry_job(dead)
        assert login in str(retried.value) and "drover roles" in str(retried.value)
        with pytest.raises(drover.PermissionDenied) as cancelled:
            reader.cancel_job(waiting)
        assert login in str(cancelled.value)
    assert _states(conn) == {"dead": 1, "available": 1}
    for command in (["retry", str(dead)], ["cancel", str(waiting)]):
        result = invoke([*command, "-d", roles.url("reader")])
        assert result.exit_code == 1, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and "drover roles" in lines[0] and login in lines[0], lines
    assert _states(conn) == {"dead": 1, "available": 1}


# --- the status page ----------------------------------------------------------------------------

HOST = "status.example"


def _page_get(page: WsgiClient, path: str) -> str:
    response = page.get(path, headers={"Host": HOST})
    assert response.status_code == 200, (path, response.text[:300])
    return response.text


def _page_post(page: WsgiClient, path: str, data: dict[str, str]) -> tuple[int, str]:
    cookie = page.get_cookie("drover_csrf", domain=HOST)
    assert cookie is not None
    response = page.post(
        path,
        data={"csrf": cookie.value, **data},
        headers={"Host": HOST, "Origin": f"http://{HOST}"},
    )
    return response.status_code, response.text


def test_the_page_under_the_reader_role_without_read_only_offers_no_write_and_answers_403(
    roles: Roles, conn: Conn
) -> None:
    """Before ADR 0054 this page offered Retry, Cancel and Pause, and a click answered 500.
    Now it asks its role's privileges once and offers none of them; a POST is a 403
    naming the role and what it lacks, and nothing changes."""
    dead = _plant_dead(conn)
    with closing(drover.Client(roles.url("producer"))) as producer:
        waiting = producer.insert(Ping()).id
    login = roles.names.logins["reader"]
    with drover.Inspector(roles.owner) as owner:
        # The same pages as the owner: every kind of button is there to be left out.
        owner_page = WsgiClient(make_app(owner))
        for path in ("/", f"/jobs/{dead}", "/limits"):
            assert 'method="post"' in _page_get(owner_page, path), path
    with drover.Inspector(roles.url("reader")) as reader:
        assert reader.rights() == drover.OperatorRights(login, False, False, False)
        page = WsgiClient(make_app(reader))
        for path in ("/", "/jobs?state=all", f"/jobs/{dead}", f"/jobs/{waiting}", "/limits"):
            text = _page_get(page, path)
            assert 'method="post"' not in text, path  # not one button or form
            assert f"read-only: role {login} may not" in text, path
        writes: list[tuple[str, dict[str, str], str]] = [
            (f"/jobs/{dead}/retry", {}, "retry or cancel jobs"),
            (f"/jobs/{waiting}/cancel", {}, "retry or cancel jobs"),
            ("/jobs/bulk", {"action": "retry", "id": str(dead)}, "retry or cancel jobs"),
            ("/jobs/retry-dead", {"kind": "roles_ping"}, "retry or cancel jobs"),
            ("/queues/pause", {"queue": "default"}, "pause or resume queues"),
            ("/limits/set", {"key": "queue:default", "concurrency": "2"}, "set or clear limits"),
        ]
        for path, data, what in writes:
            status, text = _page_post(page, path, data)
            assert status == 403, (path, status, text[:300])
            assert f"Role &#39;{login}&#39; may not {what}" in text, (path, text[:500])
    assert _states(conn) == {"dead": 1, "available": 1}
    assert conn.execute("SELECT count(*) FROM drover_queues").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM drover_limits").fetchone() == (0,)


def test_the_page_under_the_worker_role_offers_retry_and_cancel_but_not_pause(
    roles: Roles, conn: Conn
) -> None:
    dead = _plant_dead(conn)
    with drover.Inspector(roles.url("worker")) as worker:
        rights = worker.rights()
        assert rights.retry_and_cancel and not rights.pause_queues and not rights.set_limits
        page = WsgiClient(make_app(worker))
        text = _page_get(page, f"/jobs/{dead}")
        assert f'action="/jobs/{dead}/retry"' in text and "read-only" not in text
        overview = _page_get(page, "/")
        assert 'action="/queues/pause"' not in overview
        status, _ = _page_post(page, "/queues/pause", {"queue": "default"})
        assert status == 403
        status, _ = _page_post(page, f"/jobs/{dead}/retry", {"next": "/jobs"})
        assert status == 303
    assert _states(conn) == {"available": 1}


def test_a_write_refused_after_the_page_asked_is_a_403_not_a_500(
    roles: Roles, db_url: str, run_tag: str
) -> None:
    with _blind_role(db_url, run_tag) as custom, drover.Inspector(custom) as inspector:
        page = WsgiClient(make_app(inspector))
        assert inspector.rights().pause_queues
        _page_get(page, "/")  # the page asks, and keeps the answer
        login = f"drover_blind_{run_tag.lower()}"
        with psycopg.connect(db_url, autocommit=True) as owner:
            owner.execute(
                sql.SQL("REVOKE INSERT, UPDATE ON drover_queues FROM {}").format(
                    sql.Identifier(login)
                )
            )
        status, text = _page_post(page, "/queues/pause", {"queue": "default"})
        assert status == 403, text[:300]
        assert "permission denied for table drover_queues" in text and login in text
        # Asked again, the page no longer offers it.
        status, text = _page_post(page, "/queues/pause", {"queue": "default"})
        assert status == 403 and f"Role &#39;{login}&#39; may not pause" in text, text[:500]


# --- the queue doctor -------------------------------------------------------------------------

NOW = drover.HealthThresholds(xmin_age=0, lease_grace=0, unserved_grace=0)
"""Thresholds that name a condition as soon as it exists: no test waits for an age."""


@contextlib.contextmanager
def _idle_in_transaction(url: str) -> Iterator[tuple[int, str]]:
    """A session of ``url``'s role idle in a transaction holding an xid: (pid, application)."""
    app = f"roles-holder-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, application_name=app) as holder:
        holder.execute("SELECT txid_current()")
        try:
            yield holder.info.backend_pid, app
        finally:
            holder.rollback()


@contextlib.contextmanager
def _blind_role(db_url: str, run_tag: str) -> Iterator[str]:
    """A custom login role with every privilege on drover's tables but not pg_read_all_stats:
    the URL to connect as it."""
    name = f"drover_blind_{run_tag.lower()}"
    ident = sql.Identifier(name)
    with psycopg.connect(db_url, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(ident))
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(ident))
        for what in ("TABLES", "SEQUENCES"):
            admin.execute(
                sql.SQL("GRANT ALL ON ALL {} IN SCHEMA public TO {}").format(sql.SQL(what), ident)
            )
        try:
            yield psycopg.conninfo.make_conninfo(db_url, user=name)
        finally:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (name,),
            )
            admin.execute(sql.SQL("DROP OWNED BY {}").format(ident))
            admin.execute(sql.SQL("DROP ROLE {}").format(ident))


def test_an_owner_who_may_not_grant_pg_read_all_stats_is_warned_and_the_rest_applies(
    db_url: str, role_names: Names, run_tag: str
) -> None:
    """Granting a predefined role takes a superuser (or its ADMIN OPTION): a CREATEROLE
    owner gets a warning naming the statement to hand an administrator, not an error."""
    text = render_roles(
        producer=role_names.groups["producer"],
        worker=role_names.groups["worker"],
        reader=role_names.groups["reader"],
    )
    block = text[text.index("DO $stats$") : text.index("$stats$;") + len("$stats$;")]
    name = f"drover_admin_{run_tag.lower()}"
    ident = sql.Identifier(name)
    _apply(db_url, role_names)  # the roles exist
    warnings: list[str] = []
    with psycopg.connect(db_url, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(ident))
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN CREATEROLE").format(ident))
        admin.execute(
            sql.SQL("REVOKE pg_read_all_stats FROM {}, {}").format(
                sql.Identifier(role_names.groups["worker"]),
                sql.Identifier(role_names.groups["reader"]),
            )
        )
        try:
            url = psycopg.conninfo.make_conninfo(db_url, user=name)
            with psycopg.connect(url, autocommit=True) as owner:
                owner.add_notice_handler(lambda d: warnings.append(d.message_primary or ""))
                owner.execute(block.encode())
            granted = admin.execute(
                "SELECT pg_has_role(%s, 'pg_read_all_stats', 'USAGE')",
                (role_names.groups["worker"],),
            ).fetchone()
        finally:
            admin.execute(sql.SQL("DROP ROLE {}").format(ident))
    assert granted == (False,)
    assert any(
        f"role {name} may not grant pg_read_all_stats" in w
        and f"GRANT pg_read_all_stats TO {role_names.groups['worker']}" in w
        for w in warnings
    ), warnings


def _found(report: drover.HealthReport, code: str, **evidence: object) -> list[HealthFinding]:
    return [
        f
        for f in report.findings
        if f.code == code and all(f.evidence.get(k) == v for k, v in evidence.items())
    ]


@pytest.mark.parametrize("kind", ["worker", "reader"])
def test_the_doctor_under_the_worker_and_reader_roles_names_another_roles_open_transaction(
    roles: Roles, kind: str
) -> None:
    """pg_read_all_stats, granted by `drover roles`, shows these roles other roles' sessions;
    before ADR 0054 the doctor said `healthy` while a producer's session sat idle in
    transaction."""
    slot = f"roles_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(roles.owner, autocommit=True) as owner:
        # The doctor's other reads need no grant: a slot is named under these roles too.
        owner.execute("SELECT pg_create_physical_replication_slot(%s, true)", (slot,))
        try:
            with _idle_in_transaction(roles.url("producer")) as (pid, app):
                with drover.Inspector(roles.url(kind)) as inspector:
                    report = inspector.health(NOW)
                doctor = invoke(["doctor", "--xmin-age", "0", "-d", roles.url(kind)])
        finally:
            owner.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    assert _found(report, "REPLICATION_SLOT_INACTIVE", slot=slot)
    [finding] = _found(report, "XMIN_IDLE_IN_TRANSACTION", pid=pid)
    assert finding.evidence["application"] == app
    assert finding.evidence["user"] == roles.names.logins["producer"]
    assert not _found(report, "CANNOT_SEE_SESSIONS")
    assert doctor.exit_code == 1, doctor.output
    assert f"XMIN_IDLE_IN_TRANSACTION  pid {pid} ({app})" in doctor.output


def test_the_doctor_under_a_role_that_cannot_see_says_so(
    roles: Roles, db_url: str, run_tag: str
) -> None:
    """A custom role without pg_read_all_stats cannot see the producer's open transaction:
    the doctor says that it cannot see, never `healthy` (exit 0)."""
    with (
        _blind_role(db_url, run_tag) as blind,
        _idle_in_transaction(roles.url("producer")) as (pid, _),
    ):
        with drover.Inspector(blind) as inspector:
            report = inspector.health(NOW)
        doctor = invoke(["doctor", "--xmin-age", "0", "-d", blind])
        as_json = invoke(["--json", "doctor", "--xmin-age", "0", "-d", blind])
    assert not report.healthy
    assert not _found(report, "XMIN_IDLE_IN_TRANSACTION", pid=pid)
    [blinded] = _found(report, "CANNOT_SEE_SESSIONS")
    login = f"drover_blind_{run_tag.lower()}"
    assert blinded.evidence["role"] == login
    assert blinded.evidence["hidden_sessions"] >= 1
    assert blinded.evidence["hidden_holding_xmin"] >= 1
    assert blinded.remedy.startswith(f"GRANT pg_read_all_stats TO {login}")
    assert doctor.exit_code == 1 and "healthy" not in doctor.output.splitlines(), doctor.output
    assert f"CANNOT_SEE_SESSIONS  role {login} cannot see" in doctor.output
    assert as_json.exit_code == 1 and '"healthy": false' in as_json.output


def _findings(registry: CollectorRegistry, code: str) -> float:
    return registry.get_sample_value("drover_health_findings", {"code": code}) or 0.0


def test_the_health_metric_under_the_worker_role_sees_and_under_a_blind_role_says_it_cannot(
    roles: Roles, db_url: str, run_tag: str, poll: Poll
) -> None:
    workers = drover.Workers()

    @workers.register
    def ping(job: drover.Job[Ping]) -> None:
        """Nothing runs: the test reads the health probe's gauge."""

    def probe(url: str, *, sees: bool) -> None:
        registry = CollectorRegistry()
        config = drover.Config(
            workers=workers,
            metrics_registry=registry,
            plugins=[drover.plugins.HealthProbe(interval=0.05, thresholds=NOW)],
        )
        with closing(drover.Client(url, config)) as client:
            client.start()
            try:
                poll(
                    lambda: registry.get_sample_value("drover_health_checked_timestamp_seconds"),
                    message="the probe examined once",
                )
                if sees:
                    poll(lambda: _findings(registry, "XMIN_IDLE_IN_TRANSACTION") >= 1)
                    assert _findings(registry, "CANNOT_SEE_SESSIONS") == 0
                else:
                    poll(lambda: _findings(registry, "CANNOT_SEE_SESSIONS") == 1)
                    assert _findings(registry, "XMIN_IDLE_IN_TRANSACTION") == 0
            finally:
                client.stop(timeout=5)

    with (
        _blind_role(db_url, run_tag) as blind,
        _idle_in_transaction(roles.url("producer")),
    ):
        probe(roles.url("worker"), sees=True)
        probe(blind, sees=False)


# --- migrations ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_only_the_owner_can_migrate(roles: Roles, kind: str) -> None:
    with pytest.raises(drover.PermissionDenied) as raised:
        drover.migrate(roles.url(kind))
    assert roles.names.logins[kind] in str(raised.value)
    result = invoke(["migrate", "-d", roles.url(kind)])
    assert result.exit_code == 1 and "drover roles" in result.output, result.output
    assert drover.migrate(roles.owner) == []


def test_the_printed_sql_applies_twice(db_url: str, role_names: Names) -> None:
    _apply(db_url, role_names)
    _apply(db_url, role_names)
    with psycopg.connect(db_url) as owner:
        granted = owner.execute(
            "SELECT privilege_type FROM information_schema.role_table_grants"
            " WHERE grantee = %s AND table_name = 'drover_jobs' ORDER BY 1",
            (role_names.groups["reader"],),
        ).fetchall()
    assert granted == [("SELECT",)]


def test_roles_for_a_schema_of_its_own_let_the_producer_and_worker_run_there(
    empty_db_url: str, role_names: Names, poll: Poll
) -> None:
    """`drover roles --schema` grants on that installation (ADR 0043): the producer inserts
    and a worker role runs a limited job there, through the pinned claim function."""
    drover.migrate(empty_db_url, schema="tenant_r")
    text = render_roles(
        producer=role_names.groups["producer"],
        worker=role_names.groups["worker"],
        reader=role_names.groups["reader"],
        schema="tenant_r",
    )
    assert "tenant_r.drover_jobs" in text and "public." not in text
    with psycopg.connect(empty_db_url, autocommit=True) as owner:
        owner.execute(text.encode())
        owner.execute(text.encode())  # idempotent here too
        for kind in KINDS:
            owner.execute(
                sql.SQL("GRANT {} TO {}").format(
                    sql.Identifier(role_names.groups[kind]), sql.Identifier(role_names.logins[kind])
                )
            )
    roles = _roles(empty_db_url, role_names)
    with contextlib.closing(
        drover.Client(roles.url("producer"), drover.Config(schema="tenant_r"))
    ) as producer:
        row = producer.insert(Ping(n=7))
    done = threading.Event()
    workers = drover.Workers()

    @workers.register
    def ping(job: drover.Job[Ping]) -> None:
        done.set()

    worker = drover.Client(
        roles.url("worker"),
        drover.Config(
            workers=workers,
            poll_interval=0.05,
            queues={"default": drover.Queue(limits=drover.Limit(concurrency=1))},
            schema="tenant_r",
        ),
    )
    worker.start()
    try:
        assert done.wait(30), "the worker role never ran the job"
        with drover.Inspector(roles.url("reader"), schema="tenant_r") as reader:
            poll(lambda: reader.get_job(row.id).state == drover.JobState.COMPLETED)
    finally:
        worker.stop(timeout=5)
        worker.close()
