"""Job priority: stored on every insert path, refused out of range, and the order of the claim."""

from __future__ import annotations

import json
import re
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from jobdb import Conn, MakeClient, assert_stored

import drover
from drover._db.claims import job_claim
from drover._db.floors import level_params
from drover._db.queries import query
from drover.periodic import PeriodicJob, tick_opts

LEASE = 60.0


class Plain(drover.JobArgs, kind="prio_plain"):
    n: int = 0


class Urgent(drover.JobArgs, kind="prio_urgent", priority=5):
    n: int = 0


def _count(conn: Conn) -> int:
    row = conn.execute("SELECT count(*) FROM drover_jobs").fetchone()
    assert row is not None
    return int(row[0])


def _claim_order(conn: Conn, queue: str = "default") -> list[int]:
    """Claim one job at a time until none is due; the ids in the order they were claimed."""
    order: list[int] = []
    while rows := job_claim(conn, queue, 1, LEASE):
        order.append(rows[0].id)
    return order


def _put(conn: Conn, priority: int, due: str, queue: str = "default") -> int:
    """A waiting job with ``priority``, due at ``now() + due`` (an interval; negative is past)."""
    row = conn.execute(
        "INSERT INTO drover_jobs (kind, queue, priority, state, scheduled_at) "
        "VALUES ('prio_plain', %s, %s, "
        "CASE WHEN %s::interval > '0' THEN 'scheduled' ELSE 'available' END::drover_job_state, "
        "now() + %s::interval) RETURNING id",
        (queue, priority, due, due),
    ).fetchone()
    assert row is not None
    return int(row[0])


# --- the claim's order ------------------------------------------------------------------------


def test_the_claim_takes_higher_priority_first_then_due_time_then_id(conn: Conn) -> None:
    low_old = _put(conn, -5, "-3 hours")
    mid_new = _put(conn, 0, "-1 minute")
    mid_old = _put(conn, 0, "-2 hours")
    high_first_id = _put(conn, 9, "-1 second")
    high_second_id = _put(conn, 9, "-1 hour")
    # Same priority and due time: the lower id first.
    conn.execute(
        "UPDATE drover_jobs "
        "SET scheduled_at = (SELECT scheduled_at FROM drover_jobs WHERE id = %s) WHERE id = %s",
        (high_second_id, high_first_id),
    )
    # Not due yet, at the top priority: neither claimed nor in the way.
    future_top = _put(conn, 100, "1 day")
    other_queue = _put(conn, 100, "-1 day", queue="elsewhere")

    assert _claim_order(conn) == [high_first_id, high_second_id, mid_old, mid_new, low_old]
    state = conn.execute("SELECT state::text FROM drover_jobs WHERE id = %s", (future_top,))
    assert state.fetchone() == ("scheduled",)
    assert _claim_order(conn, "elsewhere") == [other_queue]


def test_a_batch_claim_fills_from_the_highest_priority_down(conn: Conn) -> None:
    ids = {p: [_put(conn, p, "-1 minute") for _ in range(3)] for p in (-1, 0, 7)}
    _put(conn, 50, "1 hour")  # a level with nothing due is skipped
    claimed = job_claim(conn, "default", 5, LEASE)
    assert sorted(r.id for r in claimed) == sorted(ids[7] + ids[0][:2])
    assert {r.priority for r in claimed} == {7, 0}


def test_a_paused_queue_claims_nothing_at_any_priority(conn: Conn, client: drover.Client) -> None:
    _put(conn, 3, "-1 minute")
    client.pause_queue("default")
    assert job_claim(conn, "default", 10, LEASE) == []
    client.resume_queue("default")
    assert len(job_claim(conn, "default", 10, LEASE)) == 1


def test_a_job_behind_a_100k_backlog_at_a_higher_priority_is_claimed_next(
    client: drover.Client, conn: Conn
) -> None:
    client.insert_many([Plain(n=i) for i in range(100_000)])
    urgent = client.insert(Plain(n=-1), drover.InsertOpts(priority=1))
    (claimed,) = job_claim(conn, "default", 1, LEASE)
    assert (claimed.id, claimed.priority) == (urgent.id, 1)


def test_a_job_behind_a_100k_backlog_at_a_higher_priority_is_the_next_one_started(
    client: drover.Client, make_client: MakeClient
) -> None:
    client.insert_many([Plain(n=i) for i in range(100_000)])
    client.insert(Plain(n=-1), drover.InsertOpts(priority=10))
    started: list[int] = []
    first = threading.Event()

    class Record(drover.Worker[Plain]):
        def work(self, job: drover.Job[Plain]) -> None:
            started.append(job.args.n)
            first.set()

    workers = drover.Workers()
    workers.add(Record())
    worker = make_client(workers=workers, concurrency=1, poll_interval=0.05)
    worker.start()
    assert first.wait(30)
    worker.stop(timeout=10)
    assert started[0] == -1


