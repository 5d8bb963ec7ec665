"""A corpus of hostile inputs, driven through drover's public API and its CLI.

Every case is data (:class:`Case` for API calls, :class:`CliCase` for the
``drover`` command) and runs against a fresh migrated database. For each one
the test checks:

1. the outcome: the exact drover exception class (always a
   :class:`drover.DroverError`, never a bare psycopg, pydantic or builtin
   error) and a message naming what was wrong, or, where drover accepts the
   input, that it was stored verbatim through bind parameters;
2. what was written: the row count of every drover table before and after
   (a refused call must leave ``drover_jobs`` identical, id sequence included),
   and that the tables still exist;
3. for the CLI: the exit code (0 ok, 1 runtime or refused, 2 usage), no
   traceback, nothing on stdout when refused, and never the connection password.

The first run of this corpus found 12 defects (25 cases); each was fixed in
drover and its cases keep ``fixed=`` naming what they caught, as regression
tests (:func:`defects` lists them). ``CORPUS_SIZE`` counts the cases;
:func:`corpus_counts` groups them by category.

This module deliberately imports neither ``clihelp`` nor ``jobdb`` so that
``mypy --strict`` can check it on its own.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
import types
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any, cast

import psycopg
import pytest
from jobdb import idle_workers
from psycopg import pq, sql
from typer.testing import CliRunner

import drover
import drover.cli

Conn = psycopg.Connection[tuple[Any, ...]]

SENTINEL = "s3cr3t-sentinel"
"""A password that must never appear in an exception (or its chain) or in CLI output."""

TABLES = ("drover_jobs", "drover_queues", "drover_periodic_ticks", "drover_periodic_leader")

# Hostile strings for queue and kind names.
SQLI = "x'); drop table drover_jobs;--"
OR_TRUE = "a' OR '1'='1"
QUOTE = '"'
NEWLINE = "line1\nline2"
NUL = "a\x00b"
TEN_KB = "q" * 10_000
RTL = "abc\u202edcba"
PLACEHOLDERS = "%s{}%(x)s{0}"
SCRIPT = "<script>alert(1)</script>"
SURROGATE = "\ud800"

UNREACHABLE = f"postgresql://drover:{SENTINEL}@127.0.0.1:1/x"
"""A closed port: connecting must fail at once, without the password."""

YEAR_10000_UTC = datetime.max.replace(tzinfo=timezone(timedelta(hours=-14)))
"""9999-12-31 23:59:59.999999 at UTC-14, i.e. after year 9999 in UTC."""

DEFAULT_BUDGET = 20.0
"""Seconds any one case may take: a hang is a defect too (the margin is for a busy machine)."""
FAST_BUDGET = 15.0
"""A case that must fail fast: half the pool's 30 s timeout, which it must not wait out."""
PROCESS_BUDGET = 25.0
"""A case run as a real process: an interpreter's start-up on a busy machine takes seconds,
and the pool's 30 s timeout is still not waited out."""


# --- job args classes -----------------------------------------------------------------------------


class AnyArgs(drover.JobArgs, kind="hostile_any"):
    """Args with an untyped field: pydantic serialises whatever it is given."""

    value: Any = None


class FloatArgs(drover.JobArgs, kind="hostile_float"):
    """Args with a float field, as a worker would decode them."""

    x: float = 0.0


class Nothing(drover.JobArgs, kind="hostile_nothing"):
    """Args without fields."""


def _args_class(**keywords: Any) -> type[drover.JobArgs]:
    """``class HostileArgs(drover.JobArgs, **keywords)``, defined at call time."""
    return types.new_class("HostileArgs", (drover.JobArgs,), dict(keywords))


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def _nested_json(depth: int) -> str:
    return "[" * depth + "]" * depth


def _circular() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


OWN: Any = object()
"""``Env.client()`` / ``Env.inspector()`` without a URL: the case's own database."""

# --- the environment each case runs in -----------------------------------------------------------


@dataclass
class Env:
    """The case's database and the drover objects it opened (closed afterwards)."""

    db_url: str
    pg_server: str
    conn: Conn
    poll: Callable[..., Any]
    monkeypatch: pytest.MonkeyPatch
    _close: list[Callable[[], None]] = field(default_factory=list)

    def client(self, url: Any = OWN, config: drover.Config | None = None) -> drover.Client:
        """A Client on ``url`` (default: the case's database), closed after the case."""
        made = drover.Client(self.db_url if url is OWN else url, config)
        self._close.append(made.close)
        return made

    def inspector(self, url: Any = OWN) -> drover.Inspector:
        made = drover.Inspector(self.db_url if url is OWN else url)
        self._close.append(made.close)
        return made

    def refusing_url(self) -> str:
        """The test server, asked for a database that does not exist, with a password."""
        return psycopg.conninfo.make_conninfo(
            self.pg_server, dbname="drover_no_such_db", password=SENTINEL
        )

    def isolate_libpq(self) -> None:
        """Point libpq's fallbacks (used for what a conninfo leaves out) at a closed port.

        An empty conninfo means "libpq defaults": without this a defect could
        reach a real server on the default socket.
        """
        for name in ("PGSERVICE", "PGSERVICEFILE", "PGPASSFILE", "PGDATABASE", "PGUSER"):
            self.monkeypatch.delenv(name, raising=False)
        self.monkeypatch.setenv("PGHOST", "127.0.0.1")
        self.monkeypatch.setenv("PGPORT", "1")
        self.monkeypatch.setenv("PGCONNECT_TIMEOUT", "2")

    def put(self, state: str = "available", *, kind: str = "seed", queue: str = "default") -> int:
        """Plant a job with SQL (setup, before the snapshot); return its id."""
        row = self.conn.execute(
            "INSERT INTO drover_jobs (kind, queue, state, finalized_at) "
            "VALUES (%s, %s, %s::drover_job_state, "
            "  CASE WHEN %s::text IN ('completed', 'cancelled', 'dead') THEN now() END) "
            "RETURNING id",
            (kind, queue, state, state),
        ).fetchone()
        assert row is not None
        return int(row[0])

    def close(self) -> None:
        for close in reversed(self._close):
            close()


@pytest.fixture
def env(
    db_url: str,
    pg_server: str,
    conn: Conn,
    poll: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Env]:
    # The CLI's --app / APP loading inserts the working directory into sys.path.
    monkeypatch.setattr(sys, "path", list(sys.path))
    made = Env(db_url=db_url, pg_server=pg_server, conn=conn, poll=poll, monkeypatch=monkeypatch)
    try:
        yield made
    finally:
        made.close()


# --- what a case is -------------------------------------------------------------------------------


Check = Callable[[Env, Any], None]


@dataclass(frozen=True)
class Case:
    """One hostile call through the Python API.

    ``raises`` is the exact exception class expected (``None``: the input is
    accepted and ``check`` says how it was stored); ``says`` are substrings the
    message must contain; ``writes`` the rows each table must gain (refused
    calls: none).
    """

    id: str
    category: str
    call: Callable[[Env], Any]
    raises: type[Exception] | None
    says: tuple[str, ...] = ()
    writes: Mapping[str, int] = field(default_factory=dict)
    check: Check | None = None
    setup: Callable[[Env], Any] | None = None
    fixed: str | None = None
    """The defect this case found (fixed in issue 16); kept as a regression test."""
    budget: float = DEFAULT_BUDGET


@dataclass(frozen=True)
class CliCase:
    """One hostile ``drover`` command line.

    ``argv`` gets ``--database <the test database>`` prepended unless
    ``database`` is False. ``exit`` is the expected exit code; ``says`` are
    substrings of stderr (refused) or stdout (accepted). ``own_message`` is
    False where the refusal is typer's own usage text rather than drover's
    one ``drover: ...`` line. ``process`` runs a real ``python -m drover``.
    """

    id: str
    category: str
    argv: Callable[[Env], list[str]]
    exit: int
    says: tuple[str, ...] = ()
    writes: Mapping[str, int] = field(default_factory=dict)
    check: Check | None = None
    setup: Callable[[Env], Any] | None = None
    fixed: str | None = None
    """The defect this case found (fixed in issue 16); kept as a regression test."""
    database: bool = True
    own_message: bool = True
    process: bool = False
    budget: float = DEFAULT_BUDGET


