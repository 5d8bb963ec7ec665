"""A feature nobody configured costs nothing: the statements a drain runs, counted by the server.

A dedicated embedded server loads ``pg_stat_statements``; each test drains
jobs through the PostgreSQL kernel store (its claim and outcome sessions,
with drover's features plugged in as ``Store.kernel`` does) in a database of
its own and reads back, from the server's own accounting, every statement
that touched ``drover_jobs``. With no feature in use those are exactly
``kernel.sql``'s claim and completion. Each feature, turned on alone (a
limit, an awaited job, a dependent, a cancel request, a result), brings in
its own statement, and only then.

The statements are recognised by their words: the server keeps a statement's
text with its constants replaced by ``$n``, so a statement's identifiers and
keywords, in order, name it among the SQL files' named queries.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import drover
from drover._db import results
from drover._db.embedded import EmbeddedUnavailable, embedded_postgres
from drover._db.queries import parse_queries, query, sql_root
from drover._db.store import Store
from drover._records import Outcome, Recorded, WriteResult
from drover.job import JobState

LEASE = 60.0
JOBS = 30
OWN = "/* this test's own */"
"""Marks the test's own reads, which the accounting leaves out (the server keeps comments)."""

KERNEL_CLAIM = {"job_claim"}
KERNEL_COMPLETION = {"job_complete", "job_record"}
FEATURE_STATEMENTS = {"job_complete_many", "job_record_outcomes", "job_claim_limited", "job_gates"}

# What the kernel's statements must never mention (ADR 0045): each feature's
# columns, tables, functions and channels.
FEATURE_WORDS = (
    "awaited",
    "has_dependents",
    "cancel_request",
    "result",
    "drover_limits",
    "drover_claim_limited",
    "drover_release_dependents",
    "drover_cancel_dependents",
    "drover_cancel_entry",
    "pg_notify",
    "ledger",
)


# --- the server and its accounting -----------------------------------------------------------


def _url(server: str, dbname: str) -> str:
    return make_conninfo(server, dbname=dbname)


@pytest.fixture(scope="module")
def stats_server() -> Iterator[str]:
    """A server of this module's own that counts statements (pg_stat_statements)."""
    try:
        with embedded_postgres(preload=["pg_stat_statements"]) as url:
            with psycopg.connect(url, autocommit=True) as admin:
                admin.execute("CREATE DATABASE drover_kernel_tpl")
            with psycopg.connect(_url(url, "drover_kernel_tpl"), autocommit=True) as conn:
                drover.migrate(conn)
                conn.execute("CREATE EXTENSION pg_stat_statements")
            yield url
    except EmbeddedUnavailable as exc:  # pragma: no cover - the dev extra installs it
        pytest.skip(f"needs the embedded server to load pg_stat_statements: {exc}")


_names = itertools.count()


@pytest.fixture
def stats_db(stats_server: str) -> Iterator[str]:
    """A fresh migrated database on the counting server."""
    name = f"drover_kernel_{next(_names)}"
    with psycopg.connect(stats_server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE drover_kernel_tpl'.encode())
    yield _url(stats_server, name)
    with psycopg.connect(stats_server, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)'.encode())


def _reset(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_statements_reset()")


def _words(text: str) -> tuple[str, ...]:
    """A statement's identifiers and keywords in order: what survives normalisation."""
    text = re.sub(r"'(?:[^']|'')*'", " ", text)  # literals (the server's become $n)
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.DOTALL)  # squashed lists: ($1 /*, ... */)
    text = re.sub(r"%\(\w+\)s|%s|\$\d+", " ", text)
    words = re.findall(r"[a-z_][a-z0-9_]*", text.lower())
    return tuple(w for w in words if w not in ("true", "false", "null"))


def _named_queries() -> dict[tuple[str, ...], str]:
    found: dict[tuple[str, ...], str] = {}
    for entry in (sql_root() / "queries").iterdir():
        if entry.name.endswith(".sql"):
            for name, text in parse_queries(entry.read_text(encoding="utf-8"), entry.name).items():
                found.setdefault(_words(text), name)
    return found


def _missing(seen: tuple[str, ...], source: tuple[str, ...]) -> int | None:
    """How many of ``source``'s words ``seen`` lacks, if ``seen`` is a subsequence of it."""
    at = 0
    for word in seen:
        while at < len(source) and source[at] != word:
            at += 1
        if at == len(source):
            return None
        at += 1
    return len(source) - len(seen)


def _match(seen: tuple[str, ...], known: dict[tuple[str, ...], str]) -> str | None:
    """The named query the server's text is: the same words, or (a keyword the server
    turned into a constant, as EXTRACT's field) the fewest missing, at most 3."""
    if seen in known:
        return known[seen]
    near = [(n, name) for words, name in known.items() if (n := _missing(seen, words)) is not None]
    near = [(n, name) for n, name in near if n <= 3]
    return min(near)[1] if near else None


def _jobs_statements(url: str) -> Counter[str]:
    """Calls per named query, of every statement run in this database that touched the
    jobs or the gates since the last reset. A statement no SQL file names fails."""
    known = _named_queries()
    dbname = conninfo_to_dict(url)["dbname"]
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT s.query, s.calls FROM pg_stat_statements s "
            "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = %s",
            (dbname,),
        ).fetchall()
    calls: Counter[str] = Counter()
    for text, n in rows:
        lowered = str(text).lower()
        if (
            OWN in lowered
            or "pg_stat_statements" in lowered
            or not re.search(r"drover_jobs|drover_gates|drover_claim_limited", lowered)
        ):
            continue
        name = _match(_words(str(text)), known)
        assert name is not None, f"a statement no SQL file names touched the jobs:\n{text}"
        calls[name] += int(n)
    return calls


