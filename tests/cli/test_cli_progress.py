"""``drover`` and tags, metadata and progress: enqueue, list by tag, show (ADR 0032)."""

from __future__ import annotations

import json
from typing import Any

import psycopg
from clihelp import cli, ok, one_line, refused, run
from jobdb import table_snapshot

Conn = psycopg.Connection[tuple[Any, ...]]


def _stored(conn: Conn, job_id: int) -> tuple[Any, ...]:
    row = conn.execute("SELECT tags, meta FROM drover_jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return tuple(row)


def test_enqueue_with_tags_and_meta_then_list_by_tag(db_url: str, conn: Conn) -> None:
    meta = '{"owner": "ops"}'
    first = json.loads(
        ok(cli(db_url, "--json", "enqueue", "--kind", "k", "--tag", "billing,eu", "--meta", meta))
    )
    second = json.loads(ok(cli(db_url, "--json", "enqueue", "--kind", "k", "--tag", "billing")))
    assert _stored(conn, first["id"]) == (["billing", "eu"], {"owner": "ops"})
    assert (first["tags"], first["meta"]) == (["billing", "eu"], {"owner": "ops"})

    def listed(*flags: str) -> list[int]:
        rows = json.loads(ok(cli(db_url, "--json", "jobs", "list", "--state", "available", *flags)))
        return [r["id"] for r in rows]

    assert listed("--tag", "billing") == [second["id"], first["id"]]
    assert listed("--tag", "billing", "--tag", "eu") == [first["id"]]
    assert listed("--tag", "billing,eu") == [first["id"]]
    assert listed("--tag", "nobody") == []
    table = ok(cli(db_url, "jobs", "list", "--tag", "eu"))
    assert "TAGS" in table and "billing,eu" in table


def test_jobs_get_shows_progress_tags_and_meta(db_url: str, conn: Conn) -> None:
    row = conn.execute(
        "INSERT INTO drover_jobs (kind, args, state, attempt, progress, progress_message, meta, "
        "tags, leased_until) VALUES ('k', '{}', 'running', 1, 0.5, 'half way', "
        "'{\"rows\": 3}', '{a,b}', now() + interval '1 hour') RETURNING id"
    ).fetchone()
    assert row is not None
    shown = ok(cli(db_url, "jobs", "get", str(row[0])))
    assert "progress:     50% (half way)" in shown
    assert "tags:         a, b" in shown
    assert '"rows": 3' in shown
    document = json.loads(ok(cli(db_url, "--json", "jobs", "get", str(row[0]))))
    assert (document["progress"], document["progress_message"]) == (0.5, "half way")


def test_bad_tags_and_meta_are_usage_errors_that_write_nothing(db_url: str, conn: Conn) -> None:
    before = table_snapshot(conn)
    for flags, message in [
        (["--tag", "x" * 65], "the maximum is 64"),
        (["--meta", "[1]"], "--meta must be a JSON object"),
        (["--meta", "{nope"], "--meta is not valid JSON"),
        (["--meta", json.dumps({"v": "x" * 70_000})], "--meta: InsertOpts.meta is"),
    ]:
        stderr = refused(cli(db_url, "enqueue", "--kind", "k", *flags), 2)
        assert message in stderr, stderr
    assert "the maximum is 64" in refused(cli(db_url, "jobs", "list", "--tag", "y" * 65), 2)
    assert table_snapshot(conn) == before


def test_tags_as_a_subprocess(db_url: str, conn: Conn) -> None:
    result = run("enqueue", "--kind", "k", "--tag", "nightly", "--json", url=db_url)
    assert result.returncode == 0, result.stderr
    job = json.loads(result.stdout)
    listed = run("jobs", "list", "--tag", "nightly", "--json", url=db_url)
    assert listed.returncode == 0, listed.stderr
    assert [r["id"] for r in json.loads(listed.stdout)] == [job["id"]]
    bad = run("jobs", "list", "--tag", "a" * 65, url=db_url)
    assert bad.returncode == 2
    one_line(bad.stderr)
