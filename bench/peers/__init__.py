"""The systems bench/compare.py measures, one module each, behind one small interface.

Every module in this package exposes the same functions (the parent process
calls the untimed ones, a fresh child process calls the timed ones):

- ``REQUIRES``: the package the system needs (``None``: always there); the module
  imports it at the top, so a missing peer fails ``load`` and is skipped.
- ``TABLES``: its tables (reset between trials, analyzed after a fill).
- ``setup(url)``: create the system's schema once (idempotent).
- ``reset(url)``: empty its tables (TRUNCATE) and ``VACUUM ANALYZE`` them.
- ``fill(url, n)``: untimed: enqueue ``n`` no-op jobs for a drain.
- ``count(url) -> (total, finished)``: rows in the job table, and how many finished.
- ``enqueue_bulk(url, n, batch) -> seconds``: timed bulk insert, in batches of ``batch``.
- ``enqueue_single(url, n, threads) -> seconds``: timed one-job-per-call insert.
- ``drain(url, n, concurrency) -> seconds``: timed burn-down of the ``n`` filled jobs.

  A timed function whose work runs in another process (graphile's Node runner)
  returns ``{"seconds", "cpu_seconds", "peak_rss_mb"}`` instead: that
  process's CPU over the timed window and its peak RSS; otherwise the child
  measures its own.
- ``latency(url, n, rate) -> [ms]``: enqueue→start of ``n`` jobs sent at ``rate``/s.

Connections and pools are opened before the clock starts, for every system.
"""

from __future__ import annotations

import asyncio
import importlib
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType

import psycopg

# name shown in tables → module in this package
SYSTEMS: dict[str, str] = {
    "raw": "raw",
    "raw-inline": "raw_inline",
    "raw-slots": "raw_slots",
    "drover": "drover_queue",
    "drover-async": "drover_async_queue",
    "procrastinate": "procrastinate_queue",
    "pgqueuer": "pgqueuer_queue",
    "chancy": "chancy_queue",
    "graphile": "graphile_queue",
    "graphile-batched": "graphile_batched_queue",
}
PEERS = ("procrastinate", "pgqueuer", "chancy", "graphile", "graphile-batched")
# Systems `bench/compare.py` runs when --systems is not given. graphile-worker
# needs Node and an npm install (bench/peers/graphile_queue.py): name it to run it.
DEFAULT_SYSTEMS = ("raw", "raw-inline", "drover", "procrastinate", "pgqueuer", "chancy")

WORK = 0.0
"""Seconds each drained job waits (``drain-cN-sleepXms``), set in the trial's process;
0 for no-op jobs. A handler calls ``work()`` (or awaits ``awork()``) first."""


def work() -> None:
    """The drained job's wait, on a thread (``time.sleep``): I/O-like work."""
    if WORK:
        time.sleep(WORK)


async def awork() -> None:
    """The drained job's wait, on an event loop (``asyncio.sleep``)."""
    if WORK:
        await asyncio.sleep(WORK)


def load(name: str) -> ModuleType:
    """The adapter module for ``name``."""
    return importlib.import_module(f"{__name__}.{SYSTEMS[name]}")


def missing(name: str) -> str | None:
    """Why ``name`` cannot run here, or ``None`` when it can."""
    try:
        load(name)
    except ImportError as exc:
        return f"{exc.name or name} is not installed ({exc})"
    return None


def version(package: str) -> str:
    """The installed version of ``package``, or ``"?"``."""
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "?"


def execute(url: str, *statements: str) -> None:
    """Run each statement in autocommit (VACUUM cannot run in a transaction)."""
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement.encode())


def scalar_pair(url: str, sql: str) -> tuple[int, int]:
    """A query returning one row of two integers."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(sql.encode()).fetchone()
    assert row is not None
    return int(row[0] or 0), int(row[1] or 0)


def truncate_and_vacuum(url: str, tables: Sequence[str]) -> None:
    """TRUNCATE ``tables`` together, then VACUUM ANALYZE each."""
    execute(
        url,
        f"TRUNCATE {', '.join(tables)} CASCADE",
        *(f"VACUUM ANALYZE {t}" for t in tables),
    )


def table_exists(url: str, table: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
    return bool(row and row[0])


def split(n: int, parts: int) -> list[range]:
    """``range(n)`` cut into ``parts`` contiguous pieces of near-equal size."""
    step, extra = divmod(n, parts)
    out, start = [], 0
    for i in range(parts):
        size = step + (1 if i < extra else 0)
        out.append(range(start, start + size))
        start += size
    return out


def run_threads(
    n: int,
    threads: int,
    prepare: Callable[[], object],
    work: Callable[[object, range], None],
) -> float:
    """Time ``threads`` threads, each doing ``work(resource, its share of range(n))``.

    ``prepare()`` runs in each thread before the clock starts (open a
    connection, say); the clock starts when every thread is ready and stops
    when the last one finishes.
    """
    ready = threading.Barrier(threads + 1)
    go = threading.Event()
    errors: list[BaseException] = []

    def body(part: range) -> None:
        try:
            resource = prepare()
        except BaseException as exc:
            errors.append(exc)
            ready.abort()
            raise
        ready.wait()
        go.wait()
        try:
            work(resource, part)
        except BaseException as exc:
            errors.append(exc)
            raise

    pool = [threading.Thread(target=body, args=(p,)) for p in split(n, threads)]
    for t in pool:
        t.start()
    ready.wait()
    started = time.perf_counter()
    go.set()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise errors[0]
    return elapsed


class Latencies:
    """Collects enqueue→start latencies; drives the producer at a fixed rate.

    Each job carries its index ``i`` and the ``perf_counter()`` taken just
    before its insert call (same process, same clock). Handlers call
    :meth:`record` first thing. Three warm-up jobs (``i = -1``), sent after the
    worker has had a second to settle, are not recorded.
    """

    WARMUP = 3
    SETTLE = 1.0

    def __init__(self, n: int) -> None:
        self.n = n
        self.values: list[float] = []
        self.done = threading.Event()
        self._lock = threading.Lock()

    def record(self, i: int, sent: float) -> None:
        now = time.perf_counter()
        if i < 0:
            return
        with self._lock:
            self.values.append((now - sent) * 1000)
            if len(self.values) >= self.n:
                self.done.set()

    def read_worker(self, lines: Iterable[str], ready: threading.Event) -> None:
        """Read a worker process's output (graphile's runner, drover's latency worker):
        ``ready`` once it listens, ``lat <i> <ms>`` per probe (warm-ups, ``i < 0``, skipped)."""
        for line in lines:
            if line.startswith("ready"):
                ready.set()
            elif line.startswith("lat "):
                _, i, ms = line.split()
                if int(i) < 0:
                    continue
                with self._lock:
                    self.values.append(float(ms))
                    if len(self.values) >= self.n:
                        self.done.set()

    def drive(self, rate: float, send: Callable[[int, float], object]) -> list[float]:
        """Send the warm-up jobs, then ``n`` jobs at ``rate`` per second; wait for all."""
        time.sleep(self.SETTLE)
        for _ in range(self.WARMUP):
            send(-1, time.perf_counter())
            time.sleep(0.1)
        time.sleep(0.5)
        interval = 1.0 / rate
        start = time.perf_counter()
        for i in range(self.n):
            delay = start + i * interval - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            send(i, time.perf_counter())
        wait_for(self.done, f"{self.n} latency jobs")
        return self.values


def wait_for(event: threading.Event, what: str, timeout: float = 120.0) -> None:
    if not event.wait(timeout):
        raise TimeoutError(f"{what} did not happen within {timeout:.0f} s")