# --- the drain -------------------------------------------------------------------------------


def _insert(url: str, n: int = JOBS, queue: str = "default") -> list[int]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "INSERT INTO drover_jobs (kind, queue, args) "
            "SELECT 'k', %s, '{}' FROM generate_series(1, %s) RETURNING id",
            (queue, n),
        ).fetchall()
    return [int(r[0]) for r in rows]


def _drain(
    store: Store, *, result: str | None = None, before_write: Any = None, batch: int = 5
) -> list[Recorded]:
    """Claim and complete until the queue is empty, as the fetcher and completer do."""
    kernel = store.kernel
    claims = kernel.claim_session()
    outcomes = kernel.outcome_session()
    recorded: list[Recorded] = []
    try:
        while rows := claims.claim("default", batch, LEASE, "test").rows:
            if before_write is not None:
                before_write(rows)
            recorded += outcomes.record(
                [Outcome(r.id, r.attempt, JobState.COMPLETED, result=result) for r in rows]
            )
    finally:
        claims.release()
        outcomes.release()
    return recorded


def _drain_riding(store: Store, *, batch: int = 5) -> list[Recorded]:
    """Claim until the queue is empty, each claim carrying the last round's completions,
    as a busy fetcher does (ADR 0058); the last completions ride with the empty claim."""
    claims = store.kernel.claim_session()
    outcomes = store.kernel.outcome_session()
    recorded: list[Recorded] = []
    done: list[Outcome] = []
    try:
        while True:
            landed: list[Recorded] = []
            rows = claims.claim(
                "default", batch, LEASE, "test", completions=done, landed=landed.extend
            ).rows
            recorded += landed
            # What the claim left out (refused), written as any outcome, as the
            # fetcher's completer does.
            written = {(r.outcome.id, r.outcome.attempt) for r in landed}
            if left := [o for o in done if (o.id, o.attempt) not in written]:
                recorded += outcomes.record(left)
            done = [Outcome(r.id, r.attempt, JobState.COMPLETED) for r in rows]
            if not rows:
                return recorded
    finally:
        claims.release()
        outcomes.release()


