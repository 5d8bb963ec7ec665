"""The worker processes of a fault run, and the nemesis that hits them one fault at a time.

``FleetSettings`` holds what the processes and the faults share (how many,
their lease and intervals, which faults, the seed); a ``Fleet`` starts,
replaces and signals the processes (a subclass says what one runs, in
``spawn``); the ``Nemesis`` injects a fault and records it in the
orchestrator's history; ``schedule`` draws the faults' order. ``chunks``,
``feed`` and ``workdir`` are the steps every orchestrator takes around them.

``drover faults --app`` (``drover.faults.app``) runs on these, and so do
drover's own fault suite and soak, which live in a clone of the repository
(``faults/``), not in the package (ADR 0049). Nothing here is thread-safe:
one orchestrator drives a fleet and its nemesis.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psycopg

import drover
from drover.faults.harness.cluster import Cluster
from drover.faults.harness.jsonl import HistoryFile
from drover.faults.harness.proxy import Mode, TcpProxy

__all__ = [
    "FAULT_KINDS",
    "SERVER_FAULTS",
    "Fleet",
    "FleetSettings",
    "Nemesis",
    "Worker",
    "chunks",
    "feed",
    "schedule",
    "workdir",
]

FAULT_KINDS = (
    "kill", "stop", "pg_restart", "pg_crash", "terminate", "drain", "proxy_cut",
    "proxy_blackhole",
)  # fmt: skip

SERVER_FAULTS = frozenset({"pg_restart", "pg_crash"})
"""Fault kinds that need a cluster of the run's own (``Cluster``), which they restart."""


@dataclass
class FleetSettings:
    """What the worker processes and the nemesis of one run share. Durations are in seconds."""

    faults: int = 30
    seed: int = 1
    workers: int = 3
    """Worker processes."""
    concurrency: int = 4
    """Jobs at once per worker process."""
    kinds: tuple[str, ...] = FAULT_KINDS
    lease: float = 2.0
    heartbeat: float = 0.5
    rescue: float = 0.5
    poll: float = 0.2
    drain_budget: float = 1.0
    """Each worker's shutdown timeout; a ``drain`` fault SIGTERMs one and waits for it."""
    fault_every: float = 1.0
    """Seconds between two faults (after the previous one healed)."""


@dataclass
class Worker:
    """One worker process and when it started."""

    proc: subprocess.Popen[bytes]
    started: float


class Fleet:
    """The worker processes: spawn, replace, and the signals the nemesis sends them.

    A subclass implements ``spawn`` (start one process, append it to
    ``workers``, return it); ``dsn`` is where the processes' drover connects
    (a proxy, for the network faults), ``effects_dsn`` where their handlers
    write directly, ``history`` the run's history directory. Leaving the
    ``with`` block kills whatever is left, even a SIGSTOPped process.
    """

    def __init__(self, settings: FleetSettings, dsn: str, effects_dsn: str, history: Path) -> None:
        self.settings = settings
        self.dsn = dsn
        self.effects_dsn = effects_dsn
        self.history = history
        self.workers: list[Worker] = []

    def spawn(self) -> Worker:
        """Start one worker process, add it to ``workers`` and return it."""
        raise NotImplementedError

    def replace(self, worker: Worker) -> None:
        """Forget ``worker`` (it exited) and start another in its place."""
        self.workers.remove(worker)
        self.spawn()

    def pick(self, rng: random.Random) -> Worker:
        """The worker a per-process fault hits: a seeded draw among all of them."""
        return rng.choice(self.workers)

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        # Whatever ended the run (an error, a timeout, Ctrl-C mid-SIGSTOP), no
        # worker outlives it: wake any paused one, then kill what is left.
        for w in self.workers:
            with contextlib.suppress(ProcessLookupError):
                w.proc.send_signal(signal.SIGCONT)
                w.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                w.proc.wait(10)
        self.workers.clear()

    def stop_all(self, timeout: float) -> list[int | None]:
        """SIGTERM every worker, wait up to ``timeout`` each (then SIGKILL); their exit codes."""
        for w in self.workers:
            with contextlib.suppress(ProcessLookupError):
                w.proc.send_signal(signal.SIGTERM)
        codes: list[int | None] = []
        for w in self.workers:
            try:
                codes.append(w.proc.wait(timeout))
            except subprocess.TimeoutExpired:
                w.proc.kill()
                codes.append(w.proc.wait())
        self.workers.clear()
        return codes


