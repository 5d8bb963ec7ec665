"""A steady load while something pins the MVCC horizon: throughput, claim latency, claim cost.

    python bench/horizon.py [--database URL] [--systems drover,drover-walk,drover@base,
        graphile-batched] [--baseline-src DIR]
        [--pressures idle-tx,rr-readers,slot,overload,none] [--clean 60] [--pressure 600]
        [--recovery 60] [--rate N] [--share 0.8] [--overload 1.5]
        [--concurrency 32] [--job-ms 1] [--peer-pressure SECONDS] [--json FILE]

Each system's worker runs in a process of its own (``--concurrency`` slots, each
job waits ``--job-ms``), fed by a producer in this process that inserts jobs at a
steady rate, a batch every 50 ms. The rate is ``--share`` of the system's clean
peak (``--rate`` sets it instead), measured first: what the worker runs while a
producer offers it as many jobs a second as it drains from a filled table alone,
so that the peak pays for the inserts as the runs do.
Each run has three phases: clean, a pressure held for ``--pressure`` seconds
(``--peer-pressure`` for the peer), then recovery. autovacuum runs on the
server's defaults. The pressures:

- ``idle-tx``: one session takes a transaction id and sits idle in its transaction;
- ``rr-readers``: four sessions in REPEATABLE READ, each holding one snapshot for
  the whole pressure while it reads a fixed 20,000-row range of the job table
  twice a second (a report's steady reads: a scan of the whole table would
  measure the CPU the readers take, not the horizon they pin);
- ``slot``: a physical replication slot whose standby reported its xmin with
  ``hot_standby_feedback`` and then went away, so the slot holds the horizon
  where it was (needs the embedded server: the standby is made with its
  ``pg_basebackup``);
- ``overload``: no pin, but ``--overload`` times the clean peak offered;
- ``none``: nothing (the jobs processed since the last vacuum, alone).

The systems: ``drover`` (claims from floors, ADR 0059), ``drover-walk`` (the same
worker walking every level from its oldest job on every claim, as every claim
did before), ``drover@base`` (the same worker on the drover of ``--baseline-src``,
e.g. a checkout from before a change: ``git worktree add /tmp/base <commit>`` and
``--baseline-src /tmp/base/src``), ``graphile-batched`` (graphile-worker with its
documented batching settings, its runner from ``bench/peers/graphile``; it deletes
a job when it completes).

Every 5 seconds of the worker's own clock it prints the jobs finished in the
sample (and their share of the clean median), the p50/p99/max of the worker's
claims in the sample (drover only: graphile-worker's claim runs in Node), the
waiting depth, the job table's dead tuples and its size with indexes, and for
drover what one claim costs in shared buffers read from the worker's floors and
walking (EXPLAIN on a connection of the benchmark's own). At the end, a table of
verdicts: the worst sample under pressure against clean (or against the peak,
for overload), the claim p99 under pressure, and how long after the pressure
ended the figures were back to clean.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import psycopg

import drover
from drover._db.embedded import _bin_dir, _run, embedded_postgres
from drover._db.queries import query

SAMPLE_TICKS = 5
"""A sample is this many of the worker's one-second ticks."""
PEER = "graphile-batched"
BASE = "drover@base"
SYSTEMS = ("drover", "drover-walk", BASE, PEER)
SLOT = "drover_bench_standby"
READERS = 4
READ_RANGE = 20_000


class Load(drover.JobArgs, kind="horizon_load"):
    n: int


# -- the systems ------------------------------------------------------------------


@dataclass(frozen=True)
class System:
    name: str
    table: str
    insert: str
    """Inserts ``%s`` jobs of kind ``horizon_load`` in one statement."""
    depth: str