# --- checks for accepted inputs -------------------------------------------------------------------


def _column(env: Env, table: str, column: str) -> list[Any]:
    query = sql.SQL("SELECT {} FROM {} ORDER BY 1").format(
        sql.Identifier(column), sql.Identifier(table)
    )
    return [row[0] for row in env.conn.execute(query).fetchall()]


def stored(column: str, value: Any, table: str = "drover_jobs") -> Check:
    """The table holds exactly one row, whose ``column`` is ``value`` (verbatim)."""

    def check(env: Env, outcome: Any) -> None:
        assert _column(env, table, column) == [value]

    return check


def stored_args(value: Any) -> Check:
    """The one job's args are ``value`` in the table and as ``get_job`` reads them back."""

    def check(env: Env, outcome: Any) -> None:
        assert _column(env, "drover_jobs", "args") == [value]
        (job_id,) = _column(env, "drover_jobs", "id")
        assert env.client().get_job(job_id).args == value

    return check


def returns(expected: Any) -> Check:
    def check(env: Env, outcome: Any) -> None:
        assert outcome == expected

    return check


def stored_kind_and_queue(kind: str, queue: str) -> Check:
    def check(env: Env, outcome: Any) -> None:
        row = env.conn.execute("SELECT kind, queue FROM drover_jobs").fetchall()
        assert row == [(kind, queue)]

    return check


def registers_hostile_nothing(env: Env, made: Any) -> None:
    assert isinstance(made, drover.Config)
    assert made.workers.kinds() == ["hostile_nothing"]


def lists_nothing_json(env: Env, stdout: Any) -> None:
    assert json.loads(stdout) == []


def config_keeps_queue(name: str) -> Check:
    def check(env: Env, outcome: Any) -> None:
        assert isinstance(outcome, drover.Config)
        assert list(outcome.queues) == [name]

    return check


# --- calls --------------------------------------------------------------------------------------


def insert(args: Callable[[], drover.JobArgs], **opts: Any) -> Callable[[Env], Any]:
    """``client.insert(args(), InsertOpts(**opts))``; args are built inside the call."""

    def call(env: Env) -> Any:
        return env.client().insert(args(), drover.InsertOpts(**opts) if opts else None)

    return call


def enqueue(kind: Any, args_json: Any) -> Callable[[Env], Any]:
    def call(env: Env) -> Any:
        return env.inspector().enqueue(kind, args_json)

    return call


def config(**fields: Any) -> Callable[[Env], Any]:
    def call(env: Env) -> Any:
        return drover.Config(**fields)

    return call


def schedule(spec: Any, tz: Any = "UTC") -> Callable[[Env], Any]:
    def call(env: Env) -> Any:
        return drover.Schedule(spec, tz)

    return call


def insert_tx_in_transaction(args: Callable[[], drover.JobArgs]) -> Callable[[Env], Any]:
    """``insert_tx`` on an open transaction, which must stay usable after a refusal."""

    def call(env: Env) -> Any:
        with psycopg.connect(env.db_url) as tx_conn:
            try:
                return env.client().insert_tx(tx_conn, args())
            finally:
                status = tx_conn.info.transaction_status
                assert status != pq.TransactionStatus.INERROR, "the caller's transaction broke"
                tx_conn.rollback()

    return call


def add_worker_with_timeout(timeout: object) -> Callable[[Env], Any]:
    """Register a worker whose ``timeout`` is ``timeout`` and build a Config with it."""

    def call(env: Env) -> Any:
        class TimedWorker(drover.Worker[Nothing]):
            def work(self, job: drover.Job[Nothing]) -> None:
                pass

        TimedWorker.timeout = cast(Any, timeout)
        workers = drover.Workers()
        workers.add(TimedWorker())
        return drover.Config(workers=workers)

    return call


def migrate(source: Any, *, isolate: bool = False) -> Callable[[Env], Any]:
    def call(env: Env) -> Any:
        if isolate:
            env.isolate_libpq()
        return drover.migrate(source)

    return call


def fire_hostile_periodic(env: Env) -> Any:
    """Start a client whose periodic job has a SQL-ish id; wait for its first tick."""
    entry = drover.PeriodicJob(
        SQLI,
        "@every 1h",
        Nothing(),
        opts=drover.InsertOpts(queue="hostile_unworked"),
        run_on_start=True,
    )
    client = env.client(
        config=drover.Config(
            workers=idle_workers(),
            plugins=[drover.plugins.Periodic(jobs=[entry])],
            poll_interval=0.05,
            notify=False,
        )
    )
    client.start()
    try:
        env.poll(
            lambda: (
                _count(env.conn, "drover_jobs") == 1
                and _count(env.conn, "drover_periodic_ticks") == 1
            ),
            message="the hostile periodic job's first tick",
        )
    finally:
        client.stop(5)


def check_periodic_tick(env: Env, outcome: Any) -> None:
    assert _column(env, "drover_periodic_ticks", "id") == [SQLI]
    (key,) = _column(env, "drover_jobs", "unique_key")
    assert key.startswith(SQLI + "/")


def argv(*items: str) -> Callable[[Env], list[str]]:
    def build(env: Env) -> list[str]:
        return list(items)

    return build


# --- the corpus: Python API -----------------------------------------------------------------------

ONE_JOB = {"drover_jobs": 1}

DEFECT_NAN = (
    "non-finite floats in JobArgs are silently stored as JSON null (pydantic's "
    "ser_json_inf_nan='null'); _encode._dump/encode_batch must refuse them"
)
DEFECT_CLASS_KEYWORDS = (
    "JobArgs.__init_subclass__ raises a bare TypeError for a bad kind/queue/max_attempts, "
    "not a DroverError"
)
DEFECT_DEEP_JSON = (
    "Inspector.validate_enqueue lets json.loads' RecursionError escape for deeply nested args"
)
DEFECT_EVERY_OVERFLOW = (
    "Schedule '@every' does not bound the period: OverflowError at parse, or accepted and "
    "OverflowError from next()"
)
DEFECT_NEXT_OVERFLOW = "Schedule.next(after) raises OverflowError near datetime.max"
DEFECT_HUGE_DURATION = (
    "Config accepts durations above threading.TIMEOUT_MAX; the services' Event.wait raises "
    "OverflowError and the thread dies at start()"
)
DEFECT_SURROGATE_QUEUE = (
    "Config.queues accepts a lone-surrogate queue name; the fetcher fails every claim "
    "with UnicodeEncodeError"
)
DEFECT_WORKER_TIMEOUT = (
    "Worker.timeout is not validated at registration; every execution then fails with ConfigError"
)
DEFECT_YEAR_10000 = (
    "a scheduled_at past year 9999 in UTC is written, then reading the row back fails "
    "(insert raises DatabaseError after the commit; later reads of the table fail)"
)
DEFECT_NUL_DSN = "a conninfo holding NUL is silently truncated at the NUL by libpq"
DEFECT_MIGRATE_DSN = (
    "migrate/migration_status skip check_conninfo: empty means libpq defaults, "
    "a bad URL is a DatabaseError that may quote the password, None is a bare TypeError"
)
DEFECT_APP_FACTORY = (
    "the CLI calls an --app/APP factory and lets its non-drover exception escape as a traceback"
)

