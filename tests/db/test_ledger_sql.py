"""The duplicate ledger's statements (ADR 0037): bounded, off the normal path, never waiting."""

from __future__ import annotations

from typing import Any

import psycopg
from jobdb import Conn

import drover
from drover._db import claims
from drover._db.ledger import (
    LedgerNote,
    job_get_with_ledger,
    job_ledger_append,
    stale_write_note,
)
from drover._db.queries import query
from drover._db.store import Store
from drover._records import Outcome, WriteResult
from drover.job import JobState
from drover.ledger import LEDGER_MAX_ENTRIES, parse_ledger


class Plain(drover.JobArgs, kind="ledger_plain"):
    pass


def _insert(db_url: str, n: int = 1) -> list[int]:
    client = drover.Client(db_url)
    try:
        return [r.id for r in client.insert_many([Plain() for _ in range(n)])]
    finally:
        client.close()


def _updates(conn: Conn) -> int:
    found = conn.execute(
        "SELECT n_tup_upd FROM pg_stat_xact_user_tables WHERE relname = 'drover_jobs'"
    ).fetchone()
    assert found is not None
    return int(found[0])


def test_the_normal_claim_and_completion_write_nothing_more(db_url: str, conn: Conn) -> None:
    # The hot path's statements never mention the ledger...
    for name in (
        "job_claim",
        "job_claim_limited",
        "job_complete",
        "job_record",
        "job_complete_many",
        "job_record_outcomes",
    ):
        assert "ledger" not in query(name), name
    [job_id] = _insert(db_url)
    # ...and a claim and its completion write exactly two row versions, as before
    # the ledger: the counters of this transaction alone, not a timing.
    with conn.transaction():
        before = _updates(conn)
        [row] = claims.job_claim(conn, "default", 1, 30.0, "w")
        [recorded] = claims.job_record_outcomes(
            conn, [Outcome(row.id, row.attempt, JobState.COMPLETED)]
        )
        assert recorded.result is WriteResult.APPLIED
        assert _updates(conn) - before == 2
    found = job_get_with_ledger(conn, job_id)
    assert found is not None and found.ledger == ()
    assert conn.execute("SELECT ledger FROM drover_jobs WHERE id = %s", (job_id,)).fetchone() == (
        None,
    )


def test_the_ledger_keeps_the_newest_entries_stamped_by_the_database(
    db_url: str, conn: Conn
) -> None:
    [job_id] = _insert(db_url)
    notes = [
        stale_write_note(job_id, n, worker="w", write="progress", refused="lease lost")
        for n in range(LEDGER_MAX_ENTRIES + 10)
    ]
    assert job_ledger_append(conn, notes[:5]) == {job_id}
    assert job_ledger_append(conn, notes[5:]) == {job_id}
    found = job_get_with_ledger(conn, job_id)
    assert found is not None
    assert [e.attempt for e in found.ledger] == list(range(10, LEDGER_MAX_ENTRIES + 10))
    now = conn.execute("SELECT now()").fetchone()
    assert now is not None
    assert all(e.at is not None and e.at <= now[0] for e in found.ledger)


def test_an_append_skips_a_row_another_transaction_holds_instead_of_waiting(
    db_url: str, conn: Conn
) -> None:
    [job_id, other] = _insert(db_url, 2)
    notes = [
        LedgerNote(job_id, {"event": "stale_write", "attempt": 1, "worker": "w"}),
        LedgerNote(other, {"event": "stale_write", "attempt": 1, "worker": "w"}),
    ]
    with psycopg.connect(db_url) as holder:
        holder.execute("SELECT 1 FROM drover_jobs WHERE id = %s FOR UPDATE", (job_id,))
        assert job_ledger_append(conn, notes) == {other}
    assert job_ledger_append(conn, notes[:1]) == {job_id}
    assert job_ledger_append(conn, [LedgerNote(2**62, {"event": "x", "attempt": 1})]) == set()


def test_a_rescue_names_the_lease_holder_the_rescuer_and_the_next_state(
    db_url: str, conn: Conn
) -> None:
    [job_id] = _insert(db_url)
    conn.execute(
        "UPDATE drover_jobs SET state = 'running', attempt = 1, leased_by = 'W (pid 1 on h)', "
        "leased_until = now() - interval '1 second' WHERE id = %s",
        (job_id,),
    )
    store = Store.open(db_url, who="test", max_size=1)
    try:

        def decide(row: drover.JobRow) -> Outcome:
            return Outcome(row.id, row.attempt, JobState.RETRYABLE)

        found, [recorded] = store.rescue(10, 30.0, decide, by="R (pid 2 on h)")
        assert (found, recorded.result) == (1, WriteResult.APPLIED)
        row = store.operator.get_job(job_id)
    finally:
        store.close()
    assert row is not None and row.state is JobState.RETRYABLE
    [entry] = row.ledger
    assert (entry.event, entry.attempt, entry.worker, entry.by, entry.to) == (
        "rescued",
        1,
        "W (pid 1 on h)",
        "R (pid 2 on h)",
        "retryable",
    )


def test_parse_ledger_is_lenient_with_what_it_does_not_know() -> None:
    assert parse_ledger(None) == ()
    assert parse_ledger("{}") == ()
    text = (
        '[{"event": "rescued", "attempt": 2, "at": "2026-01-02T03:04:05.000006Z", "new": 1},'
        ' 7, {"event": "stale_write", "attempt": "x", "at": "soon"}]'
    )
    first, second = parse_ledger(text)
    assert (first.event, first.attempt, first.at is not None) == ("rescued", 2, True)
    assert (second.attempt, second.at, second.write) == (0, None, None)
    as_dict: dict[str, Any] = first.as_dict()
    assert as_dict["at"] == "2026-01-02T03:04:05.000006+00:00"
