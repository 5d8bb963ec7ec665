"""Inspector.enqueue by kind: a registered kind gets its class's validation and defaults."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from jobdb import table_snapshot

import drover

Conn = psycopg.Connection[tuple[Any, ...]]


class Mail(drover.JobArgs, kind="inspect_mail", queue="mail", max_attempts=3):
    to: str
    template: str = "welcome"


@pytest.fixture
def workers() -> drover.Workers:
    registry = drover.Workers()

    @registry.register
    def send(job: drover.Job[Mail]) -> None:
        pass

    return registry


@pytest.fixture
def inspector(db_url: str, workers: drover.Workers) -> Iterator[drover.Inspector]:
    with drover.Inspector(db_url, workers=workers) as i:
        yield i


def test_a_registered_kind_gets_its_class_defaults_and_canonical_args(
    inspector: drover.Inspector, client: drover.Client
) -> None:
    row = inspector.enqueue("inspect_mail", '{"to": "ada@example.com"}')
    assert (row.queue, row.max_attempts) == ("mail", 3)
    # Stored as Client.insert stores the model: defaults filled in.
    assert row.args == {"to": "ada@example.com", "template": "welcome"}
    assert client.insert(Mail(to="ada@example.com")).args == row.args


def test_opts_still_win_over_the_class_defaults(inspector: drover.Inspector) -> None:
    row = inspector.enqueue(
        "inspect_mail", '{"to": "x@y"}', drover.InsertOpts(queue="urgent", max_attempts=9)
    )
    assert (row.queue, row.max_attempts) == ("urgent", 9)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ("{}", r"(?s)args for kind 'inspect_mail' do not validate as Mail: .*to\s+Field required"),
        ('{"to": 5}', r"(?s)do not validate as Mail: .*to\s+Input should be a valid string"),
        ("[]", r"do not validate as Mail"),
    ],
)
def test_args_that_cannot_validate_are_refused_and_nothing_is_written(
    inspector: drover.Inspector, conn: Conn, args: str, match: str
) -> None:
    before = table_snapshot(conn)
    with pytest.raises(drover.InvalidJobArgs, match=match):
        inspector.enqueue("inspect_mail", args)
    assert table_snapshot(conn) == before


def test_an_unknown_kind_keeps_the_raw_behaviour(inspector: drover.Inspector) -> None:
    row = inspector.enqueue("not_registered", "[1, 2]")
    assert (row.queue, row.max_attempts, row.args) == ("default", 25, [1, 2])


def test_without_a_registry_every_kind_is_raw(db_url: str) -> None:
    with drover.Inspector(db_url) as plain:
        row = plain.enqueue("inspect_mail", "{}")
    assert (row.queue, row.max_attempts, row.args) == ("default", 25, {})


def test_workers_must_be_a_registry(db_url: str) -> None:
    with pytest.raises(drover.InvalidArgument, match="Inspector workers must be a drover.Workers"):
        drover.Inspector(db_url, workers={"inspect_mail": Mail})  # type: ignore[arg-type]
