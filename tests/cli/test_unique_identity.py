"""A job's unique identity for operators: ``Inspector.unique_identity`` and ``drover jobs get``."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from clihelp import cli, ok

import drover


class Sync(drover.JobArgs, kind="sync"):
    account: int


def test_inspector_and_cli_show_the_identity(db_url: str, client: drover.Client) -> None:
    opts = drover.InsertOpts(unique=drover.Unique(by_args=True, period=timedelta(hours=1)))
    row = client.insert(Sync(account=1), opts)
    plain = client.insert(Sync(account=1))
    with drover.Inspector(db_url) as inspector:
        identity = inspector.unique_identity(row.id)
        assert identity is not None
        assert len(identity.hash) == 64
        assert identity.bucket > 0
        assert identity.states == (
            "pending",
            "available",
            "scheduled",
            "running",
            "retryable",
            "completed",
        )
        assert identity.held
        assert inspector.unique_identity(plain.id) is None
        with pytest.raises(drover.NotFound):
            inspector.unique_identity(plain.id + 100)

    text = ok(cli(db_url, "jobs", "get", str(row.id)))
    assert f"unique:       {identity.hash[:16]}... bucket {identity.bucket}, held;" in text
    document = json.loads(ok(cli(db_url, "jobs", "get", str(row.id), "--json")))
    assert document["unique"] == {
        "hash": identity.hash,
        "bucket": identity.bucket,
        "states": list(identity.states),
        "held": True,
    }
    assert "unique" not in json.loads(ok(cli(db_url, "jobs", "get", str(plain.id), "--json")))
    assert "unique:" not in ok(cli(db_url, "jobs", "get", str(plain.id)))