class Nemesis:
    """Injects one fault at a time and records it in the orchestrator's ``history``.

    ``cluster`` is None when the database is not the run's own: the server
    faults (``SERVER_FAULTS``) must then not be scheduled. ``counts`` says
    how many faults of each kind were injected.
    """

    def __init__(
        self,
        settings: FleetSettings,
        fleet: Fleet,
        cluster: Cluster | None,
        proxy: TcpProxy,
        admin_dsn: str,
        history: HistoryFile,
        rng: random.Random,
    ) -> None:
        self._s = settings
        self._fleet = fleet
        self._cluster = cluster
        self._proxy = proxy
        self._admin = admin_dsn
        self._history = history
        self._rng = rng
        self.counts: dict[str, int] = dict.fromkeys(FAULT_KINDS, 0)

    def _record(
        self, kind: str, t_start: float, t_end: float, pid: int | None, **extra: Any
    ) -> None:
        self.counts[kind] += 1
        self._history.write(ev="fault", kind=kind, t_start=t_start, t_end=t_end, pid=pid, **extra)

    def inject(self, kind: str) -> None:
        """Inject one fault of ``kind`` (one of ``FAULT_KINDS``), wait for it to heal, record it."""
        getattr(self, f"_{kind}")()

    def _server(self) -> Cluster:
        if self._cluster is None:
            raise drover.InvalidArgument("a server fault needs a cluster of the run's own")
        return self._cluster

    def _kill(self) -> None:
        worker = self._fleet.pick(self._rng)
        t = time.time()
        worker.proc.send_signal(signal.SIGKILL)
        worker.proc.wait()
        self._record("kill", t, t, worker.proc.pid)
        self._fleet.replace(worker)

    def _stop(self) -> None:
        # Paused past its lease: it is presumed dead, its jobs rescued and re-run;
        # when it wakes, its handlers finish and its writes must be refused.
        worker = self._fleet.pick(self._rng)
        t = time.time()
        worker.proc.send_signal(signal.SIGSTOP)
        time.sleep(2 * self._s.lease + self._s.rescue + 0.5)
        worker.proc.send_signal(signal.SIGCONT)
        self._record("stop", t, time.time(), worker.proc.pid)

    def _pg_restart(self) -> None:
        t = time.time()
        self._server().restart("fast")
        self._record("pg_restart", t, time.time(), None)

    def _pg_crash(self) -> None:
        t = time.time()
        self._server().restart("immediate")
        self._record("pg_crash", t, time.time(), None)

    def _terminate(self) -> None:
        t = time.time()
        with psycopg.connect(self._admin, autocommit=True) as conn:
            killed = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM ("
                " SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'drover%%'"
                " ORDER BY random() LIMIT 3) AS victims"
            ).fetchone()
        self._record("terminate", t, time.time(), None, backends=int(killed[0]) if killed else 0)

    def _drain(self) -> None:
        worker = self._fleet.pick(self._rng)
        t = time.time()
        worker.proc.send_signal(signal.SIGTERM)
        try:
            code: int | None = worker.proc.wait(self._s.drain_budget + 30)
        except subprocess.TimeoutExpired:
            worker.proc.kill()
            worker.proc.wait()
            code = None
        self._record(
            "drain", t, time.time(), worker.proc.pid, budget=self._s.drain_budget, exit_code=code
        )
        self._fleet.replace(worker)

    def _proxy_cut(self) -> None:
        t = time.time()
        self._proxy.cut()
        self._record("proxy_cut", t, t, None)

    def _proxy_blackhole(self) -> None:
        # Half-open for longer than a lease, then the middlebox gives up and
        # resets the flows (the kernel's retransmission timeout would, in life).
        t = time.time()
        self._proxy.set_mode(Mode.BLACKHOLE)
        time.sleep(self._s.lease * 1.5)
        self._proxy.cut()
        self._proxy.set_mode(Mode.PASS)
        self._record("proxy_blackhole", t, time.time(), None)


def schedule(settings: FleetSettings, rng: random.Random) -> list[str]:
    """The faults in order: every kind once per round, each round shuffled (seeded)."""
    order: list[str] = []
    while len(order) < settings.faults:
        order += rng.sample(settings.kinds, len(settings.kinds))
    return order[: settings.faults]


_T = TypeVar("_T")


def chunks(items: list[_T], parts: int) -> list[list[_T]]:
    """``items`` in ``parts`` consecutive chunks of near-equal size (the first gets the rest)."""
    size, extra = divmod(len(items), parts)
    out, start = [], 0
    for n in range(parts):
        end = start + size + (extra if n == 0 else 0)
        out.append(items[start:end])
        start = end
    return out


def feed(client: drover.Client, items: list[drover.InsertItem]) -> None:
    """Insert ``items`` (COPY batches), retrying while the nemesis has the database down."""
    for start in range(0, len(items), 1000):
        batch = items[start : start + 1000]
        deadline = time.monotonic() + 60
        while True:
            try:
                client.insert_many(batch)
                break
            except drover.DatabaseError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


@contextlib.contextmanager
def workdir(out: Path | None) -> Iterator[Path]:
    """``out`` (created, kept), or a temporary directory deleted at exit."""
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        yield out
        return
    path = Path(tempfile.mkdtemp(prefix="drover-faults-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
