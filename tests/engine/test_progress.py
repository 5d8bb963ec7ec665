"""Progress and metadata reported by handlers: throttled, batched, fenced, flushed (ADR 0032)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pydantic
import pytest
from jobdb import Conn, MakeClient, Poll, start_client, wiring

import drover
from drover._kernel.claims import Claim
from drover._runtime.progress import ProgressWriter

SAFETY = 20.0
"""Longest a blocked handler waits on its own (a failing test never hangs)."""


class Step(drover.JobArgs, kind="progress_step"):
    calls: int = 1
    block: bool = False
    final: float | None = None
    meta: dict[str, Any] = pydantic.Field(default_factory=dict)


class Handlers:
    def __init__(self) -> None:
        self.reported = threading.Event()
        self.release = threading.Event()

    def step(self, job: drover.Job[Step]) -> None:
        for i in range(job.args.calls):
            job.set_progress((i + 1) / job.args.calls, f"step {i + 1}")
        if job.args.meta:
            job.update_meta(job.args.meta)
        self.reported.set()
        if job.args.block:
            self.release.wait(SAFETY)
        if job.args.final is not None:
            job.set_progress(job.args.final, "done")

    def workers(self) -> drover.Workers:
        w = drover.Workers()
        w.register(self.step)
        return w


@pytest.fixture
def handlers() -> Iterator[Handlers]:
    h = Handlers()
    yield h
    h.release.set()


def _progress(conn: Conn, job_id: int) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT state::text, progress, progress_message, meta FROM drover_jobs WHERE id = %s",
        (job_id,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def test_progress_and_metadata_are_visible_while_the_job_runs(
    make_client: MakeClient, handlers: Handlers, conn: Conn, poll: Poll
) -> None:
    client = start_client(make_client, handlers.workers())
    job = client.insert(
        Step(calls=4, block=True, meta={"rows": 10}), drover.InsertOpts(meta={"owner": "ops"})
    )
    assert handlers.reported.wait(SAFETY)
    poll(
        lambda: _progress(conn, job.id) == ("running", 1.0, "step 4", {"owner": "ops", "rows": 10}),
        message="the writer wrote the report of a running job",
    )
    seen = drover.Inspector(client._store.pool).get_job(job.id)
    assert (seen.progress, seen.progress_message) == (1.0, "step 4")
    assert seen.meta == {"owner": "ops", "rows": 10}
    handlers.release.set()
    poll(lambda: _progress(conn, job.id)[0] == "completed", message="job completed")


def test_the_last_report_is_written_with_the_outcome(
    make_client: MakeClient, handlers: Handlers, conn: Conn, poll: Poll
) -> None:
    client = start_client(make_client, handlers.workers())
    engine = client._engine
    assert engine is not None
    # Only the completer can write now: what is stored came with the outcome.
    engine.progress.stop()
    job = client.insert(Step(calls=3, final=0.25, meta={"k": "v"}))
    poll(lambda: _progress(conn, job.id)[0] == "completed", message="job completed")
    assert _progress(conn, job.id) == ("completed", 0.25, "done", {"k": "v"})


def test_a_tight_loop_costs_a_few_writes_not_one_per_call(
    make_client: MakeClient, handlers: Handlers, conn: Conn, poll: Poll
) -> None:
    client = start_client(make_client, handlers.workers())
    engine = client._engine
    assert engine is not None
    job = client.insert(Step(calls=20_000))
    poll(lambda: _progress(conn, job.id)[0] == "completed", message="job completed")
    assert _progress(conn, job.id)[1:3] == (1.0, "step 20000")
    # The loop takes a few milliseconds: at most one round of the writer
    # (every 0.5 s) and the completer's flush saw it.
    assert 1 <= engine.progress.statements <= 3


def _claimed(client: drover.Client, conn: Conn) -> tuple[drover.JobRow, Claim]:
    session = client._store.held("test claim")
    try:
        rows = session.claim("default", 1, 30.0, "test").rows
    finally:
        session.release()
    assert len(rows) == 1
    return rows[0], Claim(rows[0])


def _job_for(claim: Claim) -> drover.Job[Step]:
    row = claim.row
    return drover.Job(
        id=row.id,
        kind=row.kind,
        queue=row.queue,
        attempt=row.attempt,
        max_attempts=row.max_attempts,
        created_at=row.created_at,
        args=Step.model_validate(row.args),
        context=claim.context,
    )


def test_a_stale_attempt_s_report_is_refused(
    make_client: MakeClient, client: drover.Client, conn: Conn
) -> None:
    inserted = client.insert(Step(), drover.InsertOpts(meta={"a": 1}))
    row, claim = _claimed(client, conn)
    assert row.id == inserted.id
    wired = wiring(client)
    wired.inflight.add(claim)
    writer = ProgressWriter(wired)
    # What a started client passes every claim's context: the writer tracks the
    # execution's slot from its first report on.
    claim.context._execution.progress_sink = writer.track
    job = _job_for(claim)
    job.set_progress(0.5, "half")
    job.update_meta({"b": 2})
    assert writer.run_once() == 1
    assert _progress(conn, row.id) == ("running", 0.5, "half", {"a": 1, "b": 2})
    assert writer.run_once() == 0  # nothing changed: nothing sent
    assert writer.statements == 1
    # The job moved on to another attempt (rescued and re-claimed elsewhere).
    conn.execute("UPDATE drover_jobs SET attempt = attempt + 1 WHERE id = %s", (row.id,))
    job.set_progress(0.9, "stale")
    job.update_meta({"b": 3})
    assert writer.run_once() == 0
    assert _progress(conn, row.id) == ("running", 0.5, "half", {"a": 1, "b": 2})
    # And a finished job (no longer running) is not written either.
    conn.execute(
        "UPDATE drover_jobs SET attempt = attempt - 1, state = 'completed' WHERE id = %s",
        (row.id,),
    )
    job.set_progress(1.0, "late")
    assert writer.run_once() == 0
    assert _progress(conn, row.id)[1:3] == (0.5, "half")


def test_a_failed_round_is_written_by_the_next(
    client: drover.Client, conn: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    client.insert(Step())
    row, claim = _claimed(client, conn)
    wired = wiring(client)
    wired.inflight.add(claim)
    writer = ProgressWriter(wired)
    # What a started client passes every claim's context: the writer tracks the
    # execution's slot from its first report on.
    claim.context._execution.progress_sink = writer.track
    job = _job_for(claim)
    job.set_progress(0.3)
    job.update_meta({"x": 1})

    def broken(reports: object) -> set[int]:
        raise drover.DatabaseError("the database went away")

    with monkeypatch.context() as patched:
        patched.setattr(client._store, "report_progress", broken)
        with pytest.raises(drover.DatabaseError):
            writer.run_once()
    assert _progress(conn, row.id) == ("running", None, None, {})
    assert writer.run_once() == 1
    assert _progress(conn, row.id) == ("running", pytest.approx(0.3), None, {"x": 1})


def test_update_meta_refuses_metadata_past_its_limit_and_merges_nothing(
    client: drover.Client, conn: Conn
) -> None:
    client.insert(Step(), drover.InsertOpts(meta={"big": "x" * 60_000}))
    row, claim = _claimed(client, conn)
    wired = wiring(client)
    wired.inflight.add(claim)
    writer = ProgressWriter(wired)
    # What a started client passes every claim's context: the writer tracks the
    # execution's slot from its first report on.
    claim.context._execution.progress_sink = writer.track
    job = _job_for(claim)
    with pytest.raises(drover.InvalidArgument, match="65536"):
        job.update_meta({"more": "y" * 10_000})
    with pytest.raises(drover.InvalidArgument, match="not JSON"):
        job.update_meta({"when": object()})
    with pytest.raises(drover.InvalidArgument, match="must be a dict"):
        job.update_meta(["a"])  # type: ignore[arg-type]
    assert writer.run_once() == 0
    job.update_meta({"small": 1})
    assert writer.run_once() == 1
    stored = _progress(conn, row.id)[3]
    assert stored["small"] == 1 and "more" not in stored
