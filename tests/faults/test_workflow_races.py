"""Workflows under real process faults: chains and chords over three worker processes.

Three worker processes (``workflow_worker.py``, each a ``drover.Client`` of
its own) run many chords and chains on the test's database. One is SIGKILLed
while it runs a step that waited for others; another is SIGSTOPped while it
runs one, kept stopped until the rescuer has taken its steps back, then
SIGCONTed (it wakes as a zombie and finishes its superseded handlers). The
handlers record their own executions in a side table on connections of their
own, with the database server's ``clock_timestamp()`` (see the worker), and
the test judges from those records and the final rows:

- every workflow finishes: each step completed, except the poison members
  of the failing chords (dead) and the steps after them (cancelled, never
  started);
- no step started before every dependency's completion: after the
  dependency's ``finalized_at`` (the completing transaction's start) and
  after its accepted execution's recorded end (a step returns before drover
  writes its completion); and each step read every dependency's result;
- each completion is the accepted execution's, written after it returned
  (the woken process's completions of its superseded steps were fenced off);
- a step ran more than once only where the killed or the stopped process
  held it, and each step those two held ran again elsewhere (at least once).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from jobdb import Conn, Poll
from workflow_worker import WF_DDL, WfStep

import drover
from drover.workflows import Step

WORKER = Path(__file__).with_name("workflow_worker.py")

SAFETY = 30.0
"""Longest any process or condition is waited for (a failing test never hangs)."""

LEASE, HEARTBEAT, RESCUE, POLL = 1.5, 0.25, 0.25, 0.1
CHORDS, CHAINS, FAILING = 40, 40, 6


@dataclass(frozen=True)
class Execution:
    """One handler execution as it recorded itself (database clock)."""

    job: int
    attempt: int
    pid: int
    start: datetime
    parents: tuple[int | None, ...] | None
    end: datetime | None


@dataclass(frozen=True)
class Row:
    """A job's final row and the ids it waited for."""

    id: int
    state: str
    attempt: int
    finalized_at: datetime | None
    poison: bool
    deps: tuple[int, ...]


class Fleet:
    """Worker processes on one database; leaving the block ends any still running."""

    def __init__(self, db_url: str, tmp_path: Path) -> None:
        self._db_url = db_url
        self._tmp = tmp_path
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self) -> subprocess.Popen[bytes]:
        log = self._tmp / f"worker-{len(self.procs)}.stderr"
        timing = [
            "--lease", str(LEASE), "--heartbeat", str(HEARTBEAT), "--rescue", str(RESCUE),
            "--poll", str(POLL), "--concurrency", "4",
        ]  # fmt: skip
        with log.open("wb") as err:
            proc = subprocess.Popen(
                [sys.executable, str(WORKER), self._db_url, *timing],
                stdout=subprocess.DEVNULL,
                stderr=err,
                env={**os.environ, "PYTHONFAULTHANDLER": "1"},
            )
        self.procs.append(proc)
        return proc

    def diagnostics(self) -> str:
        logs = sorted(self._tmp.glob("worker-*.stderr"))
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in logs)

    def stop(self) -> None:
        """SIGTERM every live worker; each must drain and exit 0."""
        alive = [p for p in self.procs if p.poll() is None]
        for p in alive:
            p.send_signal(signal.SIGTERM)
        codes = [p.wait(SAFETY) for p in alive]
        assert codes == [0] * len(alive), self.diagnostics()

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(signal.SIGCONT)
                p.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(SAFETY)


def _step(rng: random.Random, poison: bool = False) -> Step:
    attempts = 1 if poison else 10
    args = WfStep(seconds=rng.uniform(0.06, 0.15), poison=poison)
    return (args, drover.InsertOpts(max_attempts=attempts))


def _workflows(rng: random.Random) -> list[drover.Chain | drover.Group]:
    """Chords (members, a callback, a step after it), chains of three, failing chords."""
    flows: list[drover.Chain | drover.Group] = []
    for _ in range(CHORDS):
        members = [_step(rng) for _ in range(rng.randint(3, 4))]
        flows.append(drover.group(*members).then(_step(rng), _step(rng)))
    for _ in range(CHAINS):
        flows.append(drover.chain(_step(rng), _step(rng), _step(rng)))
    for _ in range(FAILING):
        members = [_step(rng), _step(rng, poison=True), _step(rng)]
        flows.append(drover.group(*members).then(_step(rng), _step(rng)))
    rng.shuffle(flows)
    return flows