API_CASES: list[Case] = [
    # -- args JSON edge cases -------------------------------------------------------------------
    Case(
        "float-nan",
        "args-json",
        insert(lambda: FloatArgs(x=math.nan)),
        drover.InvalidJobArgs,
        says=("hostile_float",),
        fixed=DEFECT_NAN,
    ),
    Case(
        "float-inf",
        "args-json",
        insert(lambda: FloatArgs(x=math.inf)),
        drover.InvalidJobArgs,
        says=("hostile_float",),
        fixed=DEFECT_NAN,
    ),
    Case(
        "float-minus-inf-untyped",
        "args-json",
        insert(lambda: AnyArgs(value=-math.inf)),
        drover.InvalidJobArgs,
        says=("hostile_any",),
        fixed=DEFECT_NAN,
    ),
    Case(
        "nul-in-string",
        "args-json",
        insert(lambda: AnyArgs(value="before\x00after")),
        drover.InvalidJobArgs,
        says=("hostile_any", "NUL"),
    ),
    Case(
        "nul-in-dict-key",
        "args-json",
        insert(lambda: AnyArgs(value={"k\x00": 1})),
        drover.InvalidJobArgs,
        says=("hostile_any", "NUL"),
    ),
    Case(
        "lone-surrogate",
        "args-json",
        insert(lambda: AnyArgs(value=SURROGATE)),
        drover.InvalidJobArgs,
        says=("hostile_any", "surrogates not allowed"),
    ),
    Case(
        "lone-surrogate-in-dict-key",
        "args-json",
        insert(lambda: AnyArgs(value={SURROGATE: 1})),
        drover.InvalidJobArgs,
        says=("hostile_any", "surrogates not allowed"),
    ),
    Case(
        "nesting-10000-deep",
        "args-json",
        insert(lambda: AnyArgs(value=_nested(10_000))),
        drover.InvalidJobArgs,
        says=("hostile_any", "depth"),
    ),
    Case(
        "nesting-200-deep-round-trips",
        "args-json",
        insert(lambda: AnyArgs(value=_nested(200))),
        None,
        writes=ONE_JOB,
        check=stored_args({"value": _nested(200)}),
    ),
    Case(
        "bytes-not-utf8",
        "args-json",
        insert(lambda: AnyArgs(value=b"\xff\xfe")),
        drover.InvalidJobArgs,
        says=("hostile_any", "utf-8"),
    ),
    Case(
        "bytes-ascii-stored-as-text",
        "args-json",
        insert(lambda: AnyArgs(value=b"abc")),
        None,
        writes=ONE_JOB,
        check=stored_args({"value": "abc"}),
    ),
    Case(
        "set-stored-as-list",
        "args-json",
        insert(lambda: AnyArgs(value={3})),
        None,
        writes=ONE_JOB,
        check=stored_args({"value": [3]}),
    ),
    Case(
        "naive-datetime-untyped-stored-as-text",
        "args-json",
        insert(lambda: AnyArgs(value=datetime(2030, 1, 2, 3, 4, 5))),
        None,
        writes=ONE_JOB,
        check=stored_args({"value": "2030-01-02T03:04:05"}),
    ),
    Case(
        "unserialisable-object",
        "args-json",
        insert(lambda: AnyArgs(value=object())),
        drover.InvalidJobArgs,
        says=("hostile_any", "Unable to serialize unknown type"),
    ),
    Case(
        "circular-list",
        "args-json",
        insert(lambda: AnyArgs(value=_circular())),
        drover.InvalidJobArgs,
        says=("hostile_any", "Circular reference"),
    ),
    Case(
        "huge-2mib-round-trips-no-api-limit",
        "args-json",
        insert(lambda: AnyArgs(value="x" * (2 << 20))),
        None,
        writes=ONE_JOB,
        check=stored_args({"value": "x" * (2 << 20)}),
    ),
    Case(
        "enqueue-over-1mib",
        "args-json",
        enqueue("hostile_any", json.dumps({"value": "x" * (1 << 20)})),
        drover.InvalidJobArgs,
        says=("larger than 1048576 bytes",),
    ),
    Case(
        "plain-dict-not-jobargs",
        "args-json",
        lambda env: env.client().insert(cast(Any, {"to": "ada"})),
        drover.InvalidJobArgs,
        says=("must be a drover.JobArgs instance, not dict",),
    ),
    Case(
        "insert-many-nul-in-second-item",
        "args-json",
        lambda env: env.client().insert_many([Nothing(), AnyArgs(value="\x00")]),
        drover.InvalidJobArgs,
        says=("item 1", "NUL"),
    ),
    Case(
        "insert-many-a-string",
        "args-json",
        lambda env: env.client().insert_many(cast(Any, "not a batch")),
        drover.InvalidJobArgs,
        says=("insert_many needs a list", "not str"),
    ),
    Case(
        "insert-many-3-tuple",
        "args-json",
        lambda env: env.client().insert_many([cast(Any, (Nothing(), None, 1))]),
        drover.InvalidJobArgs,
        says=("item 0", "3-tuple"),
    ),
    Case(
        "insert-tx-nul-keeps-transaction-usable",
        "args-json",
        insert_tx_in_transaction(lambda: AnyArgs(value="\x00")),
        drover.InvalidJobArgs,
        says=("NUL",),
    ),
    Case(
        "enqueue-nesting-10000-deep",
        "args-json",
        enqueue("hostile_any", _nested_json(10_000)),
        drover.InvalidJobArgs,
        says=("args",),
        fixed=DEFECT_DEEP_JSON,
    ),
    Case(
        "enqueue-nan-literal",
        "args-json",
        enqueue("hostile_any", '{"value": NaN}'),
        drover.InvalidJobArgs,
        says=("NaN is not valid JSON",),
    ),
    Case(
        "enqueue-invalid-json",
        "args-json",
        enqueue("hostile_any", "{'single': 'quotes'}"),
        drover.InvalidJobArgs,
        says=("args must be valid JSON",),
    ),
    Case(
        "enqueue-bytes-not-text",
        "args-json",
        enqueue("hostile_any", b"{}"),
        drover.InvalidJobArgs,
        says=("args must be a JSON string, not bytes",),
    ),
    Case(
        "enqueue-non-dict-stored-verbatim",
        "args-json",
        enqueue("hostile_any", "[1, 2]"),
        None,
        writes=ONE_JOB,
        check=stored("args", [1, 2]),
    ),
    # -- wrong types ------------------------------------------------------------------------------
    Case(
        "class-kind-int",
        "wrong-types",
        lambda env: _args_class(kind=123),
        drover.InvalidJobArgs,
        says=("kind",),
        fixed=DEFECT_CLASS_KEYWORDS,
    ),
    Case(
        "class-queue-int",
        "wrong-types",
        lambda env: _args_class(kind="hostile_class", queue=5),
        drover.InvalidJobArgs,
        says=("queue",),
        fixed=DEFECT_CLASS_KEYWORDS,
    ),
    Case(
        "enqueue-kind-int",
        "wrong-types",
        enqueue(123, "{}"),
        drover.InvalidJobArgs,
        says=("kind must be a str, not int",),
    ),
    Case(
        "queue-int",
        "wrong-types",
        insert(Nothing, queue=7),
        drover.InvalidInsertOpts,
        says=("InsertOpts.queue must be a str, not int",),
    ),
    Case(
        "max-attempts-0",
        "wrong-types",
        insert(Nothing, max_attempts=0),
        drover.InvalidInsertOpts,
        says=("max_attempts must be between 1 and 2147483647, not 0",),
    ),
    Case(
        "max-attempts-minus-1",
        "wrong-types",
        insert(Nothing, max_attempts=-1),
        drover.InvalidInsertOpts,
        says=("not -1",),
    ),
    Case(
        "max-attempts-2-pow-31",
        "wrong-types",
        insert(Nothing, max_attempts=2**31),
        drover.InvalidInsertOpts,
        says=("not 2147483648",),
    ),
    Case(
        "max-attempts-true",
        "wrong-types",
        insert(Nothing, max_attempts=True),
        drover.InvalidInsertOpts,
        says=("max_attempts must be an int, not bool",),
    ),
    Case(
        "max-attempts-str",
        "wrong-types",
        insert(Nothing, max_attempts="3"),
        drover.InvalidInsertOpts,
        says=("max_attempts must be an int, not str",),
    ),
    Case(
        "scheduled-at-naive",
        "wrong-types",
        insert(Nothing, scheduled_at=datetime(2030, 1, 1)),
        drover.InvalidInsertOpts,
        says=("scheduled_at must be timezone-aware",),
    ),
    Case(
        "scheduled-at-str",
        "wrong-types",
        insert(Nothing, scheduled_at="2030-01-01T00:00:00Z"),
        drover.InvalidInsertOpts,
        says=("scheduled_at must be a datetime, not str",),
    ),
    Case(
        "scheduled-at-date",
        "wrong-types",
        insert(Nothing, scheduled_at=date(2030, 1, 1)),
        drover.InvalidInsertOpts,
        says=("scheduled_at must be a datetime, not date",),
    ),
    Case(
        "scheduled-at-after-year-9999-utc",
        "wrong-types",
        insert(Nothing, scheduled_at=YEAR_10000_UTC),
        drover.InvalidInsertOpts,
        says=("scheduled_at",),
        fixed=DEFECT_YEAR_10000,
    ),
    Case(
        "insert-many-scheduled-at-after-year-9999-utc",
        "wrong-types",
        lambda env: env.client().insert_many(
            [(Nothing(), drover.InsertOpts(scheduled_at=YEAR_10000_UTC))]
        ),
        drover.InvalidInsertOpts,
        says=("scheduled_at",),
        fixed=DEFECT_YEAR_10000,
    ),
    Case(
        "scheduled-at-last-day-of-9999-utc",
        "wrong-types",
        # Valid in UTC, but read back in a session time zone east of UTC it is year 10000.
        insert(Nothing, scheduled_at=datetime(9999, 12, 31, 12, tzinfo=UTC)),
        drover.InvalidInsertOpts,
        says=("scheduled_at", "outside the range"),
    ),
    Case(
        "scheduled-at-year-1",
        "wrong-types",
        insert(Nothing, scheduled_at=datetime(1, 1, 1, 6, tzinfo=UTC)),
        drover.InvalidInsertOpts,
        says=("scheduled_at", "outside the range"),
    ),
    Case(
        "unique-key-1025-chars",
        "wrong-types",
        insert(Nothing, unique_key="k" * 1025),
        drover.InvalidInsertOpts,
        says=("unique_key is 1025 characters long; the maximum is 1024",),
    ),
    Case(
        "unique-key-nul",
        "wrong-types",
        insert(Nothing, unique_key="k\x00"),
        drover.InvalidInsertOpts,
        says=("unique_key must not contain NUL",),
    ),
    Case(
        "unique-key-int",
        "wrong-types",
        insert(Nothing, unique_key=42),
        drover.InvalidInsertOpts,
        says=("unique_key must be a str, not int",),
    ),
    Case(
        "opts-a-dict",
        "wrong-types",
        lambda env: env.client().insert(Nothing(), cast(Any, {"queue": "q"})),
        drover.InvalidJobArgs,
        says=("insert options must be a drover.InsertOpts, not dict",),
    ),
    Case(
        "insert-tx-conn-none",
        "wrong-types",
        lambda env: env.client().insert_tx(None, Nothing()),
        drover.UnsupportedConnection,
        says=("insert_tx needs a psycopg Connection", "NoneType"),
    ),
    Case(
        "insert-tx-conn-autocommit",
        "wrong-types",
        lambda env: env.client().insert_tx(env.conn, Nothing()),
        drover.NotInTransaction,
        says=("autocommit",),
    ),
    Case(
        "get-job-sql-string",
        "wrong-types",
        lambda env: env.client().get_job(cast(Any, "1; DROP TABLE drover_jobs")),
        drover.InvalidArgument,
        says=("job id must be an int, not str",),
    ),
    Case(
        "config-concurrency-0",
        "wrong-types",
        config(concurrency=0),
        drover.ConfigError,
        says=("Config.concurrency must be at least 1, not 0",),
    ),
    Case(
        "config-positional",
        "wrong-types",
        lambda env: cast(Any, drover.Config)(1),
        drover.ConfigError,
        says=("keyword arguments only",),
    ),
    # -- SQL-ish and odd names ---------------------------------------------------------------------
    Case(
        "queue-sql-injection-stored-verbatim",
        "names",
        insert(Nothing, queue=SQLI),
        None,
        writes=ONE_JOB,
        check=stored("queue", SQLI),
    ),
    Case(
        "queue-double-quote-stored-verbatim",
        "names",
        insert(Nothing, queue=QUOTE),
        None,
        writes=ONE_JOB,
        check=stored("queue", QUOTE),
    ),
    Case(
        "queue-newline-stored-verbatim",
        "names",
        insert(Nothing, queue=NEWLINE),
        None,
        writes=ONE_JOB,
        check=stored("queue", NEWLINE),
    ),
    Case(
        "queue-rtl-override-stored-verbatim",
        "names",
        insert(Nothing, queue=RTL),
        None,
        writes=ONE_JOB,
        check=stored("queue", RTL),
    ),
    Case(
        "queue-placeholders-stored-verbatim",
        "names",
        insert(Nothing, queue=PLACEHOLDERS),
        None,
        writes=ONE_JOB,
        check=stored("queue", PLACEHOLDERS),
    ),
    Case(
        "queue-script-tag-stored-verbatim",
        "names",
        insert(Nothing, queue=SCRIPT),
        None,
        writes=ONE_JOB,
        check=stored("queue", SCRIPT),
    ),
    Case(
        "queue-nul",
        "names",
        insert(Nothing, queue=NUL),
        drover.InvalidInsertOpts,
        says=("InsertOpts.queue must not contain NUL",),
    ),
    Case(
        "queue-10kb",
        "names",
        insert(Nothing, queue=TEN_KB),
        drover.InvalidInsertOpts,
        says=("InsertOpts.queue is 10000 characters long; the maximum is 128",),
    ),
    Case(
        "queue-lone-surrogate",
        "names",
        insert(Nothing, queue=SURROGATE),
        drover.InvalidInsertOpts,
        says=("InsertOpts.queue", "lone surrogate"),
    ),
    Case(
        "kind-sql-injection-enqueued-verbatim",
        "names",
        enqueue(SQLI, "{}"),
        None,
        writes=ONE_JOB,
        check=stored("kind", SQLI),
    ),
    Case(
        "kind-placeholders-in-class-inserted-verbatim",
        "names",
        lambda env: env.client().insert(_args_class(kind=PLACEHOLDERS)()),
        None,
        writes=ONE_JOB,
        check=stored("kind", PLACEHOLDERS),
    ),
    Case(
        "kind-10kb",
        "names",
        enqueue(TEN_KB, "{}"),
        drover.InvalidJobArgs,
        says=("kind is 10000 characters long; the maximum is 255",),
    ),
    Case(
        "kind-nul",
        "names",
        enqueue(NUL, "{}"),
        drover.InvalidJobArgs,
        says=("kind must not contain NUL",),
    ),
    Case(
        "pause-queue-sql-injection-stored-verbatim",
        "names",
        lambda env: env.client().pause_queue(SQLI),
        None,
        writes={"drover_queues": 1},
        check=stored("name", SQLI, table="drover_queues"),
    ),
    Case(
        "pause-queue-nul",
        "names",
        lambda env: env.client().pause_queue(NUL),
        drover.InvalidInsertOpts,
        says=("queue name must not contain NUL",),
    ),
    Case(
        "list-jobs-queue-or-true-matches-nothing",
        "names",
        lambda env: env.inspector().list_jobs(queue=OR_TRUE),
        None,
        setup=lambda env: env.put(),
        check=returns([]),
    ),
    Case(
        "list-jobs-kind-or-true-matches-nothing",
        "names",
        lambda env: env.inspector().list_jobs(kind="x' OR 1=1 --"),
        None,
        setup=lambda env: env.put(),
        check=returns([]),
    ),
    Case(
        "retry-dead-sql-kind-and-queue-change-nothing",
        "names",
        lambda env: env.inspector().retry_dead(SQLI, queue=OR_TRUE),
        None,
        setup=lambda env: env.put("dead"),
        check=returns(0),
    ),
    Case(
        "config-queue-sql-injection-kept-verbatim",
        "names",
        config(queues={SQLI: 1}),
        None,
        check=config_keeps_queue(SQLI),
    ),
    Case(
        "config-queue-10kb",
        "names",
        config(queues={TEN_KB: 1}),
        drover.ConfigError,
        says=("Config.queues",),
    ),
    Case(
        "config-queue-lone-surrogate",
        "names",
        config(queues={SURROGATE: 1}),
        drover.ConfigError,
        says=("Config.queues",),
        fixed=DEFECT_SURROGATE_QUEUE,
    ),
    Case(
        "periodic-id-sql-injection-ticks-verbatim",
        "names",
        fire_hostile_periodic,
        None,
        writes={"drover_jobs": 1, "drover_periodic_ticks": 1, "drover_periodic_leader": 1},
        check=check_periodic_tick,
    ),
    # -- durations ------------------------------------------------------------------------------
    Case(
        "lease-negative",
        "durations",
        config(lease_duration=-1),
        drover.ConfigError,
        says=("Config.lease_duration must be at least 1 ms, not -1s",),
    ),
    Case(
        "lease-zero",
        "durations",
        config(lease_duration=0),
        drover.ConfigError,
        says=("Config.lease_duration must be at least 1 ms, not 0s",),
    ),
    Case(
        "lease-negative-timedelta",
        "durations",
        config(lease_duration=timedelta(days=-1)),
        drover.ConfigError,
        says=("Config.lease_duration must be at least 1 ms",),
    ),
    Case(
        "poll-interval-zero",
        "durations",
        config(poll_interval=0),
        drover.ConfigError,
        says=("Config.poll_interval must be positive, not 0s",),
    ),
    Case(
        "poll-interval-negative",
        "durations",
        config(poll_interval=-0.5),
        drover.ConfigError,
        says=("Config.poll_interval must be positive, not -0.5s",),
    ),
    Case(
        "heartbeat-equal-to-lease",
        "durations",
        config(lease_duration=60, heartbeat_interval=60),
        drover.ConfigError,
        says=("Config.heartbeat_interval must be positive and shorter than the lease",),
    ),
    Case(
        "heartbeat-nan",
        "durations",
        config(heartbeat_interval=math.nan),
        drover.ConfigError,
        says=("Config.heartbeat_interval must be a finite number of seconds, not nan",),
    ),
    Case(
        "rescue-interval-str",
        "durations",
        config(rescue_interval="30"),
        drover.ConfigError,
        says=("Config.rescue_interval must be a timedelta or a number of seconds, not str",),
    ),
    Case(
        "stats-interval-bool",
        "durations",
        lambda env: drover.plugins.QueueStats(interval=True),
        drover.ConfigError,
        says=("plugin 'refresher': interval", "not bool"),
    ),
    Case(
        "prune-interval-inf",
        "durations",
        lambda env: drover.plugins.Pruner(interval=math.inf),
        drover.ConfigError,
        says=("plugin 'pruner': interval must be a finite number of seconds, not inf",),
    ),
    Case(
        "shutdown-timeout-negative",
        "durations",
        config(shutdown_timeout=-1),
        drover.ConfigError,
        says=("Config.shutdown_timeout must not be negative",),
    ),
    Case(
        "poll-interval-1e300",
        "durations",
        config(poll_interval=1e300),
        drover.ConfigError,
        says=("Config.poll_interval is too large",),
    ),
    Case(
        "poll-interval-timedelta-max",
        "durations",
        config(poll_interval=timedelta.max),
        drover.ConfigError,
        says=("Config.poll_interval",),
        fixed=DEFECT_HUGE_DURATION,
    ),
    Case(
        "lease-timedelta-max",
        "durations",
        config(lease_duration=timedelta.max),
        drover.ConfigError,
        says=("Config.lease_duration",),
        fixed=DEFECT_HUGE_DURATION,
    ),
    Case(
        "stats-interval-timedelta-max",
        "durations",
        lambda env: drover.plugins.QueueStats(interval=timedelta.max),
        drover.ConfigError,
        says=("plugin 'refresher': interval must be at most 3650 days",),
        fixed=DEFECT_HUGE_DURATION,
    ),
    Case(
        "worker-timeout-str",
        "durations",
        add_worker_with_timeout("30"),
        drover.ConfigError,
        says=("timeout",),
        fixed=DEFECT_WORKER_TIMEOUT,
    ),
    Case(
        "worker-timeout-nan",
        "durations",
        add_worker_with_timeout(math.nan),
        drover.ConfigError,
        says=("timeout",),
        fixed=DEFECT_WORKER_TIMEOUT,
    ),
    Case(
        "worker-timeout-negative-means-no-deadline",
        "durations",
        add_worker_with_timeout(-5),
        None,
        check=registers_hostile_nothing,
    ),
    Case(
        "timeout-middleware-nan",
        "durations",
        lambda env: drover.Timeout(math.nan),
        drover.ConfigError,
        says=("Timeout must be a finite number of seconds, not nan",),
    ),
    Case(
        "timeout-middleware-str",
        "durations",
        lambda env: drover.Timeout(cast(Any, "5")),
        drover.ConfigError,
        says=("Timeout must be a timedelta or a number of seconds, not str",),
    ),
    Case(
        "client-stop-timeout-str",
        "durations",
        lambda env: env.client().stop(cast(Any, "5")),
        drover.ConfigError,
        says=("timeout must be a timedelta or a number of seconds, not str",),
    ),
    Case(
        "snooze-nan",
        "durations",
        lambda env: drover.Snooze(math.nan),
        drover.InvalidArgument,
        says=("Snooze delay must be finite",),
    ),
    Case(
        "retention-negative",
        "durations",
        lambda env: drover.Retention(completed=-1),
        drover.ConfigError,
        says=("Retention.completed must not be negative",),
    ),
    # -- bad DSNs ----------------------------------------------------------------------------------
    Case(
        "client-unparsable-uri",
        "dsn",
        lambda env: env.client(f"postgresql://u:{SENTINEL}@h/x?bogus_parameter=1"),
        drover.InvalidArgument,
        says=("Client: the database URL cannot be parsed",),
    ),
    Case(
        "client-unparsable-key-value",
        "dsn",
        lambda env: env.client(f"host=h password={SENTINEL} broken"),
        drover.InvalidArgument,
        says=("Client: the database URL cannot be parsed",),
    ),
    Case(
        "client-bad-percent-encoding",
        "dsn",
        lambda env: env.client(f"postgresql://u:{SENTINEL}%ZZ@h/x"),
        drover.InvalidArgument,
        says=("Client: the database URL cannot be parsed",),
    ),
    Case(
        "client-sqlalchemy-driver-url",
        "dsn",
        lambda env: env.client(f"postgresql+psycopg://u:{SENTINEL}@h/x"),
        drover.InvalidArgument,
        says=("names a SQLAlchemy driver (postgresql+psycopg://)", "drop '+psycopg'"),
    ),
    Case(
        "client-empty",
        "dsn",
        lambda env: env.client(""),
        drover.InvalidArgument,
        says=("Client needs a conninfo string or URL; got an empty string",),
    ),
    Case(
        "client-none",
        "dsn",
        lambda env: env.client(None),
        drover.InvalidArgument,
        says=("Client needs a psycopg_pool.ConnectionPool or a conninfo string, not NoneType",),
    ),
    Case(
        "client-closed-port-fails-fast",
        "dsn",
        lambda env: env.client(UNREACHABLE).insert(Nothing()),
        drover.DatabaseError,
        says=("cannot connect to the database at 127.0.0.1:1/x",),
        budget=FAST_BUDGET,
    ),
    Case(
        "client-wrong-database",
        "dsn",
        lambda env: env.client(env.refusing_url()).insert(Nothing()),
        drover.DatabaseError,
        says=('database "drover_no_such_db" does not exist',),
        budget=FAST_BUDGET,
    ),
    Case(
        "inspector-closed-port-fails-fast",
        "dsn",
        lambda env: env.inspector(UNREACHABLE).stats(),
        drover.DatabaseError,
        says=("stats: cannot connect to the database at 127.0.0.1:1/x",),
        budget=FAST_BUDGET,
    ),
    Case(
        "inspector-unparsable-uri",
        "dsn",
        lambda env: env.inspector(f"postgresql://u:{SENTINEL}@h/x x=y=z"),
        drover.InvalidArgument,
        says=("Inspector: the database URL cannot be parsed",),
    ),
    Case(
        "client-nul-truncates-dsn",
        "dsn",
        lambda env: env.client(env.db_url + "\x00 dbname=drover_no_such_db").insert(Nothing()),
        drover.InvalidArgument,
        says=("Client",),
        fixed=DEFECT_NUL_DSN,
    ),
    Case(
        "migrate-empty-string",
        "dsn",
        migrate("", isolate=True),
        drover.InvalidArgument,
        says=("empty",),
        fixed=DEFECT_MIGRATE_DSN,
    ),
    Case(
        "migrate-bad-percent-encoding",
        "dsn",
        migrate(f"postgresql://u:{SENTINEL}%ZZ@h/x"),
        drover.InvalidArgument,
        says=("cannot be parsed",),
        fixed=DEFECT_MIGRATE_DSN,
    ),
    Case(
        "migration-status-none",
        "dsn",
        lambda env: drover.migration_status(cast(Any, None)),
        drover.InvalidArgument,
        says=("NoneType",),
        fixed=DEFECT_MIGRATE_DSN,
    ),
    # -- bad cron / schedule strings --------------------------------------------------------------
    Case(
        "cron-three-fields",
        "schedule",
        schedule("* * *"),
        drover.InvalidArgument,
        says=("invalid schedule '* * *': a cron schedule has 5 fields",),
    ),
    Case(
        "cron-minute-61",
        "schedule",
        schedule("61 * * * *"),
        drover.InvalidArgument,
        says=("invalid schedule '61 * * * *'", "minute"),
    ),
    Case(
        "cron-step-zero",
        "schedule",
        schedule("*/0 * * * *"),
        drover.InvalidArgument,
        says=("invalid schedule '*/0 * * * *'",),
    ),
    Case(
        "cron-february-31",
        "schedule",
        schedule("0 0 31 2 *"),
        drover.InvalidArgument,
        says=("invalid schedule '0 0 31 2 *'", "day-of-month"),
    ),
    Case(
        "every-0s",
        "schedule",
        schedule("@every 0s"),
        drover.InvalidArgument,
        says=("@every must be at least 1ms",),
    ),
    Case(
        "every-minus-5s",
        "schedule",
        schedule("@every -5s"),
        drover.InvalidArgument,
        says=("invalid schedule '@every -5s': @every takes one duration",),
    ),
    Case(
        "every-banana",
        "schedule",
        schedule("@every banana"),
        drover.InvalidArgument,
        says=("invalid schedule '@every banana'",),
    ),
    Case(
        "every-20-digit-hours",
        "schedule",
        schedule("@every 99999999999999999999h"),
        drover.InvalidArgument,
        says=("invalid schedule",),
        fixed=DEFECT_EVERY_OVERFLOW,
    ),
    Case(
        "every-longer-than-the-calendar",
        "schedule",
        lambda env: drover.Schedule("@every 9999999999h").next(datetime.now(UTC)),
        drover.InvalidArgument,
        says=("invalid schedule",),
        fixed=DEFECT_EVERY_OVERFLOW,
    ),
    Case(
        "empty-string",
        "schedule",
        schedule(""),
        drover.InvalidArgument,
        says=("invalid schedule ''",),
    ),
    Case(
        "none",
        "schedule",
        schedule(None),
        drover.InvalidArgument,
        says=("a schedule must be a str, not NoneType",),
    ),
    Case(
        "at-reboot",
        "schedule",
        schedule("@reboot"),
        drover.InvalidArgument,
        says=("unknown shorthand",),
    ),
    Case(
        "unknown-timezone-path",
        "schedule",
        schedule("* * * * *", "../../etc/passwd"),
        drover.InvalidArgument,
        says=("unknown timezone '../../etc/passwd'",),
    ),
    Case(
        "next-after-naive",
        "schedule",
        lambda env: drover.Schedule("@hourly").next(datetime(2030, 1, 1)),
        drover.InvalidArgument,
        says=("Schedule.next needs a timezone-aware datetime",),
    ),
    Case(
        "next-after-datetime-max-is-none",
        "schedule",
        lambda env: drover.Schedule("* * * * *").next(datetime.max.replace(tzinfo=UTC)),
        None,
        check=returns(None),
        fixed=DEFECT_NEXT_OVERFLOW,
    ),
    Case(
        "periodic-job-bad-cron",
        "schedule",
        lambda env: drover.PeriodicJob("nightly", "61 * * * *", Nothing()),
        drover.InvalidArgument,
        says=("PeriodicJob 'nightly': invalid schedule '61 * * * *'",),
    ),
    Case(
        "periodic-job-schedule-none",
        "schedule",
        lambda env: drover.PeriodicJob("nightly", cast(Any, None), Nothing()),
        drover.InvalidArgument,
        says=("PeriodicJob 'nightly'", "NoneType"),
    ),
    Case(
        "periodic-job-id-nul",
        "schedule",
        lambda env: drover.PeriodicJob("night\x00ly", "@daily", Nothing()),
        drover.InvalidArgument,
        says=("PeriodicJob id must not contain NUL",),
    ),
    Case(
        "periodic-jobs-duplicate-ids",
        "schedule",
        lambda env: drover.plugins.Periodic(
            jobs=[
                drover.PeriodicJob("same", "@daily", Nothing()),
                drover.PeriodicJob("same", "@hourly", Nothing()),
            ]
        ),
        drover.ConfigError,
        says=("plugin 'periodic': jobs[1] duplicates id 'same'",),
    ),
    # -- injection through the operator API -----------------------------------------------------
    Case(
        "inspector-retry-sql-id",
        "cli-injection",
        lambda env: env.inspector().retry_job(cast(Any, "1; DROP TABLE drover_jobs")),
        drover.InvalidArgument,
        setup=lambda env: env.put("dead"),
        says=("job id must be an int, not str",),
    ),
    Case(
        "inspector-list-state-comment",
        "cli-injection",
        lambda env: env.inspector().list_jobs(state="completed' --"),
        drover.InvalidArgument,
        says=('unknown job state "completed\' --"',),
    ),
]


