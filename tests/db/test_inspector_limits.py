"""The Inspector's limit operations against a real database: list with use, set, clear, delete.

The use a listing reports comes from real claims (`job_claim`, the function
every client's fetcher calls), so the numbers an operator reads are the ones
the claim enforces.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from jobdb import Conn, MakeClient, Poll, observe
from psycopg.types.json import Jsonb

import drover
from drover._db.claims import job_claim
from drover._db.limits import limit_declare
from drover._db.queries import query
from drover.job import MAX_KIND_LENGTH, MAX_QUEUE_LENGTH
from drover.limits import (
    Limit,
    LimitKey,
    LimitState,
    PartitionUse,
    parse_limit_key,
    parse_period,
    period_text,
)

LEASE = 60.0


@pytest.fixture
def inspector(db_url: str) -> Iterator[drover.Inspector]:
    with drover.Inspector(db_url) as i:
        yield i


def _put(conn: Conn, n: int, kind: str = "a", queue: str = "default", **args: Any) -> list[int]:
    ids = []
    for _ in range(n):
        row = conn.execute(
            "INSERT INTO drover_jobs (kind, queue, args) VALUES (%s, %s, %s) RETURNING id",
            (kind, queue, Jsonb(args)),
        ).fetchone()
        assert row is not None
        ids.append(int(row[0]))
    return ids


def _declare(conn: Conn, key: str, **values: Any) -> None:
    """What a starting client writes for a limit its code declares."""
    parsed = parse_limit_key(key)
    limit_declare(conn, [(parsed, Limit(partition_by=parsed.partition_by, **values))])


def _finish(conn: Conn, ids: list[int]) -> None:
    conn.execute(
        "UPDATE drover_jobs SET state = 'completed', leased_until = NULL, finalized_at = now() "
        "WHERE id = ANY(%s)",
        (ids,),
    )


def _by_key(inspector: drover.Inspector) -> dict[str, LimitState]:
    return {str(s.key): s for s in inspector.limits()}


def _limit_rows(conn: Conn) -> list[tuple[Any, ...]]:
    """Every limit row and every recorded start, with xmin: any write changes the result."""
    limits = conn.execute("SELECT xmin::text, * FROM drover_limits ORDER BY id").fetchall()
    starts = conn.execute(
        "SELECT * FROM drover_limit_starts ORDER BY limit_id, part, started_at"
    ).fetchall()
    return [*limits, *starts]


# --- listing with use -----------------------------------------------------------------------


def test_limits_lists_kind_partitioned_and_queue_limits_with_their_use_now(
    inspector: drover.Inspector, conn: Conn
) -> None:
    _declare(conn, "kind:a", concurrency=3, rate=10, per="minute")
    _declare(conn, "kind:b[tenant]", concurrency=1)
    _declare(conn, "queue:slow", concurrency=2)
    _put(conn, 5, kind="a")
    _put(conn, 2, kind="b", tenant="x")
    _put(conn, 1, kind="b", tenant="y")
    _put(conn, 1, kind="b")  # no tenant: the null partition
    _put(conn, 3, kind="c", queue="slow")
    assert len(job_claim(conn, "default", 20, LEASE)) == 3 + 3
    assert len(job_claim(conn, "slow", 20, LEASE)) == 2

    listed = inspector.limits()

    assert [str(s.key) for s in listed] == ["kind:a", "kind:b[tenant]", "queue:slow"]
    a, b, slow = listed
    assert (a.concurrency, a.rate, a.per) == (3, 10, timedelta(minutes=1))
    assert a.declared == Limit(concurrency=3, rate=10, per="minute") and a.override is None
    assert (a.running, a.started, a.partitions, a.partitions_full) == (3, 3, 1, 1)
    assert a.busiest == ()  # a whole-scope limit has no partitions to rank

    assert (b.concurrency, b.rate, b.running, b.started) == (1, None, 3, 0)
    assert (b.partitions, b.partitions_full) == (3, 3)
    assert {p.value: (p.running, p.started, p.full) for p in b.busiest} == {
        '"x"': (1, 0, True),
        '"y"': (1, 0, True),
        "null": (1, 0, True),
    }

    assert (slow.key, slow.concurrency, slow.running, slow.partitions_full) == (
        LimitKey("queue", "slow"),
        2,
        2,
        1,
    )
    assert all(s.updated_at is not None for s in listed)


def test_a_partitioned_rate_shows_which_partitions_spent_their_window(
    inspector: drover.Inspector, conn: Conn
) -> None:
    _declare(conn, "kind:call[account]", rate=2, per="hour")
    _put(conn, 3, kind="call", account="acme")
    _put(conn, 1, kind="call", account="initech")
    claimed = job_claim(conn, "default", 20, LEASE)
    assert len(claimed) == 3
    _finish(conn, [r.id for r in claimed])  # finished, but their starts still count

    (state,) = inspector.limits()

    assert (state.running, state.started, state.partitions, state.partitions_full) == (0, 3, 2, 1)
    assert state.busiest == (
        PartitionUse(value='"acme"', running=0, started=2, full=True),
        PartitionUse(value='"initech"', running=0, started=1, full=False),
    )


def test_the_busiest_partitions_are_the_five_running_most_then_starting_most(
    inspector: drover.Inspector, conn: Conn
) -> None:
    _declare(conn, "kind:sync[tenant]", concurrency=10, rate=100, per="minute")
    for tenant, n in [("t1", 1), ("t2", 4), ("t3", 2), ("t4", 6), ("t5", 3), ("t6", 5), ("t7", 2)]:
        _put(conn, n, kind="sync", tenant=tenant)
    assert len(job_claim(conn, "default", 100, LEASE)) == 23
    # t3's two jobs finish: it keeps its two starts but runs nothing.
    t3 = conn.execute("SELECT id FROM drover_jobs WHERE args->>'tenant' = 't3'").fetchall()
    _finish(conn, [int(r[0]) for r in t3])

    (state,) = inspector.limits()

    assert state.partitions == 7 and state.running == 21 and state.started == 23
    assert [(p.value, p.running, p.started) for p in state.busiest] == [
        ('"t4"', 6, 6),
        ('"t6"', 5, 5),
        ('"t2"', 4, 4),
        ('"t5"', 3, 3),
        ('"t7"', 2, 2),
    ]


def test_a_limit_with_nothing_running_shows_no_use(inspector: drover.Inspector) -> None:
    inspector.set_limit("queue:idle", concurrency=4)
    (state,) = inspector.limits()
    assert (state.running, state.started, state.partitions, state.partitions_full) == (0, 0, 0, 0)
    assert state.busiest == ()


# --- set, clear, delete ---------------------------------------------------------------------


def test_set_limit_overrides_only_the_values_given_and_returns_the_stored_state(
    inspector: drover.Inspector, conn: Conn
) -> None:
    _declare(conn, "kind:a", concurrency=3, rate=10, per="minute")

    raised = inspector.set_limit("kind:a", rate=20)
    assert (raised.concurrency, raised.rate, raised.per) == (3, 20, timedelta(minutes=1))
    assert raised.override == Limit(rate=20, per="minute")  # the declared period applies
    assert raised.declared == Limit(concurrency=3, rate=10, per="minute")

    capped = inspector.set_limit("kind:a", concurrency=5)
    assert (capped.concurrency, capped.rate) == (5, 20)  # the rate override is kept
    assert capped.override == Limit(concurrency=5, rate=20, per="minute")

    hourly = inspector.set_limit(LimitKey("kind", "a"), rate=7, per=timedelta(hours=1))
    assert (hourly.concurrency, hourly.rate, hourly.per) == (5, 7, timedelta(hours=1))
    assert hourly == _by_key(inspector)["kind:a"]
    assert hourly.updated_at >= capped.updated_at >= raised.updated_at


def test_set_limit_creates_a_limit_no_code_declares(inspector: drover.Inspector) -> None:
    state = inspector.set_limit("kind:charge[tenant_id]", concurrency=1, rate=30, per=60)
    assert state.key == LimitKey("kind", "charge", "tenant_id")
    assert state.declared is None
    assert state.override == Limit(concurrency=1, rate=30, per="minute", partition_by="tenant_id")
    assert list(_by_key(inspector)) == ["kind:charge[tenant_id]"]


def test_clearing_returns_a_declared_limit_to_its_declaration(
    inspector: drover.Inspector, conn: Conn
) -> None:
    _declare(conn, "kind:a", concurrency=3)
    inspector.set_limit("kind:a", concurrency=9, rate=4)
    assert inspector.clear_limit("kind:a") is True
    state = _by_key(inspector)["kind:a"]
    assert (state.concurrency, state.rate, state.override) == (3, None, None)
    assert inspector.clear_limit("kind:a") is False  # nothing left to clear
    assert inspector.clear_limit("kind:never_set") is False


def test_clearing_a_limit_no_code_declares_removes_it(
    inspector: drover.Inspector, conn: Conn
) -> None:
    inspector.set_limit("queue:reports", rate=100, per="minute")
    _put(conn, 2, kind="r", queue="reports")
    assert len(job_claim(conn, "reports", 10, LEASE)) == 2  # records starts for the limit

    assert inspector.clear_limit("queue:reports") is True

    assert inspector.limits() == []
    assert conn.execute("SELECT count(*) FROM drover_limits").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM drover_limit_starts").fetchone() == (0,)
    assert inspector.clear_limit("queue:reports") is False


def test_delete_limit_removes_a_declared_limit_and_its_starts(
    inspector: drover.Inspector, conn: Conn
) -> None:
    _declare(conn, "kind:a", rate=5, per="minute")
    _declare(conn, "kind:b", concurrency=1)
    _put(conn, 2, kind="a")
    assert len(job_claim(conn, "default", 10, LEASE)) == 2
    assert inspector.delete_limit("kind:a") is True
    assert list(_by_key(inspector)) == ["kind:b"]
    assert conn.execute("SELECT count(*) FROM drover_limit_starts").fetchone() == (0,)
    assert inspector.delete_limit("kind:a") is False


def test_a_change_holds_from_the_next_claim(inspector: drover.Inspector, conn: Conn) -> None:
    _declare(conn, "kind:a", concurrency=3)
    _put(conn, 10)
    assert len(job_claim(conn, "default", 10, LEASE)) == 3
    inspector.set_limit("kind:a", concurrency=4)
    assert len(job_claim(conn, "default", 10, LEASE)) == 1
    inspector.set_limit("kind:a", concurrency=2)  # below what runs: nothing more starts
    assert job_claim(conn, "default", 10, LEASE) == []
    inspector.clear_limit("kind:a")  # back to the declared 3: still 4 running
    assert job_claim(conn, "default", 10, LEASE) == []
    inspector.delete_limit("kind:a")
    assert len(job_claim(conn, "default", 10, LEASE)) == 6


def test_set_limit_returns_what_it_wrote_even_when_a_delete_follows_at_once(
    inspector: drover.Inspector, db_url: str, conn: Conn, poll: Poll
) -> None:
    # Another operator deletes the limit the moment set_limit's write is done.
    # The state set_limit returns must be read under the write's own row lock,
    # never looked up again afterwards (where the row may already be gone).
    # To make "the moment" deterministic, a session holds the starts table
    # (which the read needs, the write does not) while the delete runs; the
    # delete skips a row still locked by set_limit's transaction.
    inspector.set_limit("kind:a", concurrency=1)
    result: list[LimitState | BaseException] = []
    with psycopg.connect(db_url) as holder:
        holder.execute("LOCK TABLE drover_limit_starts IN ACCESS EXCLUSIVE MODE")

        def set_it() -> None:
            try:
                result.append(inspector.set_limit("kind:a", concurrency=2))
            except BaseException as exc:  # reported by the assertion below
                result.append(exc)

        setter = threading.Thread(target=set_it, name="test-set-limit")
        setter.start()
        poll(
            lambda: (
                conn.execute(
                    "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                    "WHERE c.relname = 'drover_limit_starts' AND NOT l.granted"
                ).fetchone()
                == (1,)
            ),
            message="set_limit waiting to read the starts",
        )
        holder.execute(
            "DELETE FROM drover_limits WHERE id IN ("
            "  SELECT id FROM drover_limits WHERE target = 'a' FOR UPDATE SKIP LOCKED)"
        )
        holder.commit()
        setter.join(10)
    assert not setter.is_alive()
    (state,) = result
    assert isinstance(state, LimitState), repr(state)
    assert (state.key, state.concurrency) == (LimitKey("kind", "a"), 2)
    assert _by_key(inspector)["kind:a"].concurrency == 2


def test_set_limit_reports_a_row_gone_before_its_read_as_a_drover_error(
    inspector: drover.Inspector, conn: Conn
) -> None:
    # Only something inside the write's own transaction can take the row away
    # (the write holds its lock until the read is done): here, a trigger.
    conn.execute(
        "CREATE FUNCTION vanish() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN DELETE FROM drover_limits WHERE id = NEW.id; RETURN NULL; END $$"
    )
    conn.execute(
        "CREATE TRIGGER vanish AFTER INSERT ON drover_limits FOR EACH ROW EXECUTE FUNCTION vanish()"
    )
    with pytest.raises(drover.DatabaseError, match="limit kind:a was not found"):
        inspector.set_limit("kind:a", concurrency=2)


# --- validation -----------------------------------------------------------------------------

BAD_KEYS: list[tuple[object, str]] = [
    ("", "queue:NAME or kind:NAME"),
    ("tenant:x", "queue:NAME or kind:NAME"),
    ("kind:", "queue:NAME or kind:NAME"),
    ("kind:   ", "names no kind"),
    ("kind:a\x00b", "NUL"),
    ("queue:\ud800", "lone surrogate"),
    ("kind:a[b.c]", "top-level args field"),
    ("kind:a[]", "top-level args field"),
    ("kind:" + "k" * (MAX_KIND_LENGTH + 1), f"the maximum is {MAX_KIND_LENGTH}"),
    ("queue:" + "q" * (MAX_QUEUE_LENGTH + 1), f"the maximum is {MAX_QUEUE_LENGTH}"),
    (42, "queue:NAME or kind:NAME"),
    (None, "queue:NAME or kind:NAME"),
]


@pytest.mark.parametrize(("key", "message"), BAD_KEYS)
def test_a_bad_key_is_refused_by_every_operation_and_writes_nothing(
    inspector: drover.Inspector, conn: Conn, key: object, message: str
) -> None:
    _declare(conn, "kind:a", concurrency=1)
    before = _limit_rows(conn)
    with pytest.raises(drover.InvalidLimit, match=message):
        inspector.set_limit(key, concurrency=2)  # type: ignore[arg-type]
    with pytest.raises(drover.InvalidLimit, match=message):
        inspector.clear_limit(key)  # type: ignore[arg-type]
    with pytest.raises(drover.InvalidLimit, match=message):
        inspector.delete_limit(key)  # type: ignore[arg-type]
    assert _limit_rows(conn) == before


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({}, "set_limit needs concurrency= .* or rate="),
        ({"concurrency": 0}, "concurrency must be between 1 and"),
        ({"concurrency": -2}, "concurrency must be between 1 and"),
        ({"concurrency": 2**31}, "concurrency must be between 1 and"),
        ({"concurrency": True}, "concurrency must be a positive int, not True"),
        ({"concurrency": 1.5}, "concurrency must be a positive int, not 1.5"),
        ({"concurrency": "3"}, "concurrency must be a positive int, not '3'"),
        ({"rate": False}, "rate must be a positive int, not False"),
        ({"rate": 0}, "rate must be between 1 and"),
        ({"rate": 5, "per": "fortnight"}, "per must be .* 'second', 'minute', 'hour'"),
        ({"rate": 5, "per": 0}, "per must be more than 0"),
        ({"rate": 5, "per": -60}, "per must be more than 0"),
        ({"rate": 5, "per": timedelta(days=2)}, "at most one day"),
        ({"rate": 5, "per": float("nan")}, "finite"),
        ({"rate": 5, "per": True}, "per must be a timedelta"),
        ({"concurrency": 1, "per": 60}, "per= is the period of rate="),
    ],
)
def test_bad_values_are_refused_naming_them_and_write_nothing(
    inspector: drover.Inspector, conn: Conn, values: dict[str, Any], message: str
) -> None:
    _declare(conn, "kind:a", concurrency=1)
    before = _limit_rows(conn)
    with pytest.raises(drover.InvalidLimit, match=message):
        inspector.set_limit("kind:a", **values)
    with pytest.raises(drover.InvalidLimit, match=message):
        inspector.set_limit("kind:new", **values)
    assert _limit_rows(conn) == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("job", "x"), "scope must be 'queue' or 'kind'"),
        (("kind", ""), "names no kind"),
        (("queue", " "), "names no queue"),
        (("kind", 5), "kind must be a str, not int"),
        (("kind", "a\x00"), "NUL"),
        (("kind", "\udfff"), "lone surrogate"),
        (("kind", "k" * (MAX_KIND_LENGTH + 1)), "the maximum is 255"),
        (("kind", "a", "b-c"), "top-level args field"),
        (("kind", "a", ""), "top-level args field"),
    ],
)
def test_a_limit_key_checks_itself_when_it_is_built(args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(drover.InvalidLimit, match=message):
        LimitKey(*args)


def test_a_limit_key_allows_what_a_queue_or_kind_may_be_called() -> None:
    assert str(LimitKey("queue", "q" * MAX_QUEUE_LENGTH)).startswith("queue:qqq")
    assert str(LimitKey("kind", "k" * MAX_KIND_LENGTH, "tenant_id")).endswith("k[tenant_id]")
    assert parse_limit_key("kind:Grüße ✓[t]") == LimitKey("kind", "Grüße ✓", "t")


def test_period_text_names_the_common_periods_and_gives_seconds_otherwise() -> None:
    assert [period_text(timedelta(seconds=s)) for s in (1, 60, 3600, 90, 0.25)] == [
        "second",
        "minute",
        "hour",
        "90s",
        "0.25s",
    ]


@pytest.mark.parametrize("seconds", [1, 60, 3600, 90, 0.25, 86400])
def test_parse_period_reads_what_period_text_writes(seconds: float) -> None:
    period = timedelta(seconds=seconds)
    assert parse_period(period_text(period), "per") == period
    assert parse_period(str(seconds), "per") == period
    assert parse_period(f" {period_text(period)} ", "per") == period


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("fortnight", "per must be second, minute, hour or a number of seconds"),
        ("", "per must be second, minute, hour"),
        ("inf", "per must be second, minute, hour"),
        ("0", "per must be more than 0"),
        ("-5s", "per must be more than 0"),
        ("86401", "at most one day"),
        ("0.0001", "at least a millisecond"),
    ],
)
def test_parse_period_refuses_what_is_not_a_period(text: str, message: str) -> None:
    with pytest.raises(drover.InvalidLimit, match=message):
        parse_period(text, "per")


# --- running clients --------------------------------------------------------------------------


class Gated(drover.JobArgs, kind="inspector_limits_gated", limits=drover.Limit(concurrency=1)):
    pass


def test_a_client_that_does_not_listen_follows_a_raised_limit_from_its_next_claim(
    make_client: MakeClient, inspector: drover.Inspector, poll: Poll
) -> None:
    # Without LISTEN nothing wakes the fetcher: the change must hold from the
    # claim after it, which comes within one poll interval.
    release = threading.Event()
    running: list[int] = []
    claims_at_start: list[int] = []
    workers = drover.Workers()
    client = make_client(workers=workers, poll_interval=0.1, notify=False, concurrency=4)

    @workers.register(args=Gated)
    def gated(job: drover.Job[Gated]) -> None:
        assert client._engine is not None
        claims_at_start.append(client._engine.fetcher.claims)
        running.append(job.id)
        release.wait(20)

    client.start()
    try:
        for _ in range(3):
            client.insert(Gated())
        poll(lambda: len(running) == 1, message="the first job runs")
        engine = client._engine
        assert engine is not None

        def held_back() -> None:
            assert len(running) == 1

        observe(0.3, held_back)  # a few claim rounds, all refused by the limit
        claims_before = engine.fetcher.claims
        inspector.set_limit("kind:inspector_limits_gated", concurrency=3)
        poll(lambda: len(running) == 3, timeout=10, message="the held-back jobs start")
        # Claims made by the time they started: the round under way when the
        # change was written, the one that admitted them, and at most the
        # next (the fetcher claims again at once after a round that found work).
        assert max(claims_at_start[1:]) - claims_before <= 3
    finally:
        release.set()


def _plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _plan_nodes(child)


def test_listing_reads_running_jobs_through_the_lease_index_not_the_history(conn: Conn) -> None:
    # The status page lists limits on every refresh: a long history of
    # finished jobs must not be read (no sequential scan of drover_jobs).
    _declare(conn, "kind:k1", concurrency=5)
    _declare(conn, "kind:k2[tenant]", concurrency=1, rate=10, per="minute")
    _declare(conn, "queue:default", rate=100, per="minute")
    conn.execute(
        "INSERT INTO drover_jobs (kind, state, attempt, finalized_at, args) "
        "SELECT 'k' || (g % 3), 'completed', 1, now() - g * interval '1 s', "
        "jsonb_build_object('tenant', g % 50) FROM generate_series(1, 20000) g"
    )
    _put(conn, 4, kind="k1")
    _put(conn, 4, kind="k2", tenant=1)
    assert len(job_claim(conn, "default", 10, LEASE)) == 5
    conn.execute("ANALYZE drover_jobs")
    [(plan,)] = conn.execute(
        "EXPLAIN (FORMAT JSON) " + query("limit_list"), {"id": None}
    ).fetchall()
    scans = [
        (n["Node Type"], n.get("Index Name"))
        for n in _plan_nodes(plan[0]["Plan"])
        if n.get("Relation Name") == "drover_jobs"
    ]
    assert scans and all(node != "Seq Scan" for node, _ in scans), scans
    assert {name for _, name in scans} == {"drover_jobs_lease_idx"}, scans
