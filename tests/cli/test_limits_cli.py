"""``drover limits list | set | clear | delete`` on a real database, in-process and as a process."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from clihelp import cli, invoke, ok, one_line, refused, run
from deploy_files import check_drover_command, drover_commands_in_text
from test_cli import PASSWORD, UNREACHABLE, put

import drover
from drover._db.limits import limit_declare
from drover.limits import Limit, parse_limit_key

Conn = psycopg.Connection[tuple[Any, ...]]
DOCS = Path(__file__).resolve().parents[2] / "docs"
LIMIT_COMMANDS = [
    ["limits", "list"],
    ["limits", "set", "kind:a", "--concurrency", "2"],
    ["limits", "clear", "kind:a"],
    ["limits", "delete", "kind:a"],
]
LIMIT_KEYS = [
    "key",
    "scope",
    "target",
    "partition_by",
    "concurrency",
    "rate",
    "per_seconds",
    "counts",
    "source",
    "declared",
    "override",
    "running",
    "started",
    "partitions",
    "partitions_full",
    "busiest",
    "updated_at",
]


def _declare(conn: Conn, key: str, **values: Any) -> None:
    """What a starting client writes for a limit its code declares."""
    parsed = parse_limit_key(key)
    limit_declare(conn, [(parsed, Limit(partition_by=parsed.partition_by, **values))])


def _rows(conn: Conn) -> list[tuple[Any, ...]]:
    """The limit rows with xmin: any write changes the result."""
    return conn.execute("SELECT xmin::text, * FROM drover_limits ORDER BY id").fetchall()


def _table(stdout: str) -> list[list[str]]:
    """The rows of the human table, split on whitespace, up to the first blank line."""
    lines = stdout.split("\n\n", 1)[0].splitlines()
    return [line.split() for line in lines]


# --- list -------------------------------------------------------------------------------------


def test_list_on_a_database_without_limits_says_so(db_url: str) -> None:
    assert ok(cli(db_url, "limits", "list")) == (
        "no limits: no code declares one and no operator set one\n"
    )
    assert json.loads(ok(cli(db_url, "limits", "list", "--json"))) == {"limits": []}


def test_list_shows_each_limit_with_its_values_source_and_use(db_url: str, conn: Conn) -> None:
    _declare(conn, "kind:render", concurrency=2)
    _declare(conn, "kind:sync[tenant]", concurrency=1)
    _declare(conn, "queue:bulk", rate=30, per="minute")
    for _ in range(2):
        put(conn, "running", kind="render")
    put(conn, "running", kind="sync", args={"tenant": "acme"})
    put(conn, "running", kind="sync", args={"tenant": 7})
    put(conn, "running", kind="sync", args={"tenant": 7})  # over its cap (set while running)
    with drover.Inspector(db_url) as inspector:
        inspector.set_limit("queue:bulk", rate=60)
        inspector.set_limit("queue:reports", concurrency=3)

    stdout = ok(cli(db_url, "limits", "list"))

    assert _table(stdout) == [
        ["LIMIT", "CONCURRENCY", "RUNNING", "RATE", "PER", "STARTED", "FULL", "SOURCE"],
        ["kind:render", "2", "2", "-", "-", "-", "yes", "declared"],
        ["kind:sync[tenant]", "1", "3", "-", "-", "-", "2/2", "declared"],
        ["queue:bulk", "-", "0", "60", "minute", "0", "no", "overridden"],
        ["queue:reports", "3", "0", "-", "-", "-", "no", "operator"],
    ]
    assert stdout.rstrip().endswith(
        "kind:sync[tenant] busiest: 7 (2 running, 0 started, full), "
        '"acme" (1 running, 0 started, full)'
    )

    document = json.loads(ok(cli(db_url, "--json", "limits", "list")))
    by_key = {d["key"]: d for d in document["limits"]}
    assert list(by_key) == ["kind:render", "kind:sync[tenant]", "queue:bulk", "queue:reports"]
    assert all(list(d) == LIMIT_KEYS for d in by_key.values())
    bulk = by_key["queue:bulk"]
    assert (bulk["scope"], bulk["target"], bulk["partition_by"]) == ("queue", "bulk", None)
    assert (bulk["rate"], bulk["per_seconds"], bulk["source"]) == (60, 60.0, "overridden")
    assert bulk["declared"] == {"concurrency": None, "rate": 30, "per_seconds": 60.0}
    assert bulk["override"] == {"concurrency": None, "rate": 60, "per_seconds": 60.0}
    assert bulk["updated_at"].endswith("Z")
    sync = by_key["kind:sync[tenant]"]
    assert sync["partition_by"] == "tenant"
    assert (sync["running"], sync["partitions"], sync["partitions_full"]) == (3, 2, 2)
    assert sync["busiest"][0] == {"value": "7", "running": 2, "started": 0, "full": True}
    assert by_key["queue:reports"]["declared"] is None


# --- set --------------------------------------------------------------------------------------


def test_set_creates_then_merges_and_prints_what_applies(db_url: str, conn: Conn) -> None:
    _declare(conn, "kind:a", concurrency=3, rate=10, per="minute")
    assert ok(cli(db_url, "limits", "set", "kind:a", "--rate", "20")) == (
        "kind:a: concurrency 3, rate 20 per minute "
        "(overridden; its code declares concurrency 3, rate 10 per minute)\n"
    )
    out = ok(cli(db_url, "limits", "set", "kind:a", "--concurrency", "5"))
    assert out.startswith("kind:a: concurrency 5, rate 20 per minute (overridden;")
    assert ok(cli(db_url, "limits", "set", "queue:q", "--rate", "4", "--per", "90s")) == (
        "queue:q: rate 4 per 90s (set by an operator; no code declares it)\n"
    )
    document = json.loads(
        ok(cli(db_url, "limits", "set", "kind:b[tenant_id]", "--concurrency", "1", "--json"))
    )
    assert list(document) == LIMIT_KEYS
    assert (document["key"], document["concurrency"], document["source"]) == (
        "kind:b[tenant_id]",
        1,
        "operator",
    )
    rows = conn.execute(
        "SELECT scope, target, partition_by, override_concurrency, override_rate, "
        "extract(epoch FROM override_per)::float8 FROM drover_limits ORDER BY id"
    ).fetchall()
    assert rows == [
        ("kind", "a", "", 5, 20, None),
        ("queue", "q", "", None, 4, 90.0),
        ("kind", "b", "tenant_id", 1, None, None),
    ]


@pytest.mark.parametrize(
    ("per", "seconds"), [("second", 1.0), ("minute", 60.0), ("hour", 3600.0), ("0.5", 0.5)]
)
def test_set_takes_a_period_by_name_or_in_seconds(
    db_url: str, conn: Conn, per: str, seconds: float
) -> None:
    ok(cli(db_url, "limits", "set", "kind:a", "--rate", "3", "--per", per))
    row = conn.execute("SELECT extract(epoch FROM override_per)::float8 FROM drover_limits")
    assert row.fetchone() == (seconds,)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["tenant:x", "--concurrency", "1"], "queue:NAME or kind:NAME"),
        (["kind:a[b.c]", "--concurrency", "1"], "top-level args field"),
        (["kind:" + "k" * 256, "--concurrency", "1"], "the maximum is 255"),
        (["kind:a"], "needs --concurrency N or --rate N"),
        (["kind:a", "--concurrency", "1", "--per", "minute"], "--per is the period of --rate"),
        (["kind:a", "--concurrency", "0"], "--concurrency must be between 1 and 2147483647"),
        (["kind:a", "--concurrency", "-4"], "--concurrency must be between 1 and"),
        (["kind:a", "--rate", "2147483648"], "--rate must be between 1 and"),
        (["kind:a", "--rate", "5", "--per", "fortnight"], "--per must be second, minute, hour"),
        (["kind:a", "--rate", "5", "--per", "nan"], "--per must be second, minute, hour"),
        (["kind:a", "--rate", "5", "--per", "0"], "--per must be more than 0"),
        (["kind:a", "--rate", "5", "--per", "90000"], "at most one day"),
    ],
)
def test_bad_set_input_is_a_usage_error_that_writes_nothing(
    db_url: str, conn: Conn, args: list[str], message: str
) -> None:
    _declare(conn, "kind:a", concurrency=2)
    before = _rows(conn)
    err = one_line(refused(cli(db_url, "limits", "set", *args), 2))
    assert message in err
    assert _rows(conn) == before


def test_a_value_that_is_not_a_number_is_a_usage_error(db_url: str, conn: Conn) -> None:
    result = cli(db_url, "limits", "set", "kind:a", "--concurrency", "lots")
    assert result.exit_code == 2
    assert "--concurrency" in result.stderr
    assert _rows(conn) == []


# --- clear and delete -------------------------------------------------------------------------


def test_clear_returns_to_the_declaration_or_removes_an_undeclared_limit(
    db_url: str, conn: Conn
) -> None:
    _declare(conn, "kind:a", concurrency=3)
    ok(cli(db_url, "limits", "set", "kind:a", "--concurrency", "9"))
    ok(cli(db_url, "limits", "set", "queue:q", "--rate", "2"))

    assert ok(cli(db_url, "limits", "clear", "kind:a")) == (
        "cleared the override of kind:a: concurrency 3, as its code declares\n"
    )
    assert ok(cli(db_url, "limits", "clear", "queue:q")) == "removed queue:q: no code declares it\n"
    assert conn.execute(
        "SELECT target, override_concurrency, overridden_at FROM drover_limits"
    ).fetchall() == [("a", None, None)]

    ok(cli(db_url, "limits", "set", "kind:a", "--rate", "1"))
    document = json.loads(ok(cli(db_url, "--json", "limits", "clear", "kind:a")))
    assert document["key"] == "kind:a" and document["cleared"] is True
    assert document["limit"]["source"] == "declared" and document["limit"]["rate"] is None


def test_clearing_or_deleting_nothing_exits_1_and_says_why(db_url: str, conn: Conn) -> None:
    _declare(conn, "kind:a", concurrency=3)
    before = _rows(conn)
    err = one_line(refused(cli(db_url, "limits", "clear", "kind:a"), 1))
    assert "limit kind:a has no override to clear" in err
    err = one_line(refused(cli(db_url, "limits", "clear", "kind:nope"), 1))
    assert "no limit kind:nope: nothing to clear" in err
    err = one_line(refused(cli(db_url, "limits", "delete", "queue:nope"), 1))
    assert "no limit queue:nope: nothing to delete" in err
    assert _rows(conn) == before


def test_delete_removes_a_declared_limit(db_url: str, conn: Conn) -> None:
    _declare(conn, "kind:a", concurrency=3)
    _declare(conn, "kind:b", concurrency=1)
    assert ok(cli(db_url, "limits", "delete", "kind:a")) == "deleted kind:a\n"
    assert conn.execute("SELECT target FROM drover_limits").fetchall() == [("b",)]
    assert json.loads(ok(cli(db_url, "limits", "delete", "kind:b", "--json"))) == {
        "key": "kind:b",
        "deleted": True,
    }


@pytest.mark.parametrize("command", ["clear", "delete"])
def test_a_bad_key_to_clear_or_delete_is_a_usage_error(
    db_url: str, conn: Conn, command: str
) -> None:
    _declare(conn, "kind:a", concurrency=3)
    before = _rows(conn)
    err = one_line(refused(cli(db_url, "limits", command, "kind:a\x00"), 2))
    assert "NUL" in err
    assert _rows(conn) == before


def test_limits_without_a_subcommand_or_key_is_a_usage_error(db_url: str) -> None:
    assert cli(db_url, "limits").exit_code == 2
    for command in ("set", "clear", "delete"):
        assert cli(db_url, "limits", command).exit_code == 2


# --- database problems, and as a real process -------------------------------------------------


@pytest.mark.parametrize("command", LIMIT_COMMANDS, ids=" ".join)
def test_no_database_url_is_a_usage_error(command: list[str]) -> None:
    err = one_line(refused(invoke(command), 2))
    assert "no database URL" in err


@pytest.mark.parametrize("command", LIMIT_COMMANDS, ids=" ".join)
def test_a_database_without_the_schema_is_refused(empty_db_url: str, command: list[str]) -> None:
    err = one_line(refused(cli(empty_db_url, *command), 1))
    assert "`drover migrate`" in err


@pytest.mark.parametrize("command", LIMIT_COMMANDS, ids=" ".join)
def test_an_unreachable_database_is_one_line_without_the_password(command: list[str]) -> None:
    started = time.monotonic()
    result = cli(UNREACHABLE, *command)
    assert time.monotonic() - started < 20  # not the pool's 30 s
    err = one_line(refused(result, 1))
    assert "127.0.0.1:1" in err
    assert PASSWORD not in result.output


def test_limits_as_subprocesses(db_url: str, conn: Conn) -> None:
    _declare(conn, "kind:render", concurrency=2)
    put(conn, "running", kind="render")

    listed = run("limits", "list", "--json", url=db_url)
    assert (listed.returncode, listed.stderr) == (0, ""), listed.stderr
    [render] = json.loads(listed.stdout)["limits"]
    assert (render["key"], render["running"], render["concurrency"]) == ("kind:render", 1, 2)

    set_ = run("limits", "set", "kind:render", "--concurrency", "4", url=db_url)
    assert (set_.returncode, set_.stderr) == (0, ""), set_.stderr
    assert set_.stdout.startswith("kind:render: concurrency 4 (overridden;")

    cleared = run("limits", "clear", "kind:render", url=db_url)
    assert cleared.returncode == 0, cleared.stderr
    assert (
        cleared.stdout
        == "cleared the override of kind:render: concurrency 2, as its code declares\n"
    )

    again = run("limits", "clear", "kind:render", url=db_url)
    assert (again.returncode, again.stdout) == (1, "")
    one_line(again.stderr)

    bad = run("limits", "set", "kind:render", "--concurrency", "0", url=db_url)
    assert (bad.returncode, bad.stdout) == (2, "")
    assert "--concurrency must be between 1" in one_line(bad.stderr)

    deleted = run("limits", "delete", "kind:render", url=db_url)
    assert (deleted.returncode, deleted.stdout) == (0, "deleted kind:render\n")
    assert _rows(conn) == []


def test_an_unreachable_database_as_a_subprocess_never_prints_the_password() -> None:
    result = run("limits", "list", "--database", UNREACHABLE, timeout=30)
    assert (result.returncode, result.stdout) == (1, "")
    one_line(result.stderr)
    assert PASSWORD not in result.stderr


def test_the_docs_use_real_limits_command_lines() -> None:
    lines = [
        words
        for page in ("operations.md", "flow-control.md", "status-page.md")
        for words in drover_commands_in_text((DOCS / page).read_text(encoding="utf-8"))
        if "limits" in words
    ]
    named = {" ".join(words[words.index("limits") :][:2]) for words in lines}
    assert named >= {"limits list", "limits set", "limits clear", "limits delete"}
    assert [p for words in lines for p in check_drover_command(words)] == []
