"""The handler's ``Job`` carries the row's priority, due time, tags and metadata, sync and async."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from jobdb import Conn, MakeClient, Poll, await_job_state, start_client

import drover


class Seen(drover.JobArgs, kind="fields_seen"):
    pass


class AsyncSeen(drover.JobArgs, kind="fields_seen_async"):
    pass


def _facts(job: drover.Job[Any]) -> tuple[int, datetime | None, tuple[str, ...], dict[str, Any]]:
    return job.priority, job.scheduled_at, job.tags, dict(job.meta)


@pytest.mark.parametrize("args", [Seen(), AsyncSeen()], ids=["sync", "async"])
def test_the_handler_sees_priority_due_time_tags_and_meta(
    make_client: MakeClient, conn: Conn, poll: Poll, args: drover.JobArgs
) -> None:
    seen: list[tuple[int, datetime | None, tuple[str, ...], dict[str, Any]]] = []
    workers = drover.Workers()

    @workers.register
    def sync_handler(job: drover.Job[Seen]) -> None:
        seen.append(_facts(job))

    @workers.register
    async def async_handler(job: drover.Job[AsyncSeen]) -> None:
        seen.append(_facts(job))

    client = start_client(make_client, workers)
    row = client.insert(args, priority=7, tags=["vip", "eu"], meta={"user": 42})
    stored = await_job_state(poll, conn, row.id, "completed")
    assert seen == [(7, stored["scheduled_at"], ("vip", "eu"), {"user": 42})]
    assert seen[0][1] == row.scheduled_at


def test_a_hand_built_job_has_the_defaults() -> None:
    job = drover.Job(
        id=1, kind="k", queue="q", attempt=1, max_attempts=1,
        created_at=datetime.now(), args=Seen(),
    )  # fmt: skip
    assert (job.priority, job.scheduled_at, job.tags, dict(job.meta)) == (0, None, (), {})
    with pytest.raises(TypeError):
        job.meta["x"] = 1  # type: ignore[index]