# --- the corpus: the drover command line -------------------------------------------------------

CLI_CASES: list[CliCase] = [
    # -- args JSON --------------------------------------------------------------------------------
    CliCase(
        "enqueue-args-nan",
        "args-json",
        argv("enqueue", "--kind", "k", "--args", '{"a": NaN}'),
        2,
        says=("NaN is not valid JSON",),
    ),
    CliCase(
        "enqueue-args-infinity",
        "args-json",
        argv("enqueue", "--kind", "k", "--args", '{"a": -Infinity}'),
        2,
        says=("-Infinity is not valid JSON",),
    ),
    CliCase(
        "enqueue-args-nul-escape",
        "args-json",
        argv("enqueue", "--kind", "k", "--args", '{"k\\u0000": 1}'),
        2,
        says=("NUL",),
    ),
    CliCase(
        "enqueue-args-lone-surrogate-escape",
        "args-json",
        argv("enqueue", "--kind", "k", "--args", '{"a": "\\ud800"}'),
        2,
        says=("surrogates not allowed",),
    ),
    CliCase(
        "enqueue-args-nesting-10000-deep",
        "args-json",
        argv("enqueue", "--kind", "k", "--args", _nested_json(10_000)),
        2,
        says=("args",),
        fixed=DEFECT_DEEP_JSON,
    ),
    CliCase(
        "enqueue-args-invalid-json",
        "args-json",
        argv("enqueue", "--kind", "k", "--args", "{oops"),
        2,
        says=("args must be valid JSON",),
    ),
    CliCase(
        "enqueue-args-over-1mib",
        "args-json",
        argv("enqueue", "--kind", "k", "--args", json.dumps("x" * (1 << 20))),
        2,
        says=("larger than 1048576 bytes",),
    ),
    CliCase(
        "enqueue-args-list-stored-verbatim",
        "args-json",
        argv("enqueue", "--kind", "k", "--args", '[1, "two"]'),
        0,
        says=("enqueued job",),
        writes=ONE_JOB,
        check=stored("args", [1, "two"]),
    ),
    CliCase(
        "enqueue-args-null-stored-verbatim",
        "args-json",
        argv("enqueue", "--kind", "k", "--args", "null"),
        0,
        says=("enqueued job",),
        writes=ONE_JOB,
        check=stored("args", None),
    ),
    # -- wrong types ------------------------------------------------------------------------------
    CliCase(
        "enqueue-max-attempts-0",
        "wrong-types",
        argv("enqueue", "--kind", "k", "--max-attempts", "0"),
        2,
        says=("Invalid value for '--max-attempts'",),
        own_message=False,
    ),
    CliCase(
        "enqueue-max-attempts-2-pow-31",
        "wrong-types",
        argv("enqueue", "--kind", "k", "--max-attempts", "2147483648"),
        2,
        says=("Invalid value for '--max-attempts'",),
        own_message=False,
    ),
    CliCase(
        "enqueue-max-attempts-text",
        "wrong-types",
        argv("enqueue", "--kind", "k", "--max-attempts", "3; DROP TABLE drover_jobs"),
        2,
        says=("Invalid value for '--max-attempts'",),
        own_message=False,
    ),
    CliCase(
        "enqueue-at-naive",
        "wrong-types",
        argv("enqueue", "--kind", "k", "--at", "2030-01-01T00:00:00"),
        2,
        says=("needs a time zone",),
    ),
    CliCase(
        "enqueue-at-after-year-9999-utc",
        "wrong-types",
        argv("enqueue", "--kind", "k", "--at", "9999-12-31T23:59:59-14:00"),
        2,
        says=("--at",),
        fixed=DEFECT_YEAR_10000,
    ),
    CliCase(
        "worker-shutdown-timeout-negative",
        "durations",
        argv("worker", "nowhere:client", "--shutdown-timeout", "-1"),
        2,
        says=("Invalid value for '--shutdown-timeout'",),
        own_message=False,
    ),
    CliCase(
        "worker-concurrency-0",
        "durations",
        argv("worker", "nowhere:client", "--concurrency", "0"),
        2,
        says=("Invalid value for '--concurrency'",),
        own_message=False,
    ),
    # -- names ------------------------------------------------------------------------------------
    CliCase(
        "enqueue-sql-kind-and-queue-stored-verbatim",
        "names",
        argv("enqueue", "--kind", SQLI, "--queue", OR_TRUE),
        0,
        says=(f"queue {OR_TRUE}",),
        writes=ONE_JOB,
        check=stored_kind_and_queue(SQLI, OR_TRUE),
    ),
    CliCase(
        "enqueue-rtl-queue-stored-verbatim",
        "names",
        argv("enqueue", "--kind", "k", "--queue", RTL),
        0,
        writes=ONE_JOB,
        check=stored("queue", RTL),
    ),
    CliCase(
        "enqueue-kind-nul",
        "names",
        argv("enqueue", "--kind", "k\x00"),
        2,
        says=("NUL",),
    ),
    CliCase(
        "enqueue-kind-10kb",
        "names",
        argv("enqueue", "--kind", TEN_KB),
        2,
        says=("kind is 10000 characters long; the maximum is 255",),
    ),
    CliCase(
        "jobs-list-queue-10kb",
        "names",
        argv("jobs", "list", "--queue", TEN_KB),
        2,
        says=("--queue is 10000 characters long; the maximum is 128",),
    ),
    CliCase(
        "queues-pause-sql-injection-stored-verbatim",
        "names",
        argv("queues", "pause", SQLI),
        0,
        says=(f"paused queue {SQLI}",),
        writes={"drover_queues": 1},
        check=stored("name", SQLI, table="drover_queues"),
    ),
    CliCase(
        "queues-pause-nul",
        "names",
        argv("queues", "pause", NUL),
        2,
        says=("queue NAME must not contain NUL",),
    ),
    # -- bad DSNs ---------------------------------------------------------------------------------
    CliCase(
        "unparsable-url",
        "dsn",
        argv("stats", "--database", f"postgresql://u:{SENTINEL}@h/x?bogus_parameter=1"),
        2,
        says=("the database URL cannot be parsed",),
        database=False,
    ),
    CliCase(
        "bad-percent-encoding",
        "dsn",
        argv("jobs", "list", "--database", f"postgresql://u:{SENTINEL}%ZZ@h/x"),
        2,
        says=("the database URL cannot be parsed",),
        database=False,
    ),
    CliCase(
        "closed-port-fails-fast",
        "dsn",
        argv("enqueue", "--kind", "k", "--database", UNREACHABLE),
        1,
        says=("127.0.0.1:1/x",),
        database=False,
        budget=FAST_BUDGET,
    ),
    CliCase(
        "wrong-database",
        "dsn",
        lambda env: ["stats", "--database", env.refusing_url()],
        1,
        says=('database "drover_no_such_db" does not exist',),
        database=False,
        budget=FAST_BUDGET,
    ),
    CliCase(
        "empty-database-flag",
        "dsn",
        argv("stats", "--database="),
        2,
        says=("--database requires a value",),
        database=False,
    ),
    # -- injection through the CLI ------------------------------------------------------------
    CliCase(
        "retry-id-with-drop-table",
        "cli-injection",
        argv("retry", "1; DROP TABLE drover_jobs"),
        2,
        says=("invalid job id '1; DROP TABLE drover_jobs'",),
        setup=lambda env: env.put("dead"),
    ),
    CliCase(
        "cancel-id-with-drop-table",
        "cli-injection",
        argv("cancel", "1; DROP TABLE drover_jobs"),
        2,
        says=("invalid job id '1; DROP TABLE drover_jobs'",),
        setup=lambda env: env.put("available"),
    ),
    CliCase(
        "jobs-get-id-or-true",
        "cli-injection",
        argv("jobs", "get", "1 OR 1=1"),
        2,
        says=("invalid job id '1 OR 1=1'",),
        setup=lambda env: env.put(),
    ),
    CliCase(
        "jobs-list-queue-or-true-matches-nothing",
        "cli-injection",
        argv("--json", "jobs", "list", "--queue", OR_TRUE),
        0,
        setup=lambda env: env.put(),
        check=lists_nothing_json,
    ),
    CliCase(
        "jobs-list-state-comment",
        "cli-injection",
        argv("jobs", "list", "--state", "completed' --"),
        2,
        says=('unknown --state "completed\' --"',),
    ),
    CliCase(
        "jobs-list-limit-with-drop-table",
        "cli-injection",
        argv("jobs", "list", "--limit", "1; DROP TABLE drover_jobs"),
        2,
        says=("Invalid value for '--limit'",),
        own_message=False,
    ),
    CliCase(
        "worker-app-module-with-sql",
        "cli-injection",
        argv("worker", "x'); drop:y"),
        2,
        says=("cannot import",),
    ),
    CliCase(
        "enqueue-app-calls-a-function-that-raises",
        "cli-injection",
        argv("enqueue", "--kind", "k", "--app", "os:system"),
        1,
        says=("os:system",),
        fixed=DEFECT_APP_FACTORY,
    ),
    # -- a handful as real processes ------------------------------------------------------------
    CliCase(
        "process-closed-port-fails-fast",
        "dsn",
        argv("stats", "--database", UNREACHABLE),
        1,
        says=("127.0.0.1:1/x",),
        database=False,
        process=True,
        budget=PROCESS_BUDGET,
    ),
    CliCase(
        "process-unparsable-url",
        "dsn",
        argv("stats", "--database", f"host=h password={SENTINEL} broken"),
        2,
        says=("the database URL cannot be parsed",),
        database=False,
        process=True,
        budget=PROCESS_BUDGET,
    ),
    CliCase(
        "process-retry-id-with-drop-table",
        "cli-injection",
        argv("retry", "1; DROP TABLE drover_jobs"),
        2,
        says=("invalid job id",),
        setup=lambda env: env.put("dead"),
        process=True,
        budget=PROCESS_BUDGET,
    ),
    CliCase(
        "process-enqueue-sql-kind-stored-verbatim",
        "names",
        argv("enqueue", "--kind", SQLI, "--args", '{"n": 1}'),
        0,
        says=(f"kind {SQLI}",),
        writes=ONE_JOB,
        check=stored("kind", SQLI),
        process=True,
        budget=PROCESS_BUDGET,
    ),
    CliCase(
        "process-enqueue-args-nesting-10000-deep",
        "args-json",
        argv("enqueue", "--kind", "k", "--args", _nested_json(10_000)),
        2,
        says=("args",),
        fixed=DEFECT_DEEP_JSON,
        process=True,
        budget=PROCESS_BUDGET,
    ),
]