DROVER_SQL = System(
    name="drover",
    table="drover_jobs",
    insert=(
        "INSERT INTO drover_jobs (kind, args) "
        "SELECT 'horizon_load', jsonb_build_object('n', g) FROM generate_series(1, %s) g"
    ),
    depth="SELECT count(*) FROM drover_jobs WHERE state IN ('available','scheduled','retryable')",
)
GRAPHILE_SQL = System(
    name=PEER,
    table="graphile_worker._private_jobs",
    insert=(
        "SELECT graphile_worker.add_jobs(ARRAY(SELECT ROW('horizon_load', "
        "json_build_object('n', g), NULL, NULL, NULL, NULL, NULL, NULL)"
        "::graphile_worker.job_spec FROM generate_series(1, %s) g))"
    ),
    depth="SELECT count(*) FROM graphile_worker._private_jobs WHERE locked_at IS NULL",
)


def _sql(system: str) -> System:
    return GRAPHILE_SQL if system == PEER else DROVER_SQL


def _bench_dir() -> Path:
    return Path(__file__).resolve().parent


def _graphile() -> Any:
    sys.path.insert(0, str(_bench_dir()))
    from peers import graphile_queue

    return graphile_queue


def setup(url: str, systems: list[str]) -> None:
    drover.migrate(url)
    if PEER in systems:
        _graphile().setup(url)


def reset(url: str, system: str) -> None:
    table = _sql(system).table
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {table} RESTART IDENTITY CASCADE".encode())
        conn.execute(f"VACUUM ANALYZE {table}".encode())


# -- the worker process -------------------------------------------------------------


def drover_child(url: str, concurrency: int, job_ms: float, walk: bool) -> None:
    """A drover worker until stdin closes: ``ready``, then a ``tick`` line a second."""
    from drover._db import kernel as pg_kernel

    done = 0
    lock = threading.Lock()
    workers = drover.Workers()
    sleep = job_ms / 1000

    @workers.register
    def load(job: drover.Job[Load]) -> None:
        nonlocal done
        if sleep:
            time.sleep(sleep)
        with lock:
            done += 1

    claims: deque[float] = deque()
    sessions: list[Any] = []
    original = pg_kernel._ClaimSession.claim

    def timed(self: Any, *a: Any, **kw: Any) -> Any:
        cursors = getattr(self, "cursors", None)  # a baseline without floors has none
        if walk and cursors is not None:
            cursors.forget()
        if not sessions:
            sessions.append(self)
        started = time.perf_counter()
        try:
            return original(self, *a, **kw)
        finally:
            claims.append((time.perf_counter() - started) * 1000)

    pg_kernel._ClaimSession.claim = timed  # type: ignore[method-assign]
    closed = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.read()
        closed.set()

    client = drover.Client(url, drover.Config(workers=workers, concurrency=concurrency))
    client.start()
    threading.Thread(target=watch_stdin, daemon=True).start()
    print("ready", flush=True)
    try:
        while not closed.wait(1.0):
            taken = [claims.popleft() for _ in range(len(claims))]
            cursors = getattr(sessions[0], "cursors", None) if sessions else None
            floors = cursors.floors("default") if cursors is not None else None
            tick = {
                "t": time.monotonic(),
                "done": done,
                "claims": [round(c, 3) for c in taken],
                "floors": None if floors is None else [[p, f.isoformat()] for p, f in floors],
            }
            print("tick " + json.dumps(tick), flush=True)
    finally:
        client.stop()


@dataclass
class Tick:
    t: float
    done: int
    claims: list[float]
    floors: list[tuple[int, datetime]] | None


