"""`drover roles` without a database: the names it accepts, what --no-retention leaves out."""

from __future__ import annotations

import json
from typing import Any

import pytest
from clihelp import invoke

import drover
from drover._db.roles import render_roles


def test_the_default_names_and_schema_fill_every_placeholder() -> None:
    text = render_roles()
    assert "{{" not in text and "--!" not in text
    for role in ("drover_producer", "drover_worker", "drover_reader"):
        assert f"CREATE ROLE {role} NOLOGIN;" in text
    assert "GRANT DELETE ON public.drover_jobs TO drover_worker;" in text
    assert text.count("BEGIN;") == 1 and text.rstrip().endswith("COMMIT;")


def test_no_retention_leaves_the_workers_delete_out() -> None:
    text = render_roles(retention=False, schema="jobs")
    assert "DELETE ON jobs.drover_jobs" not in text
    assert "GRANT SELECT, INSERT, UPDATE ON jobs.drover_jobs TO drover_worker;" in text
    assert "public." not in text


def test_the_worker_and_reader_roles_may_read_all_stats_unless_told_not_to() -> None:
    text = render_roles()
    assert "GRANT pg_read_all_stats TO drover_worker, drover_reader;" in text
    assert "EXCEPTION WHEN insufficient_privilege THEN" in text
    assert "-- stats" not in text and "$stats$;" in text
    without = render_roles(read_all_stats=False)
    assert "pg_read_all_stats" not in without and "$stats$" not in without
    as_json = json.loads(invoke(["roles", "--no-read-all-stats", "--json"]).output)
    assert as_json["read_all_stats"] is False and as_json["sql"] == without


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("producer", "Mixed"),
        ("worker", "x; DROP TABLE drover_jobs"),
        ("reader", ""),
        ("schema", "1abc"),
        ("producer", "a" * 64),
    ],
)
def test_a_name_that_would_need_quoting_is_refused(field: str, value: str) -> None:
    names: dict[str, Any] = {field: value}
    with pytest.raises(drover.InvalidArgument, match=f"--{field} must be"):
        render_roles(**names)


def test_three_roles_need_three_names() -> None:
    with pytest.raises(drover.InvalidArgument, match="three names"):
        render_roles(producer="app", worker="app")


def test_the_cli_prints_the_sql_and_exits_2_on_a_bad_name() -> None:
    result = invoke(["roles", "--worker", "jobs_worker", "--no-retention"])
    assert result.exit_code == 0, result.output
    assert "CREATE ROLE jobs_worker NOLOGIN;" in result.output
    assert "GRANT DELETE" not in result.output
    as_json = json.loads(invoke(["roles", "--json"]).output)
    assert as_json["sql"] == render_roles() and as_json["retention"] is True
    bad = invoke(["roles", "--reader", "Bad"])
    assert bad.exit_code == 2
    assert bad.output.strip().splitlines() == [
        "drover: --reader must be 1 to 63 lowercase letters, digits and _ not starting "
        "with a digit, got 'Bad'"
    ]