# --- the plan on a large table ----------------------------------------------------------------


def _plan(conn: Conn, params: dict[str, Any]) -> dict[str, Any]:
    conn.execute("BEGIN")
    try:
        row = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query("job_claim"), params
        ).fetchone()
    finally:
        conn.execute("ROLLBACK")
    assert row is not None
    document = row[0] if isinstance(row[0], list) else json.loads(row[0])
    plan: dict[str, Any] = document[0]["Plan"]
    return plan


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    found = [node]
    for child in node.get("Plans", []):
        found += _nodes(child)
    return found


def test_the_claim_reads_a_bounded_part_of_the_index_on_a_large_table(conn: Conn) -> None:
    # 100 000 due jobs at priority 0, then 50 000 not due for a day at the top
    # priority: a plain ORDER BY over the index would step over all 50 000 of
    # them (PostgreSQL before 18) to reach the due ones below.
    conn.execute("INSERT INTO drover_jobs (kind) SELECT 'bulk' FROM generate_series(1, 100000)")
    conn.execute(
        "INSERT INTO drover_jobs (kind, priority, state, scheduled_at) "
        "SELECT 'later', 100, 'scheduled', now() + interval '1 day' "
        "FROM generate_series(1, 50000)"
    )
    conn.execute("INSERT INTO drover_jobs (kind, priority) VALUES ('urgent', 50)")
    conn.execute("VACUUM ANALYZE drover_jobs")
    params = {
        "queue": "default",
        "limit": 10,
        "lease_seconds": 60,
        "holder": None,
        "done_ids": "{}",
        "done_attempts": "{}",
        **level_params(None),
    }
    plan = _plan(conn, params)
    nodes = _nodes(plan)
    assert not [n for n in nodes if n["Node Type"] in ("Sort", "Incremental Sort")], nodes
    # drover_gates is read whole, as it should be: a table of a few rows (none here).
    seq = [n for n in nodes if n["Node Type"] == "Seq Scan"]
    assert {n.get("Relation Name") for n in seq} <= {"drover_gates"}, seq
    scans = [n for n in nodes if n.get("Relation Name") == "drover_jobs" and "Index Name" in n]
    fetch = [n for n in scans if n["Index Name"] == "drover_jobs_fetch_v3_idx"]
    assert fetch, scans
    # Every job row a scan produced, over all its loops: the levels walk (one
    # row per level), then the jobs picked. Nowhere near the backlog.
    read = sum(n["Actual Rows"] * n["Actual Loops"] for n in fetch)
    assert read <= 50, read
    assert plan["Actual Rows"] == 10
    assert plan["Shared Hit Blocks"] + plan.get("Shared Read Blocks", 0) < 500, plan
    claimed = job_claim(conn, "default", 10, LEASE)
    assert [r.kind for r in claimed].count("urgent") == 1
    assert {r.kind for r in claimed} == {"urgent", "bulk"}


# --- every insert path carries it -------------------------------------------------------------


def test_the_class_default_and_insert_opts_override(client: drover.Client) -> None:
    assert client.insert(Plain()).priority == 0
    assert client.insert(Urgent()).priority == 5
    assert client.insert(Urgent(), drover.InsertOpts(priority=-3)).priority == -3
    # An explicit 0 is a value, not "unset": it overrides the class's 5.
    assert client.insert(Urgent(), drover.InsertOpts(priority=0)).priority == 0
    assert client.insert(Plain(), drover.InsertOpts(priority=100)).priority == 100
    assert client.insert(Urgent(), drover.InsertOpts(queue="q")).priority == 5
    rows = [client.get_job(i) for i in range(1, 7)]
    assert [r.priority for r in rows] == [0, 5, -3, 0, 100, 5]