def _gate_default_queue(url: str) -> None:
    """A concurrency limit on the default queue: its claims go through the limits' gate."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO drover_limits (scope, target, override_concurrency) "
            "VALUES ('queue', 'default', 100)"
        )


@contextlib.contextmanager
def _store(url: str) -> Iterator[Store]:
    store = Store.open(url, who="test", max_size=2)
    try:
        yield store
    finally:
        store.close()


def _states(url: str) -> Counter[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(f"SELECT {OWN} state::text FROM drover_jobs".encode()).fetchall()
    return Counter(str(r[0]) for r in rows)


# --- no feature in use -----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(KERNEL_CLAIM | KERNEL_COMPLETION))
def test_the_kernels_statements_name_no_feature(name: str) -> None:
    words = set(_words(query(name)))
    assert not words & set(FEATURE_WORDS), words & set(FEATURE_WORDS)


def test_with_no_feature_in_use_a_drain_runs_only_the_kernels_claim_and_completion(
    stats_db: str,
) -> None:
    _insert(stats_db)
    with _store(stats_db) as store:
        _reset(stats_db)
        recorded = _drain(store)
    calls = _jobs_statements(stats_db)
    assert len(recorded) == JOBS
    assert all(r.result is WriteResult.APPLIED and not r.cancelled for r in recorded)
    assert _states(stats_db) == {"completed": JOBS}
    rounds = JOBS // 5
    # Claims until one finds nothing; one completion per claim round.
    assert calls == {"job_claim": rounds + 1, "job_complete": rounds}, calls


def test_with_no_feature_in_use_completions_carried_by_the_claims_run_only_the_claim(
    stats_db: str,
) -> None:
    _insert(stats_db)
    with _store(stats_db) as store:
        _reset(stats_db)
        recorded = _drain_riding(store)
    calls = _jobs_statements(stats_db)
    assert [r.result for r in recorded] == [WriteResult.APPLIED] * JOBS
    assert _states(stats_db) == {"completed": JOBS}
    # One statement per round: each claim completes the round before it.
    assert calls == {"job_claim": JOBS // 5 + 1}, calls


def test_a_carried_completion_of_an_awaited_job_goes_through_the_features_completion(
    stats_db: str,
) -> None:
    ids = _insert(stats_db)
    with psycopg.connect(stats_db, autocommit=True) as conn:
        results.job_mark_awaited(conn, ids[7])
    with _store(stats_db) as store:
        _reset(stats_db)
        recorded = _drain_riding(store)
    calls = _jobs_statements(stats_db)
    assert sorted(r.result.value for r in recorded) == ["applied"] * JOBS
    assert _states(stats_db) == {"completed": JOBS}
    # The claim left it out (watched); written as any outcome, it went through the
    # kernel's completion (refused again), a read of why, and the features' completion.
    assert calls == {
        "job_claim": JOBS // 5 + 1,
        "job_complete": 1,
        "job_current_states": 1,
        "job_complete_many": 1,
    }, calls


def test_carried_completions_on_a_gated_queue_are_written_before_the_gates_claim(
    stats_db: str,
) -> None:
    _insert(stats_db)
    _gate_default_queue(stats_db)
    with _store(stats_db) as store:
        _reset(stats_db)
        recorded = _drain_riding(store)
    calls = _jobs_statements(stats_db)
    assert [r.result for r in recorded] == [WriteResult.APPLIED] * JOBS
    assert _states(stats_db) == {"completed": JOBS}
    # The first claim finds the gate (it carries nothing yet); every later one
    # goes to the gate's claim, its completions written just before it.
    assert calls == {
        "job_claim": 1,
        "job_gates": 1,
        "job_claim_limited": JOBS // 5 + 1,
        "job_complete": JOBS // 5,
    }, calls


def test_with_no_feature_in_use_failures_and_snoozes_run_only_the_kernels_outcome_write(
    stats_db: str,
) -> None:
    _insert(stats_db, 6)
    with _store(stats_db) as store:
        claims = store.kernel.claim_session()
        rows = claims.claim("default", 6, LEASE, "test").rows
        claims.release()
        _reset(stats_db)
        session = store.kernel.outcome_session()
        written = session.record(
            [
                Outcome(rows[0].id, 1, JobState.RETRYABLE, error={"error": "boom"}),
                Outcome(rows[1].id, 1, JobState.SCHEDULED, refund_attempt=True),
                Outcome(rows[2].id, 1, JobState.DEAD, error={"error": "gone"}),
                Outcome(rows[3].id, 1, JobState.CANCELLED),
                Outcome(rows[4].id, 1, JobState.COMPLETED),
                Outcome(rows[5].id, 2, JobState.COMPLETED),  # a stale claim: refused
            ]
        )
        session.release()
    assert [r.result for r in written] == [WriteResult.APPLIED] * 5 + [WriteResult.LEASE_LOST]
    assert _jobs_statements(stats_db) == {"job_record": 1}


# --- each feature brings its statement, and only then ----------------------------------------


def test_a_limit_brings_the_gates_claim(stats_db: str) -> None:
    _insert(stats_db)
    _gate_default_queue(stats_db)
    with _store(stats_db) as store:
        _reset(stats_db)
        recorded = _drain(store)
    calls = _jobs_statements(stats_db)
    assert len(recorded) == JOBS
    # The kernel's claim finds the gate once, then the session goes straight
    # to the gate's claim; completions stay the kernel's.
    assert calls["job_claim"] == 1
    assert calls["job_gates"] == 1
    assert calls["job_claim_limited"] == JOBS // 5 + 1
    assert calls["job_complete"] == JOBS // 5
    assert not calls.keys() & {"job_complete_many", "job_record_outcomes"}


def test_an_awaited_job_brings_the_features_completion_for_that_job_only(stats_db: str) -> None:
    ids = _insert(stats_db)
    with psycopg.connect(stats_db, autocommit=True) as conn:
        results.job_mark_awaited(conn, ids[7])
    with _store(stats_db) as store:
        _reset(stats_db)
        recorded = _drain(store)
    calls = _jobs_statements(stats_db)
    assert all(r.result is WriteResult.APPLIED for r in recorded)
    assert _states(stats_db) == {"completed": JOBS}
    assert calls["job_complete_many"] == 1
    assert calls["job_current_states"] == 1
    assert calls["job_complete"] == JOBS // 5
    assert "job_claim_limited" not in calls


def test_a_dependent_brings_the_features_completion_which_releases_it(stats_db: str) -> None:
    (parent,) = _insert(stats_db, 1)
    with psycopg.connect(stats_db, autocommit=True) as conn:
        conn.execute(query("job_mark_has_dependents"), {"ids": [parent]})
        (child,) = conn.execute(
            "INSERT INTO drover_jobs (kind, queue, args, state, pending_deps) "
            "VALUES ('k', 'default', '{}', 'pending', 1) RETURNING id"
        ).fetchone() or (None,)
        conn.execute(
            "INSERT INTO drover_job_deps (job_id, depends_on) VALUES (%s, %s)", (child, parent)
        )
    with _store(stats_db) as store:
        _reset(stats_db)
        recorded = _drain(store)
    calls = _jobs_statements(stats_db)
    # The parent through the features' statement (which releases the child),
    # then the child through the kernel's.
    assert [r.outcome.id for r in recorded] == [parent, child]
    assert _states(stats_db) == {"completed": 2}
    assert calls["job_complete_many"] == 1
    assert calls["job_complete"] == 2


def test_a_cancel_request_brings_the_features_completion_which_cancels(stats_db: str) -> None:
    _insert(stats_db, 5)
    asked: list[int] = []

    def ask(rows: Any) -> None:
        with drover.Inspector(stats_db) as inspector:
            inspector.cancel_job(rows[2].id, reason="stop")
        asked.append(rows[2].id)

    with _store(stats_db) as store:
        _reset(stats_db)
        recorded = _drain(store, before_write=ask)
    calls = _jobs_statements(stats_db)
    assert [r.outcome.id for r in recorded if r.cancelled] == asked
    assert _states(stats_db) == {"completed": 4, "cancelled": 1}
    assert calls["job_complete"] == 1
    assert calls["job_complete_many"] == 1


def test_a_result_brings_the_features_completion_instead_of_the_kernels(stats_db: str) -> None:
    _insert(stats_db)
    with _store(stats_db) as store:
        _reset(stats_db)
        recorded = _drain(store, result='"done"')
    calls = _jobs_statements(stats_db)
    assert all(r.result is WriteResult.APPLIED for r in recorded)
    with psycopg.connect(stats_db, autocommit=True) as conn:
        stored = conn.execute(
            f"SELECT {OWN} DISTINCT result::text FROM drover_jobs".encode()
        ).fetchall()
    assert stored == [('"done"',)]
    assert calls == {"job_claim": JOBS // 5 + 1, "job_complete_many": JOBS // 5}, calls


# --- a real client ---------------------------------------------------------------------------


class Noop(drover.JobArgs, kind="kernel_noop"):
    n: int = 0


def test_a_started_client_draining_with_no_feature_runs_no_features_statement(
    stats_db: str,
) -> None:
    workers = drover.Workers()

    @workers.register
    def noop(job: drover.Job[Noop]) -> None:
        return None

    client = drover.Client(stats_db, drover.Config(workers=workers, poll_interval=0.05))
    try:
        client.insert_many([Noop(n=i) for i in range(JOBS)])
        _reset(stats_db)
        client.start()
        deadline = time.monotonic() + 60
        while _states(stats_db).get("completed", 0) < JOBS:
            assert time.monotonic() < deadline, _states(stats_db)
            time.sleep(0.05)
        client.stop(timeout=10)
    finally:
        client.close()
    calls = _jobs_statements(stats_db)
    assert calls["job_claim"] >= 1
    # Whatever else a client runs (renewals, stats, the registry), no feature's
    # claim or completion ran.
    assert not calls.keys() & FEATURE_STATEMENTS, calls