class Worker:
    """One system's worker process; its ticks, read on a thread."""

    def __init__(self, system: str, url: str, args: argparse.Namespace) -> None:
        if system == PEER:
            graphile = _graphile()
            spec = {
                "mode": "serve",
                "url": url,
                "concurrency": args.concurrency,
                "workMs": args.job_ms,
                "batched": True,
                # graphile-worker warns below its concurrency: give it what it asks for.
                "poolSize": args.concurrency,
            }
            argv = [graphile.NODE, str(graphile.RUNNER), json.dumps(spec)]
            env = graphile._env()
        else:
            argv = [
                sys.executable, __file__, "--child", "drover" if system == BASE else system,
                "--database", url,
                "--concurrency", str(args.concurrency), "--job-ms", str(args.job_ms),
            ]  # fmt: skip
            # drover@base: the same worker on the drover of --baseline-src (a checkout's src).
            env = None if system != BASE else {**os.environ, "PYTHONPATH": args.baseline_src}
        self.ticks: list[Tick] = []
        self.ready = threading.Event()
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self.ready.wait(120):
            self.stop()
            raise SystemExit(f"{system}: the worker did not start")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("ready"):
                self.ready.set()
            elif line.startswith("tick "):
                raw = json.loads(line.removeprefix("tick "))
                floors = raw.get("floors")
                tick = Tick(
                    raw["t"],
                    raw["done"],
                    raw.get("claims", []),
                    None
                    if floors is None
                    else [(int(p), datetime.fromisoformat(f)) for p, f in floors],
                )
                with self._cond:
                    self.ticks.append(tick)
                    self._cond.notify_all()
        self.ready.set()
        with self._cond:
            self._cond.notify_all()

    def wait_ticks(self, n: int, timeout: float = 60.0) -> list[Tick]:
        """Block until ``n`` ticks past the ones seen so far have come; return those and
        the one before them."""
        with self._cond:
            start = len(self.ticks)
            ok = self._cond.wait_for(
                lambda: len(self.ticks) >= start + n or self.proc.poll() is not None, timeout
            )
            if not ok or len(self.ticks) < start + n:
                raise SystemExit("the worker stopped ticking")
            return self.ticks[max(0, start - 1) : start + n]

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=10)


# -- the producer -------------------------------------------------------------------


class Producer(threading.Thread):
    """Inserts ``rate`` jobs a second, a batch every 50 ms, on a connection of its own."""

    def __init__(self, url: str, insert: str, rate: float) -> None:
        super().__init__(name="producer", daemon=True)
        self._url, self._insert = url, insert
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self._base_at, self._base_sent, self._rate = time.monotonic(), 0, rate
        self.sent = 0

    def set_rate(self, rate: float) -> None:
        with self._lock:
            self._base_at, self._base_sent, self._rate = time.monotonic(), self.sent, rate

    def rate(self) -> float:
        return self._rate

    def run(self) -> None:
        with psycopg.connect(self._url, autocommit=True) as conn:
            while not self._halt.is_set():
                with self._lock:
                    due = self._base_sent + int((time.monotonic() - self._base_at) * self._rate)
                if due > self.sent:
                    # Large catch-ups in bounded statements.
                    n = min(due - self.sent, 20_000)
                    conn.execute(self._insert.encode(), (n,))
                    self.sent += n
                else:
                    self._halt.wait(0.05)

    def stop(self) -> None:
        self._halt.set()
        self.join()


# -- the pressures --------------------------------------------------------------------


@contextlib.contextmanager
def pin(kind: str, url: str, table: str) -> Iterator[None]:
    """Hold the MVCC horizon the way ``kind`` does, until the block ends."""
    if kind == "idle-tx":
        with psycopg.connect(url) as conn:
            conn.execute("SELECT txid_current()")  # holds an xid, then sits idle
            try:
                yield
            finally:
                conn.rollback()
    elif kind == "rr-readers":
        stop = threading.Event()
        started = threading.Barrier(READERS + 1)

        def read() -> None:
            with psycopg.connect(url) as reader:
                reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                row = reader.execute(f"SELECT coalesce(max(id), 0) FROM {table}".encode())
                top = int(row.fetchone()[0])  # type: ignore[index]
                started.wait()
                while not stop.is_set():
                    reader.execute(
                        f"SELECT count(*) FROM {table} WHERE id > %s AND id <= %s".encode(),
                        (top - READ_RANGE, top),
                    )
                    stop.wait(0.5)
                reader.rollback()

        threads = [threading.Thread(target=read, daemon=True) for _ in range(READERS)]
        for t in threads:
            t.start()
        started.wait()
        try:
            yield
        finally:
            stop.set()
            for t in threads:
                t.join()
    elif kind == "slot":
        with _held_slot(url):
            yield
    else:
        yield