CORPUS: list[Case | CliCase] = [*API_CASES, *CLI_CASES]
CORPUS_SIZE = len(CORPUS)
CATEGORIES = ("args-json", "wrong-types", "names", "durations", "dsn", "schedule", "cli-injection")


def corpus_counts() -> dict[str, int]:
    """Cases per category, in the catalogue's order."""
    counts = Counter(case.category for case in CORPUS)
    return {category: counts[category] for category in CATEGORIES}


def defects() -> list[str]:
    """The ids of the cases that found a defect (now fixed and guarded by the case)."""
    return [f"{case.category}/{case.id}" for case in CORPUS if case.fixed]


# --- running a case ----------------------------------------------------------------------------


def _count(conn: Conn, table: str) -> int:
    query = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))
    row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0])


@dataclass(frozen=True)
class _State:
    counts: dict[str, int]
    jobs: list[tuple[Any, ...]]
    sequence: object


def _state(conn: Conn) -> _State:
    for table in TABLES:
        exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
        assert exists == (True,), f"{table} no longer exists"
    seq = conn.execute(
        "SELECT pg_sequence_last_value(pg_get_serial_sequence('drover_jobs', 'id')::regclass)"
    ).fetchone()
    assert seq is not None
    return _State(
        counts={table: _count(conn, table) for table in TABLES},
        jobs=conn.execute("SELECT xmin::text, * FROM drover_jobs ORDER BY id").fetchall(),
        sequence=seq[0],
    )


