"""Tags and metadata at insert, on every insert path, and the inspector's tag filter (ADR 0032)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from jobdb import Conn, assert_stored, table_snapshot

import drover


class Mail(drover.JobArgs, kind="tags_mail"):
    to: str = "ada"


def _opts(**fields: Any) -> drover.InsertOpts:
    return drover.InsertOpts(tags=["billing", "eu"], meta={"owner": "ops", "n": [1, 2]}, **fields)


def _stored(conn: Conn, job_id: int) -> tuple[Any, ...]:
    row = conn.execute("SELECT tags, meta FROM drover_jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return tuple(row)


EXPECTED = (["billing", "eu"], {"owner": "ops", "n": [1, 2]})


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"unique_key": "k"},
        {"scheduled_at": datetime.now(UTC) + timedelta(hours=1)},
    ],
    ids=["now", "unique", "scheduled"],
)
def test_insert_stores_tags_and_meta(client: drover.Client, conn: Conn, fields: Any) -> None:
    row = client.insert(Mail(), _opts(**fields))
    assert (list(row.tags), row.meta) == EXPECTED
    assert _stored(conn, row.id) == EXPECTED
    assert_stored(client, [row])


def test_a_job_without_tags_or_meta_has_empty_ones(client: drover.Client, conn: Conn) -> None:
    row = client.insert(Mail())
    assert (row.tags, row.meta, row.progress, row.progress_message) == ((), {}, None, None)
    assert _stored(conn, row.id) == ([], {})
    assert_stored(client, [row])


@pytest.mark.parametrize("unique", [False, True], ids=["plain", "unique"])
def test_insert_many_stores_tags_and_meta(client: drover.Client, conn: Conn, unique: bool) -> None:
    extra = {"unique_key": "u"} if unique else {}
    rows = client.insert_many(
        [Mail(to="a"), (Mail(to="b"), _opts(**extra)), (Mail(to="c"), drover.InsertOpts())]
    )
    assert [(list(r.tags), dict(r.meta)) for r in rows] == [([], {}), EXPECTED, ([], {})]
    assert _stored(conn, rows[1].id) == EXPECTED
    assert_stored(client, rows)


def test_insert_tx_stores_tags_and_meta(client: drover.Client, db_url: str) -> None:
    with psycopg.connect(db_url) as tx:
        one = client.insert_tx(tx, Mail(), _opts())
        many = client.insert_many_tx(tx, [(Mail(to="x"), _opts())])
    assert_stored(client, [one, *many])
    assert (list(one.tags), one.meta) == EXPECTED


def test_concurrent_single_inserts_carry_their_own_tags(client: drover.Client) -> None:
    # Inserts made at once are combined into one statement (job_insert_rows).
    import threading

    rows: dict[int, drover.JobRow] = {}
    start = threading.Barrier(8)

    def insert(i: int) -> None:
        start.wait()
        opts = drover.InsertOpts(tags=[f"t{i}"], meta={"i": i}) if i % 2 else None
        rows[i] = client.insert(Mail(to=str(i)), opts)

    threads = [threading.Thread(target=insert, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, row in rows.items():
        assert row.tags == ((f"t{i}",) if i % 2 else ())
        assert row.meta == ({"i": i} if i % 2 else {})
    assert_stored(client, list(rows.values()))


def test_a_workflow_step_keeps_its_tags(client: drover.Client, conn: Conn) -> None:
    flow = client.insert(drover.Chain([Mail(to="first"), (Mail(to="second"), _opts())]))
    assert _stored(conn, flow.jobs[1].id) == EXPECTED
    assert _stored(conn, flow.jobs[0].id) == ([], {})
    assert_stored(client, list(flow.jobs))


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        ({"tags": "billing"}, "must be a list of strings"),
        ({"tags": [1]}, "a tag must be a str"),
        ({"tags": [""]}, "empty"),
        ({"tags": [" padded"]}, "leading or trailing spaces"),
        ({"tags": ["a,b"]}, "comma"),
        ({"tags": ["new\nline"]}, "control character"),
        ({"tags": ["x" * 65]}, "65 characters long; the maximum is 64"),
        ({"tags": [f"t{i}" for i in range(21)]}, "21 tags; the most is 20"),
        ({"meta": ["not", "a", "dict"]}, "must be a dict"),
        ({"meta": {1: "x"}}, "keys must be str"),
        ({"meta": {"at": datetime.now(UTC)}}, "not JSON"),
        ({"meta": {"v": float("nan")}}, "not JSON"),
        ({"meta": {"v": "a\x00b"}}, "NUL"),
        ({"meta": {"v": "x" * 70_000}}, "the maximum is 65536"),
    ],
)
def test_bad_tags_or_meta_are_refused_when_the_options_are_built(
    opts: dict[str, Any], message: str
) -> None:
    with pytest.raises(drover.InvalidInsertOpts, match=message):
        drover.InsertOpts(**opts)


def test_meta_changed_after_the_options_were_built_is_refused_and_nothing_is_written(
    client: drover.Client, conn: Conn
) -> None:
    meta: dict[str, Any] = {"ok": 1}
    opts = drover.InsertOpts(meta=meta)
    meta["bad"] = object()
    before = table_snapshot(conn)
    with pytest.raises(drover.InvalidInsertOpts, match="InsertOpts.meta is not JSON"):
        client.insert(Mail(), opts)
    with pytest.raises(drover.InvalidInsertOpts, match="InsertOpts.meta is not JSON"):
        client.insert_many([Mail(), (Mail(), opts)])
    assert table_snapshot(conn) == before


def test_list_jobs_keeps_the_jobs_carrying_every_tag_given(client: drover.Client) -> None:
    a = client.insert(Mail(), drover.InsertOpts(tags=["billing", "eu"]))
    b = client.insert(Mail(), drover.InsertOpts(tags=["billing"]))
    client.insert(Mail(), drover.InsertOpts(tags=["eu"]))
    client.insert(Mail())
    with drover.Inspector(client._store.pool) as inspector:
        assert [r.id for r in inspector.list_jobs(state="available", tags=["billing"])] == [
            b.id,
            a.id,
        ]
        assert [r.id for r in inspector.list_jobs(tags=["billing", "eu"])] == [a.id]
        assert inspector.list_jobs(tags=["nobody"]) == []
        assert len(inspector.list_jobs(tags=[])) == 4
        with pytest.raises(drover.InvalidArgument, match="comma"):
            inspector.list_jobs(tags=["a,b"])


def test_enqueue_by_kind_carries_tags_and_meta(client: drover.Client, conn: Conn) -> None:
    with drover.Inspector(client._store.pool) as inspector:
        row = inspector.enqueue("unknown_kind", "{}", _opts())
    assert _stored(conn, row.id) == EXPECTED
    assert_stored(client, [row])


def test_a_periodic_job_s_tags_reach_its_ticks() -> None:
    from drover.periodic import tick_opts

    job = drover.PeriodicJob(
        "tagged", "@every 1m", Mail(), opts=drover.InsertOpts(tags=["cron"], meta={"a": 1})
    )
    opts = tick_opts(job, datetime.now(UTC))
    assert (opts.tags, opts.meta) == (("cron",), {"a": 1})