@contextlib.contextmanager
def _held_slot(url: str) -> Iterator[None]:
    """A physical slot holding the xmin its standby last reported; the standby gone."""
    host = parse_qs(urlparse(url).query).get("host", [""])[0]
    root = Path(host)
    if not host or not (root / "pgdata").is_dir():
        raise SystemExit("the slot pressure needs the embedded server (no --database)")
    user = pwd.getpwuid(root.stat().st_uid).pw_name if os.geteuid() == 0 else None
    bin_dir = _bin_dir()
    standby = root / "standby"
    shutil.rmtree(standby, ignore_errors=True)

    def run(program: str, *args: str) -> None:
        failure = _run(bin_dir, user, program, *args)
        if failure is not None:
            raise SystemExit(f"slot pressure: {failure}")

    run("pg_basebackup", "-h", host, "-U", "postgres", "-D", str(standby), "-X", "stream",
        "-C", "-S", SLOT, "-R", "--no-sync", "-c", "fast")  # fmt: skip
    with (standby / "postgresql.conf").open("a") as conf:
        conf.write("\nport = 5433\nhot_standby_feedback = on\n")
    run("pg_ctl", "-D", str(standby), "-l", str(root / "standby.log"), "-w", "start")
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            deadline = time.monotonic() + 60
            while True:
                row = conn.execute(
                    "SELECT xmin FROM pg_replication_slots WHERE slot_name = %s", (SLOT,)
                ).fetchone()
                if row and row[0] is not None:
                    break
                if time.monotonic() > deadline:
                    raise SystemExit("slot pressure: the standby never reported its xmin")
                time.sleep(0.2)
    finally:
        run("pg_ctl", "-D", str(standby), "-m", "fast", "-w", "stop")
    try:
        yield
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (SLOT,))
        shutil.rmtree(standby, ignore_errors=True)


# -- measuring --------------------------------------------------------------------------


@dataclass
class Sample:
    at: float
    phase: str
    rate: float
    offered: float
    claims: list[float] = field(default_factory=list)
    depth: int = 0
    dead: int = 0
    size_mb: float = 0.0
    floors: int | None = None
    walk: int | None = None


def _claim_buffers(conn: psycopg.Connection[Any], levels: Any) -> int:
    from drover._db import floors as pg_floors  # not at the top: a baseline child lacks it

    params = {
        "queue": "default",
        "limit": 32,
        "lease_seconds": 60,
        "holder": "probe",
        "done_ids": "{}",
        "done_attempts": "{}",
        **pg_floors.level_params(levels),
    }
    with conn.transaction(force_rollback=True):
        row = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query("job_claim"), params
        ).fetchone()
    assert row is not None
    top = row[0][0]["Plan"]
    return int(top["Shared Hit Blocks"]) + int(top.get("Shared Read Blocks", 0))


def _measure(
    probe: psycopg.Connection[Any], system: str, worker: Worker, phase: str, offered: float
) -> Sample:
    ticks = worker.wait_ticks(SAMPLE_TICKS)
    first, last = ticks[0], ticks[-1]
    rate = (last.done - first.done) / max(last.t - first.t, 1e-9)
    sql = _sql(system)
    sample = Sample(last.t, phase, rate, offered, [c for t in ticks[1:] for c in t.claims])
    sample.depth = int(probe.execute(sql.depth.encode()).fetchone()[0])  # type: ignore[index]
    schema, _, name = sql.table.rpartition(".")
    row = probe.execute(
        "SELECT n_dead_tup, pg_total_relation_size(relid) FROM pg_stat_user_tables "
        "WHERE relname = %s AND schemaname = %s",
        (name, schema or "public"),
    ).fetchone()
    if row:
        sample.dead, sample.size_mb = int(row[0]), int(row[1]) / 2**20
    if system != PEER:
        sample.floors = _claim_buffers(probe, last.floors) if last.floors else None
        sample.walk = _claim_buffers(probe, None)
    return sample


