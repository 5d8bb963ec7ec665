"""Uniqueness by identity against a real database: every form, the flags, bulk, transactions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import drover

Conn = psycopg.Connection[tuple[Any, ...]]


class Sync(drover.JobArgs, kind="sync"):
    account: int
    note: str = ""


class Other(drover.JobArgs, kind="other"):
    account: int


def _count(conn: Conn, where: str = "true") -> int:
    row = conn.execute(f"SELECT count(*) FROM drover_jobs WHERE {where}").fetchone()
    assert row is not None
    return int(row[0])


def _finish(conn: Conn, job_id: int, state: str = "completed") -> None:
    # What the completer's write leaves: a terminal state and its time.
    conn.execute(
        "UPDATE drover_jobs SET state = %s::drover_job_state, finalized_at = now() WHERE id = %s",
        (state, job_id),
    )


def _opts(**unique: Any) -> drover.InsertOpts:
    return drover.InsertOpts(unique=drover.Unique(**unique))


# --- by args, queue, key -------------------------------------------------------------------


def test_by_all_args_returns_the_existing_job_flagged(client: drover.Client, conn: Conn) -> None:
    opts = _opts(by_args=True)
    first = client.insert(Sync(account=1), opts)
    again = client.insert(Sync(account=1), opts)
    other = client.insert(Sync(account=1, note="x"), opts)
    assert not first.duplicate
    assert again.duplicate
    assert again.id == first.id
    assert again == first  # the same job, as stored
    assert not other.duplicate
    assert other.id != first.id
    assert _count(conn) == 2


def test_by_named_fields_ignores_the_others(client: drover.Client, conn: Conn) -> None:
    opts = _opts(by_args=["account"])
    first = client.insert(Sync(account=1, note="a"), opts)
    again = client.insert(Sync(account=1, note="b"), opts)
    assert again.duplicate
    assert again.id == first.id
    assert again.args == {"account": 1, "note": "a"}  # the holder's args, unchanged
    assert not client.insert(Sync(account=2, note="a"), opts).duplicate
    assert _count(conn) == 2


def test_the_kind_is_always_part_of_the_identity(client: drover.Client, conn: Conn) -> None:
    opts = _opts(by_args=["account"])
    client.insert(Sync(account=1), opts)
    assert not client.insert(Other(account=1), opts).duplicate
    assert _count(conn) == 2


def test_by_queue_default_and_off(client: drover.Client, conn: Conn) -> None:
    per_queue = drover.InsertOpts(queue="a", unique=drover.Unique(by_args=True))
    client.insert(Sync(account=1), per_queue)
    elsewhere = client.insert(
        Sync(account=1), drover.InsertOpts(queue="b", unique=drover.Unique(by_args=True))
    )
    assert not elsewhere.duplicate  # the queue is part of the identity by default
    spanning = drover.Unique(by_args=True, by_queue=False)
    first = client.insert(Sync(account=2), drover.InsertOpts(queue="a", unique=spanning))
    again = client.insert(Sync(account=2), drover.InsertOpts(queue="b", unique=spanning))
    assert again.duplicate
    assert again.id == first.id
    assert again.queue == "a"


def test_by_key(client: drover.Client, conn: Conn) -> None:
    first = client.insert(Sync(account=1), _opts(key="nightly"))
    assert client.insert(Sync(account=2), _opts(key="nightly")).id == first.id
    assert not client.insert(Sync(account=1), _opts(key="weekly")).duplicate


# --- states ---------------------------------------------------------------------------------


def test_default_states_release_the_identity_when_the_job_ends(
    client: drover.Client, conn: Conn
) -> None:
    opts = _opts(by_args=True)
    first = client.insert(Sync(account=1), opts)
    conn.execute("UPDATE drover_jobs SET state = 'running' WHERE id = %s", (first.id,))
    assert client.insert(Sync(account=1), opts).duplicate  # running still holds it
    _finish(conn, first.id)
    second = client.insert(Sync(account=1), opts)
    assert not second.duplicate
    assert second.id != first.id


def test_states_can_add_terminal_states(client: drover.Client, conn: Conn) -> None:
    opts = _opts(by_args=True, states=[*drover.job.ACTIVE_STATES, drover.JobState.COMPLETED])
    first = client.insert(Sync(account=1), opts)
    _finish(conn, first.id)
    again = client.insert(Sync(account=1), opts)
    assert again.duplicate
    assert again.id == first.id
    assert again.state is drover.JobState.COMPLETED
    # cancelled is not among them: a cancelled holder lets a new job in.
    conn.execute("UPDATE drover_jobs SET state = 'cancelled' WHERE id = %s", (first.id,))
    assert not client.insert(Sync(account=1), opts).duplicate


def test_a_dead_holder_counts_only_when_dead_is_named(client: drover.Client, conn: Conn) -> None:
    with_dead = _opts(by_args=True, states=[*drover.job.ACTIVE_STATES, "dead"])
    first = client.insert(Sync(account=1), with_dead)
    _finish(conn, first.id, "dead")
    assert client.insert(Sync(account=1), with_dead).id == first.id
    # The same args with the default states are another identity's rows? No:
    # the identity is the same, the states belong to each row.
    assert client.insert(Sync(account=1), _opts(by_args=True)).id == first.id
    conn.execute("UPDATE drover_jobs SET unique_states = 31 WHERE id = %s", (first.id,))
    assert not client.insert(Sync(account=1), _opts(by_args=True)).duplicate


# --- period ---------------------------------------------------------------------------------


def test_period_holds_after_completion_within_the_window(client: drover.Client, conn: Conn) -> None:
    opts = _opts(by_args=True, period=timedelta(hours=1))
    first = client.insert(Sync(account=1), opts)
    _finish(conn, first.id)
    again = client.insert(Sync(account=1), opts)
    assert again.duplicate
    assert again.id == first.id


def test_period_bucket_is_counted_on_the_database_clock(client: drover.Client, conn: Conn) -> None:
    first = client.insert(Sync(account=1), _opts(by_args=True, period=3600))
    row = conn.execute(
        "SELECT unique_bucket, floor(extract(epoch FROM created_at) / 3600)::bigint "
        "FROM drover_jobs WHERE id = %s",
        (first.id,),
    ).fetchone()
    assert row is not None
    assert row[0] == row[1]


def test_a_new_period_starts_a_new_job(client: drover.Client, conn: Conn) -> None:
    opts = _opts(by_args=True, period=3600)
    first = client.insert(Sync(account=1), opts)
    _finish(conn, first.id)
    # As if it had been inserted in the previous hour.
    conn.execute(
        "UPDATE drover_jobs SET unique_bucket = unique_bucket - 1 WHERE id = %s", (first.id,)
    )
    second = client.insert(Sync(account=1), opts)
    assert not second.duplicate
    # Even while the old one is still waiting: the bucket is part of the identity.
    conn.execute("UPDATE drover_jobs SET state = 'available' WHERE id = %s", (first.id,))
    conn.execute(
        "UPDATE drover_jobs SET unique_bucket = unique_bucket - 2 WHERE id = %s", (second.id,)
    )
    assert not client.insert(Sync(account=1), opts).duplicate


def test_periods_of_different_lengths_are_different_identities(
    client: drover.Client, conn: Conn
) -> None:
    client.insert(Sync(account=1), _opts(by_args=True, period=3600))
    assert not client.insert(Sync(account=1), _opts(by_args=True, period=60)).duplicate


# --- the old unique_key ---------------------------------------------------------------------


def test_unique_key_still_raises(client: drover.Client, conn: Conn) -> None:
    client.insert(Sync(account=1), drover.InsertOpts(unique_key="k"))
    with pytest.raises(drover.DuplicateJob):
        client.insert(Sync(account=1), drover.InsertOpts(unique_key="k"))
    # and the two forms do not see each other
    assert not client.insert(Sync(account=1), _opts(key="k")).duplicate


# --- debounce -------------------------------------------------------------------------------


def test_debounce_replaces_the_args_and_moves_the_due_time(
    client: drover.Client, conn: Conn
) -> None:
    opts = drover.InsertOpts(debounce=timedelta(minutes=5))
    rows = [client.insert(Sync(account=1, note=str(i)), opts) for i in range(3)]
    assert [r.duplicate for r in rows] == [False, True, True]
    assert {r.id for r in rows} == {rows[0].id}
    assert rows[0].state is drover.JobState.SCHEDULED
    assert rows[2].args == {"account": 1, "note": "2"}  # last wins
    assert rows[2].scheduled_at > rows[0].scheduled_at
    stored = client.get_job(rows[0].id)
    assert stored.args == {"account": 1, "note": "2"}
    assert stored.scheduled_at == rows[2].scheduled_at
    assert _count(conn) == 1


def test_debounce_due_time_is_one_window_after_the_last_insert(
    client: drover.Client, conn: Conn
) -> None:
    row = client.insert(Sync(account=1), drover.InsertOpts(debounce=90))
    found = conn.execute(
        "SELECT scheduled_at - created_at FROM drover_jobs WHERE id = %s", (row.id,)
    ).fetchone()
    assert found is not None
    assert found[0] == timedelta(seconds=90)


def test_debounce_identity_follows_unique(client: drover.Client, conn: Conn) -> None:
    opts = drover.InsertOpts(debounce=60, unique=drover.Unique(by_args=["account"]))
    a = client.insert(Sync(account=1, note="x"), opts)
    b = client.insert(Sync(account=2, note="x"), opts)
    c = client.insert(Sync(account=1, note="y"), opts)
    assert not b.duplicate
    assert c.duplicate
    assert c.id == a.id
    assert c.args["note"] == "y"


def test_debounce_after_the_job_started_makes_a_new_job(client: drover.Client, conn: Conn) -> None:
    opts = drover.InsertOpts(debounce=60)
    first = client.insert(Sync(account=1, note="old"), opts)
    conn.execute("UPDATE drover_jobs SET state = 'running', attempt = 1 WHERE id = %s", (first.id,))
    second = client.insert(Sync(account=1, note="new"), opts)
    assert not second.duplicate
    assert second.id != first.id
    running = client.get_job(first.id)
    assert running.args["note"] == "old"  # a started job's args are never replaced
    # The running job handed its identity on: its snooze or retry cannot collide.
    conn.execute("UPDATE drover_jobs SET state = 'scheduled' WHERE id = %s", (first.id,))
    assert client.insert(Sync(account=1, note="newer"), opts).id == second.id


def test_debounce_of_a_due_job_not_yet_claimed_moves_it_back(
    client: drover.Client, conn: Conn
) -> None:
    opts = drover.InsertOpts(debounce=60)
    first = client.insert(Sync(account=1), opts)
    conn.execute(
        "UPDATE drover_jobs SET state = 'available', scheduled_at = now() WHERE id = %s",
        (first.id,),
    )
    again = client.insert(Sync(account=1, note="later"), opts)
    assert again.id == first.id
    assert again.state is drover.JobState.SCHEDULED


# --- throttle -------------------------------------------------------------------------------


def test_throttle_keeps_the_first(client: drover.Client, conn: Conn) -> None:
    opts = drover.InsertOpts(throttle=timedelta(minutes=10))
    first = client.insert(Sync(account=1, note="first"), opts)
    rows = [client.insert(Sync(account=1, note=str(i)), opts) for i in range(3)]
    assert not first.duplicate
    assert first.state is drover.JobState.AVAILABLE
    assert all(r.duplicate and r.id == first.id for r in rows)
    assert client.get_job(first.id).args["note"] == "first"
    _finish(conn, first.id)  # completing does not end the window
    assert client.insert(Sync(account=1), opts).id == first.id


def test_throttle_window_counts_from_the_first_insert(client: drover.Client, conn: Conn) -> None:
    opts = drover.InsertOpts(throttle=timedelta(minutes=10))
    first = client.insert(Sync(account=1), opts)
    conn.execute(
        "UPDATE drover_jobs SET created_at = now() - interval '10 minutes' WHERE id = %s",
        (first.id,),
    )
    second = client.insert(Sync(account=1), opts)
    assert not second.duplicate
    assert second.id != first.id
    released = conn.execute(
        "SELECT unique_states FROM drover_jobs WHERE id = %s", (first.id,)
    ).fetchone()
    assert released == (0,)
    assert client.insert(Sync(account=1), opts).id == second.id


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: drover.Unique(period="1h"), "Unique.period must be a timedelta or"),  # type: ignore[arg-type]
        (lambda: drover.Unique(period=0), "Unique.period must be at least 1 millisecond"),
        (lambda: drover.Unique(period=-5), "at least 1 millisecond"),
        (lambda: drover.Unique(by_args="account"), "Unique.by_args must be True, False or a list"),
        (lambda: drover.Unique(by_args=[]), "empty list"),
        (lambda: drover.Unique(states=["available", "running"]), "leaves out pending"),
        (lambda: drover.Unique(states=["runing"]), "did you mean 'running'"),
        (lambda: drover.Unique(key=5), "Unique.key must be a str"),  # type: ignore[arg-type]
        (lambda: drover.InsertOpts(unique="yes"), "must be a drover.Unique"),  # type: ignore[arg-type]
        (lambda: drover.InsertOpts(debounce="5m"), "InsertOpts.debounce must be a timedelta"),  # type: ignore[arg-type]
        (lambda: drover.InsertOpts(throttle=0), "InsertOpts.throttle must be at least"),
        (
            lambda: drover.InsertOpts(debounce=5, unique=drover.Unique(period=60)),
            "debounce cannot be combined with a unique period",
        ),
        (
            lambda: drover.InsertOpts(throttle=5, unique=drover.Unique(period=60)),
            "throttle cannot be combined with a unique period",
        ),
        (lambda: drover.InsertOpts(debounce=5, throttle=5), "cannot be combined"),
        (
            lambda: drover.InsertOpts(
                debounce=5, unique=drover.Unique(states=drover.job.ACTIVE_STATES)
            ),
            "Unique.states",
        ),
        (
            lambda: drover.InsertOpts(debounce=5, scheduled_at=datetime.now(UTC)),
            "debounce cannot be combined with scheduled_at",
        ),
        (
            lambda: drover.InsertOpts(unique_key="k", unique=drover.Unique()),
            "unique_key cannot be combined",
        ),
        (lambda: drover.InsertOpts(depends_on=[1], throttle=5), "depends_on cannot be combined"),
    ],
)
def test_bad_options_are_refused_when_built(build: Any, message: str) -> None:
    with pytest.raises(drover.InvalidInsertOpts, match=message):
        build()


def test_an_unknown_args_field_is_refused_at_insert_and_writes_nothing(
    client: drover.Client, conn: Conn
) -> None:
    opts = _opts(by_args=["acount"])
    with pytest.raises(drover.InvalidInsertOpts, match="did you mean 'account'"):
        client.insert(Sync(account=1), opts)
    with pytest.raises(drover.InvalidInsertOpts, match="item 1: Unique.by_args names 'acount'"):
        client.insert_many([Sync(account=1), (Sync(account=2), opts)])
    with conn.transaction(), pytest.raises(drover.InvalidInsertOpts):
        client.insert_tx(conn, Sync(account=1), opts)
    assert _count(conn) == 0


# --- transactions and bulk ------------------------------------------------------------------


def test_insert_tx_flags_and_rolls_back(client: drover.Client, db_url: str, conn: Conn) -> None:
    opts = _opts(by_args=True)
    with psycopg.connect(db_url) as tx_conn:
        first = client.insert_tx(tx_conn, Sync(account=1), opts)
        again = client.insert_tx(tx_conn, Sync(account=1), opts)
        assert again.duplicate
        assert again.id == first.id
        tx_conn.rollback()
    assert _count(conn) == 0
    with psycopg.connect(db_url) as tx_conn:
        client.insert_tx(tx_conn, Sync(account=1), opts)
    assert client.insert(Sync(account=1), opts).duplicate


def test_insert_many_flags_existing_and_in_batch_duplicates(
    client: drover.Client, conn: Conn
) -> None:
    opts = _opts(by_args=["account"])
    held = client.insert(Sync(account=1), opts)
    rows = client.insert_many(
        [
            (Sync(account=1, note="a"), opts),  # held by an existing job
            (Sync(account=2, note="b"), opts),  # new
            Sync(account=2),  # plain: always a new job
            (Sync(account=2, note="c"), opts),  # held by item 1
            (Sync(account=3), None),
        ]
    )
    assert [r.duplicate for r in rows] == [True, False, False, True, False]
    assert rows[0].id == held.id
    assert rows[3].id == rows[1].id
    assert rows[3].args["note"] == "b"
    assert _count(conn) == 4


def test_insert_many_debounce_and_throttle_in_one_batch(client: drover.Client, conn: Conn) -> None:
    debounce = drover.InsertOpts(debounce=60)
    throttle = drover.InsertOpts(throttle=60)
    rows = client.insert_many(
        [
            (Sync(account=1, note="1"), debounce),
            (Other(account=1), throttle),
            (Sync(account=1, note="2"), debounce),
            (Other(account=2), throttle),
        ]
    )
    assert [r.duplicate for r in rows] == [False, False, True, True]
    assert rows[2].id == rows[0].id
    assert rows[2].args["note"] == "2"
    assert rows[3].id == rows[1].id
    assert client.get_job(rows[0].id).args["note"] == "2"
    assert _count(conn) == 2


def test_insert_many_with_a_taken_unique_key_writes_nothing(
    client: drover.Client, conn: Conn
) -> None:
    client.insert(Sync(account=9), drover.InsertOpts(unique_key="k"))
    with pytest.raises(drover.DuplicateJob, match="item 1"):
        client.insert_many(
            [
                (Sync(account=1), _opts(by_args=True)),
                (Sync(account=2), drover.InsertOpts(unique_key="k")),
            ]
        )
    assert _count(conn) == 1


def test_insert_many_tx_keeps_the_callers_transaction(
    client: drover.Client, db_url: str, conn: Conn
) -> None:
    opts = _opts(by_args=True)
    client.insert(Sync(account=9), drover.InsertOpts(unique_key="k"))
    with psycopg.connect(db_url) as tx_conn:
        rows = client.insert_many_tx(tx_conn, [(Sync(account=1), opts), (Sync(account=1), opts)])
        assert [r.duplicate for r in rows] == [False, True]
        with pytest.raises(drover.DuplicateJob):
            client.insert_many_tx(
                tx_conn,
                [(Sync(account=5), opts), (Sync(account=6), drover.InsertOpts(unique_key="k"))],
            )
        client.insert(Sync(account=7), drover.InsertOpts(queue="after"))  # own connection
        tx_conn.execute("SELECT 1")  # the transaction is still usable
    assert _count(conn, "kind = 'sync' AND args->>'account' = '1'") == 1
    assert _count(conn, "args->>'account' IN ('5', '6')") == 0


def test_workflows_and_dependent_batches_refuse_the_forms(
    client: drover.Client, conn: Conn
) -> None:
    opts = _opts(by_args=True)
    with pytest.raises(drover.InvalidInsertOpts, match="workflow job 1: unique, debounce"):
        client.insert(drover.chain(Sync(account=1), (Sync(account=2), opts)))
    first = client.insert(Sync(account=9))
    with pytest.raises(drover.InvalidInsertOpts, match="item 0: unique, debounce"):
        client.insert_many(
            [(Sync(account=1), opts), (Sync(account=2), drover.InsertOpts(depends_on=[first]))]
        )
    assert _count(conn) == 1


def test_an_operator_retry_of_a_job_whose_identity_is_held_again_is_refused(
    client: drover.Client, db_url: str, conn: Conn
) -> None:
    opts = _opts(by_args=True)
    first = client.insert(Sync(account=1), opts)
    _finish(conn, first.id, "dead")
    second = client.insert(Sync(account=1), opts)
    assert not second.duplicate
    with drover.Inspector(db_url) as inspector, pytest.raises(drover.DuplicateJob):
        inspector.retry_job(first.id)
    assert client.get_job(first.id).state is drover.JobState.DEAD


def test_bulk_retries_skip_a_job_whose_identity_is_held_again(
    client: drover.Client, db_url: str, conn: Conn
) -> None:
    opts = _opts(by_args=True)
    first = client.insert(Sync(account=1), opts)
    _finish(conn, first.id, "dead")
    holder = client.insert(Sync(account=1), opts)
    twin_a = client.insert(Sync(account=2), opts)
    _finish(conn, twin_a.id, "dead")
    twin_b = client.insert(Sync(account=2), opts)
    _finish(conn, twin_b.id, "dead")
    with drover.Inspector(db_url) as inspector:
        assert inspector.retry_jobs([first.id, twin_a.id, twin_b.id]) == [twin_b.id]
    assert client.get_job(first.id).state is drover.JobState.DEAD
    assert client.get_job(holder.id).state is drover.JobState.AVAILABLE
    assert client.get_job(twin_a.id).state is drover.JobState.DEAD
    # And the retry of every dead job of the kind: twin_a and first stay dead.
    _finish(conn, twin_b.id, "dead")
    with drover.Inspector(db_url) as inspector:
        assert inspector.retry_dead("sync") == 1
    assert client.get_job(twin_b.id).state is drover.JobState.AVAILABLE
    assert client.get_job(first.id).state is drover.JobState.DEAD


def test_inspector_enqueue_refuses_the_forms(db_url: str, conn: Conn) -> None:
    with drover.Inspector(db_url) as inspector, pytest.raises(drover.InvalidInsertOpts):
        inspector.enqueue("sync", '{"account": 1}', drover.InsertOpts(throttle=5))
    assert _count(conn) == 0


# --- with tags and metadata ----------------------------------------------------------------


@pytest.mark.parametrize(
    "unique",
    [
        {"unique": drover.Unique(by_args=True)},
        {"unique": drover.Unique(by_args=True, period=timedelta(hours=1))},
        {"debounce": timedelta(minutes=5)},
        {"throttle": timedelta(minutes=5)},
    ],
    ids=["unique", "period", "debounce", "throttle"],
)
def test_a_unique_insert_keeps_its_tags_and_metadata(
    client: drover.Client, conn: Conn, unique: dict[str, Any]
) -> None:
    opts = drover.InsertOpts(tags=["billing", "eu"], meta={"source": "api"}, **unique)
    first = client.insert(Sync(account=7), opts)
    again = client.insert(Sync(account=7), opts)
    assert not first.duplicate
    assert again.duplicate
    assert again.id == first.id
    stored = conn.execute(
        "SELECT tags, meta FROM drover_jobs WHERE id = %s", (first.id,)
    ).fetchone()
    assert stored == (["billing", "eu"], {"source": "api"})
    assert list(first.tags) == ["billing", "eu"]
    assert _count(conn) == 1


def test_insert_many_with_unique_options_keeps_each_item_s_tags(
    client: drover.Client, conn: Conn
) -> None:
    rows = client.insert_many(
        [
            (Sync(account=1), drover.InsertOpts(unique=drover.Unique(by_args=True), tags=["a"])),
            (Sync(account=2), drover.InsertOpts(tags=["b"], meta={"n": 2})),
            (Sync(account=1), drover.InsertOpts(unique=drover.Unique(by_args=True), tags=["c"])),
        ]
    )
    assert [r.duplicate for r in rows] == [False, False, True]
    stored = conn.execute(
        "SELECT args->>'account', tags, meta FROM drover_jobs ORDER BY id"
    ).fetchall()
    assert stored == [("1", ["a"], {}), ("2", ["b"], {"n": 2})]


def test_debounce_last_insert_wins_for_tags_and_metadata(client: drover.Client, conn: Conn) -> None:
    first = client.insert(
        Sync(account=3), drover.InsertOpts(debounce=60, tags=["old"], meta={"v": 1})
    )
    again = client.insert(
        Sync(account=3), drover.InsertOpts(debounce=60, tags=["new"], meta={"v": 2})
    )
    assert again.duplicate and again.id == first.id
    stored = conn.execute(
        "SELECT tags, meta FROM drover_jobs WHERE id = %s", (first.id,)
    ).fetchone()
    assert stored == (["new"], {"v": 2})
