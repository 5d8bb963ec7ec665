"""``drover periodic list``: schedules, fire times and the leader, from the database."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import psycopg
from clihelp import cli, ok, run

import drover

Conn = psycopg.Connection[tuple[Any, ...]]
MakeClient = Callable[..., drover.Client]
Poll = Callable[..., Any]


class Nightly(drover.JobArgs, kind="cli_nightly"):
    pass


def test_periodic_list_with_a_leader_and_without(
    db_url: str, conn: Conn, make_client: MakeClient, poll: Poll
) -> None:
    assert (
        ok(cli(db_url, "periodic", "list"))
        .rstrip()
        .endswith("leader: none: no client with periodic jobs is running")
    )
    job = drover.PeriodicJob(
        "nightly", "30 2 * * *", Nightly(), drover.InsertOpts(queue="q"), timezone="Europe/Berlin"
    )
    client = make_client(plugins=[drover.plugins.Periodic(jobs=[job])], poll_interval=0.1)
    client.start()
    poll(
        lambda: conn.execute("SELECT count(*) FROM drover_periodic_leader").fetchone() == (1,),
        message="a leader",
    )
    lines = ok(cli(db_url, "periodic", "list")).splitlines()
    assert lines[0].split() == [
        "ID", "SCHEDULE", "TIMEZONE", "KIND", "NEXT_FIRE", "LAST_FIRE", "LAST_JOB",
    ]  # fmt: skip
    assert lines[1].startswith("nightly  30 2 * * *  Europe/Berlin  cli_nightly  20")
    assert lines[-1].startswith(f"leader: {client._id} (pid ")

    document = json.loads(ok(cli(db_url, "--json", "periodic", "list")))
    (entry,) = document["jobs"]
    assert entry["id"] == "nightly" and entry["current"] is True
    assert entry["next_fire"].endswith(":30:00Z") and entry["last_fire"] is None
    assert document["leader"].startswith(client._id)

    client.stop(timeout=5)
    result = run("--json", "periodic", "list", url=db_url)
    assert result.returncode == 0, result.stderr
    after = json.loads(result.stdout)
    assert after["leader"] is None
    assert after["jobs"][0]["current"] is False and after["jobs"][0]["next_fire"] is None
    # With no leader there is no leader's config to be missing from: the list says
    # nothing fires, not that each entry was dropped.
    human = ok(cli(db_url, "periodic", "list"))
    assert "not in the leader's config" not in human
    assert human.splitlines()[1].startswith("nightly  30 2 * * *  Europe/Berlin  cli_nightly  -")
    assert human.rstrip().endswith(
        "leader: none: no client with periodic jobs is running, so none of these fire until "
        "one starts"
    )