def _pct(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def _print_sample(s: Sample, clean: float | None) -> None:
    share = f"({s.rate / clean:4.0%})" if clean else "      "
    claims = (
        f"claim p50/p99/max {_pct(s.claims, 0.5):5.1f}/{_pct(s.claims, 0.99):6.1f}/"
        f"{max(s.claims, default=0):6.1f} ms  "
        if s.claims
        else ""
    )
    buffers = (
        f"  buffers/claim floors {s.floors or 0:5d} walk {s.walk:6d}" if s.walk is not None else ""
    )
    print(
        f"  {s.phase:9s} {s.rate:7.0f} jobs/s {share} {claims}depth {s.depth:7d}  "
        f"dead {s.dead:8d}  size {s.size_mb:7.1f} MB{buffers}",
        flush=True,
    )


def peak(url: str, system: str, args: argparse.Namespace) -> tuple[float, float]:
    """The system's clean peak: ``(drain, fed)`` jobs a second.

    ``drain``: what its worker drains from a filled table with nothing else running.
    ``fed``: what it runs while a producer offers it ``drain`` jobs a second on top of a
    backlog, sharing the server and the cores as in the runs (the peak the runs' share
    is taken of: a drain alone does not pay for the inserts).
    """
    reset(url, system)
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(args.peak_fill // 20_000):
            conn.execute(_sql(system).insert.encode(), (20_000,))
        conn.execute(f"VACUUM ANALYZE {_sql(system).table}".encode())
    worker = Worker(system, url, args)
    try:
        worker.wait_ticks(2)  # warm up
        ticks = worker.wait_ticks(1)
        while len(ticks) < 11 and ticks[-1].done < args.peak_fill * 0.8:
            ticks += worker.wait_ticks(1)[1:]
        if len(ticks) < 4:
            raise SystemExit(f"{system}: the peak drain ran out of jobs; raise --peak-fill")
        drain = (ticks[-1].done - ticks[0].done) / (ticks[-1].t - ticks[0].t)
        producer = Producer(url, _sql(system).insert, drain)
        producer.start()
        try:
            worker.wait_ticks(2)
            ticks = worker.wait_ticks(10)
        finally:
            producer.stop()
    finally:
        worker.stop()
    fed = (ticks[-1].done - ticks[0].done) / (ticks[-1].t - ticks[0].t)
    return drain, fed


def run(
    url: str, system: str, pressure: str, rate: float, peak_rate: float, args: argparse.Namespace
) -> list[Sample]:
    reset(url, system)
    seconds = args.peer_pressure if system == PEER and args.peer_pressure else args.pressure
    phases = [("clean", args.clean), ("pressure", seconds), ("recovery", args.recovery)]
    worker = Worker(system, url, args)
    producer = Producer(url, _sql(system).insert, rate)
    samples: list[Sample] = []
    try:
        producer.start()
        with psycopg.connect(url, autocommit=True) as probe:
            clean: float | None = None
            for phase, length in phases:
                held = pressure if phase == "pressure" else "none"
                with pin(held, url, _sql(system).table):
                    if phase == "pressure" and pressure == "overload":
                        producer.set_rate(peak_rate * args.overload)
                    elif phase == "recovery":
                        producer.set_rate(rate)
                    end = time.monotonic() + length
                    while time.monotonic() < end:
                        s = _measure(probe, system, worker, phase, producer.rate())
                        samples.append(s)
                        _print_sample(s, clean)
                if phase == "clean":
                    clean = statistics.median(x.rate for x in samples) or None
    finally:
        producer.stop()
        worker.stop()
    return samples


@dataclass
class Verdict:
    system: str
    pressure: str
    offered: float
    clean_rate: float
    clean_p99: float | None
    clean_worst: float
    clean_worst_30s: float
    worst_share: float
    worst_30s: float
    median_share: float
    pressure_p99: float | None
    pressure_max: float | None
    after_p99: float | None
    back_after: float | None
    depth_max: int
    dead_max: int
    size_mb_max: float
    floors_max: int | None
    walk_max: int | None


def verdict(system: str, pressure: str, samples: list[Sample]) -> Verdict:
    def of(phase: str) -> list[Sample]:
        return [s for s in samples if s.phase == phase]

    clean, under, after = of("clean"), of("pressure"), of("recovery")
    clean_rate = statistics.median(s.rate for s in clean)
    # Overloaded, a worker should still do at least what it did clean (it cannot hold
    # its drain peak: the producer's inserts share the server); else keep up.
    shares = [s.rate / clean_rate for s in under]
    clean_claims = [c for s in clean for c in s.claims]
    under_claims = [c for s in under for c in s.claims]
    after_claims = [c for s in after for c in s.claims]
    clean_p99 = _pct(clean_claims, 0.99) if clean_claims else None
    # Back: the first recovery sample whose backlog is within what it was when clean (half
    # as deep again as the deepest clean sample, or a second and a half of work: at 80 % of
    # its peak a worker's backlog swings that much), from which on the claims are as fast
    # as clean (within 5 ms or 2x) and the worker keeps up (95 % of clean over the rest).
    back_after = None
    ended = under[-1].at if under else 0.0
    clean_depth = int(1.5 * max(max(s.depth for s in clean), clean_rate))
    for i, s in enumerate(after):
        rest = after[i:]
        rest_claims = [c for r in rest for c in r.claims]
        if (
            s.depth <= clean_depth
            and statistics.mean(r.rate for r in rest) >= 0.95 * clean_rate
            and (
                clean_p99 is None or _pct(rest_claims, 0.99) <= max(2 * clean_p99, clean_p99 + 5.0)
            )
        ):
            back_after = s.at - ended
            break
    return Verdict(
        system=system,
        pressure=pressure,
        offered=clean[0].offered,
        clean_rate=clean_rate,
        clean_p99=clean_p99,
        clean_worst=min(s.rate for s in clean) / clean_rate,
        clean_worst_30s=_worst_window([s.rate / clean_rate for s in clean]),
        worst_share=min(shares, default=0.0),
        worst_30s=_worst_window(shares),
        median_share=statistics.median(shares) if shares else 0.0,
        pressure_p99=_pct(under_claims, 0.99) if under_claims else None,
        pressure_max=max(under_claims, default=None),
        after_p99=_pct(after_claims, 0.99) if after_claims else None,
        back_after=back_after,
        depth_max=max(s.depth for s in samples),
        dead_max=max(s.dead for s in samples),
        size_mb_max=max(s.size_mb for s in samples),
        floors_max=max((s.floors for s in under if s.floors is not None), default=None),
        walk_max=max((s.walk for s in under if s.walk is not None), default=None),
    )


def _worst_window(shares: list[float], n: int = 30 // SAMPLE_TICKS) -> float:
    """The lowest mean of ``n`` consecutive samples' shares (30 s of them)."""
    if len(shares) <= n:
        return statistics.mean(shares) if shares else 0.0
    return min(statistics.mean(shares[i : i + n]) for i in range(len(shares) - n + 1))


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1f}"


def table(verdicts: list[Verdict]) -> str:
    lines = [
        "| pressure | system | offered jobs/s | clean worst sample (30 s) "
        "| held under pressure, worst sample (30 s) / median "
        "| claim p99 clean → pressure (max) → recovery, ms | back after | depth max "
        "| dead tuples max | table MB max | buffers/claim under pressure (walk) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for v in verdicts:
        back = "not within the run" if v.back_after is None else f"{v.back_after:.0f} s"
        buffers = "n/a" if v.floors_max is None else f"{v.floors_max} ({v.walk_max})"
        lines.append(
            f"| {v.pressure} | {v.system} | {v.offered:.0f} | {v.clean_worst:.0%} "
            f"({v.clean_worst_30s:.0%}) | {v.worst_share:.0%} ({v.worst_30s:.0%}) / "
            f"{v.median_share:.0%} | {_ms(v.clean_p99)} → {_ms(v.pressure_p99)} "
            f"({_ms(v.pressure_max)}) → {_ms(v.after_p99)} | {back} | {v.depth_max:,} "
            f"| {v.dead_max:,} | {v.size_mb_max:.0f} | {buffers} |"
        )
    return "\n".join(lines)


def report(paths: list[str]) -> list[Verdict]:
    """The verdicts of the runs written by ``--json`` to ``paths``, judged again."""
    verdicts = []
    for path in paths:
        for run in json.loads(Path(path).read_text())["runs"]:
            samples = [Sample(**s) for s in run["samples"]]
            v = run["verdict"]
            verdicts.append(verdict(v["system"], v["pressure"], samples))
    return verdicts


@contextlib.contextmanager
def _database(url: str | None) -> Iterator[str]:
    if url:
        yield url
    else:
        with embedded_postgres(tune_for_tests=False) as embedded:
            yield embedded


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--database")
    parser.add_argument("--systems", default="drover,graphile-batched")
    parser.add_argument("--pressures", default="idle-tx,rr-readers,slot,overload")
    parser.add_argument("--rate", type=float, help="jobs/s offered (default: --share of peak)")
    parser.add_argument("--share", type=float, default=0.8)
    parser.add_argument("--overload", type=float, default=1.5)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--job-ms", type=float, default=1.0)
    parser.add_argument("--clean", type=float, default=60.0)
    parser.add_argument("--pressure", type=float, default=600.0)
    parser.add_argument("--peer-pressure", type=float, help="the peer's pressure, seconds")
    parser.add_argument("--recovery", type=float, default=60.0)
    parser.add_argument("--peak-fill", type=int, default=200_000)
    parser.add_argument("--json", help="write every sample and verdict to this file")
    parser.add_argument(
        "--baseline-src", help="system drover@base runs the drover of this src directory"
    )
    parser.add_argument(
        "--report", nargs="+", metavar="JSON", help="print the verdicts of --json files, no run"
    )
    parser.add_argument("--child", choices=["drover", "drover-walk"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in args.systems.split(","):
        if name not in SYSTEMS:
            parser.error(f"unknown system {name!r}; choose from {', '.join(SYSTEMS)}")
        if name == BASE and not args.baseline_src:
            parser.error(f"system {BASE} needs --baseline-src (a checkout's src directory)")
    for name in args.pressures.split(","):
        if name not in ("idle-tx", "rr-readers", "slot", "overload", "none"):
            parser.error(f"unknown pressure {name!r}")
    return args


def main() -> None:
    args = parse_args()
    if args.child:
        drover_child(args.database, args.concurrency, args.job_ms, args.child == "drover-walk")
        return
    if args.report:
        print(table(report(args.report)))
        return
    systems = args.systems.split(",")
    verdicts: list[Verdict] = []
    everything: dict[str, Any] = {"args": vars(args), "runs": []}
    with _database(args.database) as url:
        setup(url, systems)
        for system in systems:
            drain, peak_rate = peak(url, system, args)
            rate = args.rate or peak_rate * args.share
            print(
                f"== {system}: clean peak {peak_rate:.0f} jobs/s fed ({drain:.0f} draining), "
                f"offered {rate:.0f}",
                flush=True,
            )
            for pressure in args.pressures.split(","):
                print(f"== {system}, {pressure}", flush=True)
                samples = run(url, system, pressure, rate, peak_rate, args)
                v = verdict(system, pressure, samples)
                verdicts.append(v)
                everything["runs"].append(
                    {
                        "peak": peak_rate,
                        "drain": drain,
                        "verdict": asdict(v),
                        "samples": [asdict(s) for s in samples],
                    }
                )
                if args.json:
                    Path(args.json).write_text(json.dumps(everything, default=str))
    print()
    print(table(verdicts))


if __name__ == "__main__":
    main()
