"""The rule that rewrites drover's SQL for a schema of its own (ADR 0043), token by token."""

from __future__ import annotations

import pytest

from drover._db.namespace import DEFAULT, Namespace, check_schema_name, namespace_for
from drover._db.qualify import qualify
from drover.errors import ConfigError, InvalidArgument

RELATIONS = {"drover_jobs", "drover_jobs_id_seq", "drover_limits"}
ROUTINES = {"drover_job_state", "drover_claim_limited"}


def _q(sql: str) -> str:
    return qualify(sql, "s", Namespace("s").channel, RELATIONS, ROUTINES)


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT * FROM drover_jobs j", 'SELECT * FROM "s".drover_jobs j'),
        ("UPDATE drover_jobs SET x = 1", 'UPDATE "s".drover_jobs SET x = 1'),
        ("SELECT 'running'::drover_job_state", "SELECT 'running'::\"s\".drover_job_state"),
        ("SELECT * FROM drover_claim_limited(%s)", 'SELECT * FROM "s".drover_claim_limited(%s)'),
        ("SELECT nextval('drover_jobs_id_seq')", "SELECT nextval('\"s\".drover_jobs_id_seq')"),
        ("SELECT 'drover_limits'::regclass", "SELECT '\"s\".drover_limits'::regclass"),
        ("SELECT pg_notify('drover', q)", "SELECT pg_notify('drover.s', q)"),
        ("SELECT pg_notify('drover_done', q)", "SELECT pg_notify('drover_done.s', q)"),
        ("LISTEN drover_cancel", 'LISTEN "drover_cancel.s"'),
        ("UNLISTEN drover", 'UNLISTEN "drover.s"'),
        # Left alone: text that merely looks like a name.
        ("SELECT 'drover_jobs is full'", "SELECT 'drover_jobs is full'"),
        ("SELECT 'drover'", "SELECT 'drover'"),
        ("SELECT 1 -- from drover_jobs", "SELECT 1 -- from drover_jobs"),
        ("SELECT 1 /* drover_jobs */", "SELECT 1 /* drover_jobs */"),
        ('SELECT "drover_jobs" FROM t', 'SELECT "drover_jobs" FROM t'),
        ("SELECT %(drover_jobs)s", "SELECT %(drover_jobs)s"),
        ("CREATE INDEX drover_jobs_x_idx ON t (a)", "CREATE INDEX drover_jobs_x_idx ON t (a)"),
        ("SELECT x.drover_jobs FROM t x", "SELECT x.drover_jobs FROM t x"),
        ("CREATE TEMP TABLE drover_insert_batch ()", "CREATE TEMP TABLE drover_insert_batch ()"),
        ("SELECT 'it''s drover_jobs'", "SELECT 'it''s drover_jobs'"),
        # Inside a dollar-quoted body the same rules apply.
        (
            "DO $x$ BEGIN PERFORM pg_notify('drover', q); DELETE FROM drover_jobs; END $x$",
            "DO $x$ BEGIN PERFORM pg_notify('drover.s', q); DELETE FROM \"s\".drover_jobs; END $x$",
        ),
    ],
)
def test_the_rule_rewrites_drovers_objects_and_channels_and_nothing_else(
    sql: str, expected: str
) -> None:
    assert _q(sql) == expected


def test_channels_only_rewrites_channels_for_migrations() -> None:
    sql = "CREATE FUNCTION f() AS $$ SELECT pg_notify('drover', 'q') FROM drover_jobs $$"
    assert qualify(sql, "s", Namespace("s").channel) == sql.replace("'drover'", "'drover.s'")


def test_the_default_namespace_changes_nothing() -> None:
    assert DEFAULT.default and DEFAULT.channel("drover") == "drover"
    assert DEFAULT.lock_key(7237970105436602370) == 7237970105436602370
    assert namespace_for(None) is DEFAULT and namespace_for("public") is DEFAULT


def test_each_schema_has_its_own_channels_and_lock_keys() -> None:
    a, b = Namespace("a"), Namespace("b")
    assert a.channel("drover") == "drover.a" != b.channel("drover")
    keys = {ns.lock_key(7237970105436602370) for ns in (DEFAULT, a, b)}
    assert len(keys) == 3
    assert all(-(1 << 63) <= k < (1 << 63) for k in keys)
    # Stable across processes and versions: a fixed digest, not hash().
    assert a.lock_key(1) == Namespace("a").lock_key(1)


def test_a_long_schemas_channels_fit_and_stay_apart() -> None:
    long_a, long_b = Namespace("x" * 60 + "a"), Namespace("x" * 60 + "b")
    for base in ("drover", "drover_cancel", "drover_done"):
        assert len(long_a.channel(base).encode()) <= 63
        assert long_a.channel(base) != long_b.channel(base)


@pytest.mark.parametrize(
    "bad", ["Upper", "pg_x", "1st", "", "a b", "a.b", 'a"b', "x" * 64, None, 3, "é"]
)
def test_one_validator_names_what_was_wrong(bad: object) -> None:
    with pytest.raises(InvalidArgument, match="--schema"):
        check_schema_name("--schema", bad)
    with pytest.raises(ConfigError, match="Config.schema"):
        check_schema_name("Config.schema", bad, ConfigError)