def _assert_writes(conn: Conn, before: _State, writes: Mapping[str, int]) -> None:
    after = _state(conn)
    gained = {t: after.counts[t] - before.counts[t] for t in TABLES}
    assert gained == {t: writes.get(t, 0) for t in TABLES}, "rows written"
    if not writes.get("drover_jobs"):
        # Not a row touched and not an id consumed.
        assert (after.jobs, after.sequence) == (before.jobs, before.sequence)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions a traceback or an error tracker would show with it."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        if current.__cause__ is not None:
            current = current.__cause__
        elif current.__suppress_context__:  # ``raise ... from None``
            current = None
        else:
            current = current.__context__


def _call(case: Case, env: Env) -> Any:
    if case.raises is None:
        return case.call(env)
    try:
        result = case.call(env)
    except Exception as exc:
        caught = exc
    else:
        pytest.fail(
            f"expected drover.{case.raises.__qualname__}; the call returned {result!r:.300}"
        )
    kind = f"{type(caught).__module__}.{type(caught).__qualname__}"
    assert type(caught) is case.raises, (
        f"expected drover.{case.raises.__qualname__}, got {kind}: {caught}"
    )
    assert isinstance(caught, drover.DroverError), f"{kind} is not a drover.DroverError"
    message = str(caught)
    for fragment in case.says:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    for link in _chain(caught):
        assert SENTINEL not in f"{link} {link!r}", f"the password leaked: {link!r}"
    return caught