def _ready(conn: Conn, pids: list[int]) -> bool:
    row = conn.execute("SELECT count(*) FROM wf_ready WHERE pid = ANY(%s)", (pids,)).fetchone()
    return row is not None and int(row[0]) == len(pids)


def _held_dependents(conn: Conn, pid: int) -> list[tuple[int, int]]:
    """The (job, attempt) pairs ``pid`` is running now among steps that waited for others."""
    rows = conn.execute(
        "SELECT l.job_id, l.attempt FROM wf_log l JOIN drover_jobs j ON j.id = l.job_id"
        " WHERE l.pid = %s AND l.ended_at IS NULL AND j.state = 'running'"
        " AND j.attempt = l.attempt"
        " AND EXISTS (SELECT 1 FROM drover_job_deps e WHERE e.job_id = l.job_id)",
        (pid,),
    ).fetchall()
    return [(int(r[0]), int(r[1])) for r in rows]


def _open(conn: Conn, pid: int) -> list[tuple[int, int]]:
    """Every (job, attempt) ``pid`` started and never recorded the end of."""
    rows = conn.execute(
        "SELECT job_id, attempt FROM wf_log WHERE pid = %s AND ended_at IS NULL", (pid,)
    ).fetchall()
    return [(int(r[0]), int(r[1])) for r in rows]


def _rescued(conn: Conn, held: list[tuple[int, int]]) -> bool:
    """Whether every held claim has moved on (the rescuer took it back, or it ended)."""
    row = conn.execute(
        "SELECT count(*) FROM drover_jobs j JOIN unnest(%s::bigint[], %s::int[]) AS h(id, a)"
        " ON j.id = h.id WHERE j.state = 'running' AND j.attempt = h.a",
        ([j for j, _ in held], [a for _, a in held]),
    ).fetchone()
    return row is not None and int(row[0]) == 0


def _unsettled(conn: Conn) -> int:
    row = conn.execute(
        "SELECT count(*) FROM drover_jobs WHERE state NOT IN ('completed', 'cancelled', 'dead')"
    ).fetchone()
    assert row is not None
    return int(row[0])


def _executions(conn: Conn) -> list[Execution]:
    rows = conn.execute(
        "SELECT job_id, attempt, pid, started_at, parents, ended_at FROM wf_log ORDER BY id"
    ).fetchall()
    return [
        Execution(r[0], r[1], r[2], r[3], None if r[4] is None else tuple(r[4]), r[5]) for r in rows
    ]


def _rows(conn: Conn) -> dict[int, Row]:
    rows = conn.execute(
        "SELECT j.id, j.state::text, j.attempt, j.finalized_at, (j.args->>'poison')::boolean,"
        " ARRAY(SELECT e.depends_on FROM drover_job_deps e WHERE e.job_id = j.id ORDER BY 1)"
        " FROM drover_jobs j ORDER BY j.id"
    ).fetchall()
    return {r[0]: Row(r[0], r[1], r[2], r[3], bool(r[4]), tuple(r[5])) for r in rows}


def _last_completion(rows: dict[int, Row], row: Row) -> datetime:
    done = [rows[d].finalized_at for d in row.deps]
    assert all(t is not None for t in done), row
    return max(t for t in done if t is not None)