def test_single_inserts_carry_it_on_every_statement(client: drover.Client, conn: Conn) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    rows = [
        client.insert(Plain(), drover.InsertOpts(priority=7)),  # job_insert_now
        client.insert(Plain(), drover.InsertOpts(priority=8, scheduled_at=later)),  # job_insert
        client.insert(Plain(), drover.InsertOpts(priority=-9, unique_key="u")),
    ]
    assert [r.priority for r in rows] == [7, 8, -9]
    assert_stored(client, rows)
    # Concurrent callers are combined into one statement (job_insert_rows).
    barrier = threading.Barrier(8)
    combined: list[drover.JobRow] = []
    lock = threading.Lock()

    def insert(i: int) -> None:
        barrier.wait()
        row = client.insert(Plain(n=i), drover.InsertOpts(priority=i * 10 - 40))
        with lock:
            combined.append(row)

    threads = [threading.Thread(target=insert, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.priority for r in combined) == [i * 10 - 40 for i in range(8)]
    assert all(r.priority == r.args["n"] * 10 - 40 for r in combined)
    assert_stored(client, combined)


@pytest.mark.parametrize(
    "shape", ["uniform_class_default", "pairs", "timed", "staged_unique", "mixed_classes"]
)
def test_bulk_inserts_carry_it(client: drover.Client, shape: str) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    items: list[drover.InsertItem]
    if shape == "uniform_class_default":
        items = [Urgent(n=i) for i in range(1500)]  # across COPY chunks
        expected = [5] * 1500
    elif shape == "pairs":
        items = [(Plain(n=i), drover.InsertOpts(priority=i % 201 - 100)) for i in range(1500)]
        expected = [i % 201 - 100 for i in range(1500)]
    elif shape == "timed":
        items = [(Plain(), drover.InsertOpts(priority=3, scheduled_at=later)), Urgent(), Plain()]
        expected = [3, 5, 0]
    elif shape == "staged_unique":
        items = [(Plain(), drover.InsertOpts(priority=-2, unique_key="a")), Urgent(), Plain()]
        expected = [-2, 5, 0]
    else:
        items = [Plain(), Urgent(), (Urgent(), drover.InsertOpts(priority=1)), Plain()]
        expected = [0, 5, 1, 0]
    rows = client.insert_many(items)
    assert [r.priority for r in rows] == expected
    assert_stored(client, rows[:50] + rows[-50:])


def test_inserts_in_the_callers_transaction_carry_it(client: drover.Client, db_url: str) -> None:
    with psycopg.connect(db_url) as tx:
        one = client.insert_tx(tx, Plain(), drover.InsertOpts(priority=42))
        many = client.insert_many_tx(tx, [Urgent(), (Plain(), drover.InsertOpts(priority=-1))])
    assert [one.priority, *(r.priority for r in many)] == [42, 5, -1]
    assert_stored(client, [one, *many])


def test_inspector_enqueue_carries_it(db_url: str) -> None:
    workers = drover.Workers()

    class Noop(drover.Worker[Urgent]):
        def work(self, job: drover.Job[Urgent]) -> None:
            pass

    workers.add(Noop())
    with drover.Inspector(db_url, workers=workers) as inspector:
        known = inspector.enqueue("prio_urgent", "{}")
        overridden = inspector.enqueue("prio_urgent", "{}", drover.InsertOpts(priority=-7))
        unknown = inspector.enqueue("who_knows", "{}", drover.InsertOpts(priority=12))
        bare = inspector.enqueue("who_knows", "{}")
        assert [inspector.get_job(r.id).priority for r in (known, overridden, unknown, bare)] == [
            5,
            -7,
            12,
            0,
        ]


def test_periodic_ticks_carry_the_jobs_priority() -> None:
    job = PeriodicJob("p", "@every 1m", Plain(), opts=drover.InsertOpts(priority=9))
    fire = datetime(2030, 1, 1, tzinfo=UTC)
    assert tick_opts(job, fire).priority == 9
    assert tick_opts(PeriodicJob("q", "@every 1m", Urgent()), fire).priority is None


# --- bad values ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (101, "must be between -100 and 100 (higher runs first), not 101"),
        (-101, "must be between -100 and 100 (higher runs first), not -101"),
        ("high", "must be an int, not str"),
        (True, "must be an int, not bool"),
        (1.5, "must be an int, not float"),
    ],
)
def test_a_bad_priority_is_refused_at_definition_and_changes_nothing(
    client: drover.Client, conn: Conn, value: Any, message: str
) -> None:
    with pytest.raises(drover.InvalidJobArgs, match="BadArgs priority " + re.escape(message)):

        class BadArgs(drover.JobArgs, kind="prio_bad", priority=value):
            pass

    with pytest.raises(drover.InvalidInsertOpts, match="InsertOpts.priority " + re.escape(message)):
        client.insert(Plain(), drover.InsertOpts(priority=value))
    assert _count(conn) == 0


def test_the_table_refuses_an_out_of_range_priority_written_by_hand(conn: Conn) -> None:
    with pytest.raises(psycopg.errors.CheckViolation, match="drover_jobs_priority_range"):
        conn.execute("INSERT INTO drover_jobs (kind, priority) VALUES ('raw', 101)")
    assert _count(conn) == 0