def _params(cases: Sequence[Case | CliCase]) -> list[Any]:
    return [
        pytest.param(
            case,
            id=f"{case.category}/{case.id}",
        )
        for case in cases
    ]


def _invoke(args: list[str]) -> tuple[int, str, str]:
    """The CLI in-process, as ``main`` runs it (no database URL in the environment)."""
    result = CliRunner().invoke(
        drover.cli.app,
        drover.cli.hoist_globals(args),
        env={"DROVER_DATABASE_URL": None, "DATABASE_URL": None},
    )
    escaped = result.exception
    assert escaped is None or isinstance(escaped, SystemExit), (
        f"an exception escaped the CLI (a real process prints a traceback): {escaped!r}"
    )
    return result.exit_code, result.stdout, result.stderr


def _run(args: list[str], timeout: float) -> tuple[int, str, str]:
    """``python -m drover ARGS`` as a real process."""
    environ = {
        k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DROVER_DATABASE_URL")
    }
    done = subprocess.run(
        [sys.executable, "-m", "drover", *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


# --- the tests ---------------------------------------------------------------------------------


def test_corpus_has_at_least_40_cases() -> None:
    assert CORPUS_SIZE >= 40
    ids = [f"{case.category}/{case.id}" for case in CORPUS]
    assert len(set(ids)) == len(ids), "case ids must be unique"
    assert set(corpus_counts()) == {case.category for case in CORPUS}
    assert all(count > 0 for count in corpus_counts().values())
    assert sum(isinstance(case, CliCase) and case.process for case in CORPUS) <= 6


@pytest.mark.parametrize("case", _params(API_CASES))
def test_api_hostile_input(case: Case, env: Env) -> None:
    if case.setup is not None:
        case.setup(env)
    before = _state(env.conn)
    started = time.monotonic()
    outcome = _call(case, env)
    elapsed = time.monotonic() - started
    _assert_writes(env.conn, before, case.writes)
    if case.check is not None:
        case.check(env, outcome)
    assert elapsed < case.budget, f"took {elapsed:.1f}s"


@pytest.mark.parametrize("case", _params(CLI_CASES))
def test_cli_hostile_input(case: CliCase, env: Env) -> None:
    if case.setup is not None:
        case.setup(env)
    args = case.argv(env)
    if case.database:
        args = ["--database", env.db_url, *args]
    before = _state(env.conn)
    started = time.monotonic()
    code, stdout, stderr = _run(args, case.budget) if case.process else _invoke(args)
    elapsed = time.monotonic() - started
    assert "Traceback" not in stdout + stderr
    assert SENTINEL not in stdout + stderr
    assert code == case.exit, (code, stdout, stderr[-500:])
    if code == 0:
        assert stderr == ""
        shown = stdout
    else:
        assert stdout == ""
        assert stderr.strip(), "a refusal must say why"
        if case.own_message:
            assert stderr.startswith("drover: ") and stderr.count("\n") == 1, stderr
        shown = stderr
    for fragment in case.says:
        assert fragment in shown, f"{fragment!r} not in {shown[-500:]!r}"
    _assert_writes(env.conn, before, case.writes)
    if case.check is not None:
        case.check(env, stdout)
    assert elapsed < case.budget, f"took {elapsed:.1f}s"