def test_workflows_survive_a_sigkill_and_a_sigstop_with_no_early_start_and_attributed_reruns(
    db_url: str, conn: Conn, client: drover.Client, tmp_path: Path, poll: Poll
) -> None:
    conn.execute(WF_DDL.encode())
    rng = random.Random(26)
    with Fleet(db_url, tmp_path) as fleet:
        for _ in range(3):
            fleet.spawn()
        poll(lambda: _ready(conn, [p.pid for p in fleet.procs]), timeout=SAFETY, interval=0.05)
        killed, stopped = fleet.procs[0], fleet.procs[1]
        flows = _workflows(rng)
        for n, flow in enumerate(flows):
            if n % 2:
                client.insert(flow)
            else:
                with conn.transaction():
                    client.insert_tx(conn, flow)

        # SIGKILL a process while it runs a step that waited for others.
        poll(lambda: _held_dependents(conn, killed.pid), timeout=SAFETY, interval=0.005)
        killed.kill()
        assert killed.wait(SAFETY) == -signal.SIGKILL
        killed_open = _open(conn, killed.pid)
        fleet.spawn()

        # SIGSTOP another while it runs one, until the rescuer took its steps back.
        poll(lambda: _held_dependents(conn, stopped.pid), timeout=SAFETY, interval=0.005)
        stopped.send_signal(signal.SIGSTOP)
        stopped_open = _open(conn, stopped.pid)
        poll(lambda: _rescued(conn, stopped_open), timeout=SAFETY, interval=0.05)
        stopped.send_signal(signal.SIGCONT)

        poll(lambda: _unsettled(conn) == 0, timeout=60, interval=0.1, message="all settled")
        # The replacement may still be importing on a loaded machine: a SIGTERM before its
        # handler is installed kills it (-15) instead of draining it. Stop it once ready.
        alive = [p.pid for p in fleet.procs if p.poll() is None]
        poll(
            lambda: _ready(conn, alive), timeout=SAFETY, interval=0.05, message="replacement ready"
        )
        fleet.stop()

    runs = _executions(conn)
    rows = _rows(conn)
    by_job: dict[int, list[Execution]] = defaultdict(list)
    for r in runs:
        by_job[r.job].append(r)

    # Every workflow finished: completed, or dead (poison), or cancelled after a failure.
    failed = {"dead", "cancelled"}
    for row in rows.values():
        upstream_failed = any(rows[d].state in failed for d in row.deps)
        want = "dead" if row.poison else "cancelled" if upstream_failed else "completed"
        assert row.state == want, (row, [rows[d] for d in row.deps])
        if want == "cancelled":
            assert row.id not in by_job, by_job[row.id]  # cancelled without running
    states = Counter(r.state for r in rows.values())
    assert states["dead"] == FAILING and states["cancelled"] == 2 * FAILING

    # No step started before its dependencies' completions, on the database clock.
    accepted_end = {
        r.job: r.end for r in runs if r.attempt == rows[r.job].attempt and r.end is not None
    }
    early, misread = [], []
    for r in runs:
        for d in rows[r.job].deps:
            dep = rows[d]
            assert dep.finalized_at is not None and d in accepted_end, (dep, by_job[d])
            if r.start <= dep.finalized_at or r.start < accepted_end[d]:
                early.append((r, dep, accepted_end[d]))
        # parent_results lists the results in id order, as deps are.
        if r.parents is not None and list(r.parents) != list(rows[r.job].deps):
            misread.append((r, rows[r.job].deps))  # a dependency read without its result
    assert early == [], early[:5]
    assert misread == [], misread[:5]

    # Every completion is the accepted execution's, written after it returned: a
    # superseded execution's completion (the paused process's, woken) was fenced off.
    late = [
        (row, by_job[row.id])
        for row in rows.values()
        if row.state == "completed"
        and (row.finalized_at is None or row.finalized_at <= accepted_end[row.id])
    ]
    assert late == [], late[:5]

    # Reruns: only where the killed or the stopped process held the step, and each
    # step those held ran again elsewhere, at a later attempt.
    suspects = {killed.pid, stopped.pid}
    reruns = {job: rs for job, rs in by_job.items() if len(rs) > 1}
    for job, rs in reruns.items():
        superseded = [r for r in rs if r.attempt != rows[job].attempt]
        assert {r.pid for r in superseded} <= suspects, (job, rs)
        assert len([r for r in rs if r.attempt == rows[job].attempt]) == 1, (job, rs)
    assert killed_open and stopped_open
    for job, attempt in [*killed_open, *stopped_open]:
        if rows[job].poison:
            continue  # one attempt only: rescued, it ends dead without a rerun
        assert rows[job].attempt > attempt, (job, attempt, by_job[job])
        # Ran again (by a survivor, or by the other suspect before its own fault).
        assert any(r.attempt > attempt for r in by_job[job]), (job, by_job[job])
    callbacks_rerun = sum(1 for job in reruns if rows[job].deps)
    assert callbacks_rerun >= 1  # the two held steps that waited for others, at least

    lags = [
        (by_job[row.id][0].start - _last_completion(rows, row)).total_seconds()
        for row in rows.values()
        if row.deps and row.state == "completed"
    ]
    print(
        f"{len(flows)} workflows, {len(rows)} steps, {len(runs)} executions; "
        f"reruns {len(reruns)} ({callbacks_rerun} of steps that waited), held at the kill "
        f"{len(killed_open)}, at the stop {len(stopped_open)}; release lag median "
        f"{sorted(lags)[len(lags) // 2] * 1000:.1f} ms, worst {max(lags) * 1000:.1f} ms"
    )
