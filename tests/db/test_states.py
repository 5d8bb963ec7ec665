"""The state sets are defined once, in drover/job.py; SQL and indexes must say the same thing."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import psycopg
import pytest

import drover
from drover import job
from drover._db.queries import expand_state_sets, query, sql_root
from drover.job import JobState
from drover.ops import metrics

Conn = psycopg.Connection[tuple[Any, ...]]

STATE_NAMES = "|".join(s.value for s in JobState)
LITERAL_LIST = re.compile(rf"IN\s*\(\s*'({STATE_NAMES})'", re.IGNORECASE)


def _quoted(states: tuple[JobState, ...]) -> str:
    return ", ".join(f"'{s.value}'" for s in states)


def _query_files() -> list[tuple[str, str]]:
    folder = sql_root() / "queries"
    return [
        (e.name, e.read_text(encoding="utf-8")) for e in folder.iterdir() if e.name.endswith(".sql")
    ]


def test_no_query_file_spells_out_a_state_list() -> None:
    for name, text in _query_files():
        code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
        found = LITERAL_LIST.findall(code)
        assert not found, f"{name} lists states by hand; use {{{{states:<set>}}}} instead"


def test_every_state_set_used_in_sql_expands_to_the_python_tuple() -> None:
    used: set[str] = set()
    for _, text in _query_files():
        used |= set(re.findall(r"\{\{states:([a-z_]+)\}\}", text))
    assert used <= set(job.STATE_SETS), used - set(job.STATE_SETS)
    for name in used:
        expanded = expand_state_sets(f"state IN ({{{{states:{name}}}}})", "test")
        assert expanded == f"state IN ({_quoted(job.STATE_SETS[name])})"


@pytest.mark.parametrize(
    ("query_name", "states"),
    [
        ("job_claim", job.WAITING_STATES),
        ("stats_oldest_age", job.WAITING_STATES),
        ("job_insert", job.ACTIVE_STATES),
        ("job_insert_rows", job.ACTIVE_STATES),
        ("job_insert_batch_apply", job.ACTIVE_STATES),
        ("job_cancel", job.CANCELLABLE_STATES),
        ("job_retry", job.RETRIABLE_STATES),
        ("job_record_outcomes", job.TERMINAL_STATES),
        ("job_record", job.TERMINAL_STATES),
    ],
)
def test_loaded_queries_carry_the_python_sets(
    query_name: str, states: tuple[JobState, ...]
) -> None:
    text = query(query_name)
    assert f"IN ({_quoted(states)})" in text
    assert "{{" not in text


def test_an_unknown_state_set_is_refused_when_loaded() -> None:
    with pytest.raises(
        RuntimeError, match=r"jobs.sql: unknown state set '\{\{states:finished\}\}'"
    ):
        expand_state_sets("state IN ({{states:finished}})", "jobs.sql")


def test_the_sets_relate_as_documented() -> None:
    every = set(JobState)
    assert set(job.ACTIVE_STATES) == set(job.WAITING_STATES) | {JobState.PENDING, JobState.RUNNING}
    assert set(job.TERMINAL_STATES) == every - set(job.ACTIVE_STATES)
    assert set(job.PUBLISHED_STATES) == every - {JobState.COMPLETED, JobState.CANCELLED}
    assert set(job.CANCELLABLE_STATES) == set(job.WAITING_STATES) | {
        JobState.PENDING,
        JobState.DEAD,
    }
    assert set(job.UNSUCCESSFUL_STATES) == set(job.TERMINAL_STATES) - {JobState.COMPLETED}
    assert tuple(s.value for s in job.PUBLISHED_STATES) == metrics.PUBLISHED_STATES
    retention_fields = [f.name for f in dataclasses.fields(drover.Retention)]
    assert retention_fields == [s.value for s in job.TERMINAL_STATES]


def _index_states(conn: Conn, index: str) -> set[str]:
    row = conn.execute(
        "SELECT pg_get_expr(i.indpred, i.indrelid) FROM pg_index i "
        "WHERE i.indexrelid = %s::regclass",
        (index,),
    ).fetchone()
    assert row is not None and row[0], f"{index} has no predicate"
    return set(re.findall(r"'([a-z]+)'::drover_job_state", row[0]))


def test_partial_index_predicates_in_the_database_match_the_sets(conn: Conn) -> None:
    assert _index_states(conn, "drover_jobs_fetch_v3_idx") == {s.value for s in job.WAITING_STATES}
    assert _index_states(conn, "drover_jobs_unique_active_v2_idx") == {
        s.value for s in job.ACTIVE_STATES
    }
    assert _index_states(conn, "drover_jobs_lease_idx") == {"running"}
    assert _index_states(conn, "drover_jobs_dead_idx") == {"dead"}
