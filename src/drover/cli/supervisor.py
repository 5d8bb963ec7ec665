"""``drover worker --processes N``: a supervisor of worker processes, and the child's run loop.

The supervisor starts N children, each ``python -m drover ... worker APP`` with
its own ``Client`` (own pool, own lease identity) and an ops port on an
ephemeral loopback address it reports through a small status file. It
forwards SIGTERM/SIGINT to every child for a graceful drain, restarts a child
that dies (exponential back-off, giving up after repeated crashes), restarts
at once a child that asked to be recycled (job count or memory limit), and
serves one ops port: ``/metrics`` merges the children's metrics with a
``child`` label, ``/readyz`` answers 200 only when every child is ready.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

import drover
from drover.cli.hardcancel import HARD_CANCEL_EXIT, HardCancels, replace_after_hard_cancel
from drover.cli.shutdown import Signals, end_process
from drover.context import JobContext
from drover.job import JobRow
from drover.middleware import AsyncHandler, Handler, with_async_form
from drover.ops.server import OpsServer

__all__ = ["HARD_CANCEL_EXIT", "RECYCLE_EXIT", "Supervisor", "run_child"]

RECYCLE_EXIT = 75
"""A child's exit status after it drained because it reached its job or memory limit."""
DRAIN_INCOMPLETE_EXIT = 3
"""A child's exit status when its drain ran out of time: it handed back its unfinished jobs
and ended itself, handler threads still running or not (ADR 0053)."""
STATUS_ENV = "DROVER_SUPERVISED_STATUS"
"""The file a supervised child writes its ops port into."""

_CRASH_WINDOW = 60.0
_MAX_CRASHES = 5
_FIRST_BACKOFF = 0.5
_MAX_BACKOFF = 10.0
_ABORT_GRACE = 3.0
"""After a second signal, how long a worker process has to end before it is killed."""

_log = logging.getLogger("drover.supervisor")


# --- the child ---------------------------------------------------------------------------------


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def run_child(client: drover.Client, *, max_jobs: int | None, max_memory_mb: int | None) -> int:
    """Run ``client`` as a supervised child: until SIGTERM, or until a recycling limit.

    A child claims at most ``max_jobs`` jobs; once it has run them all (or
    exceeds ``max_memory_mb`` of resident memory) it stops and drains, then
    exits ``RECYCLE_EXIT`` so the supervisor starts a fresh process. The
    ops port is bound on an ephemeral loopback port and written to the file
    named by ``$DROVER_SUPERVISED_STATUS``.

    An operator's hard cancel of one of its jobs (ADR 0030) is watched here:
    once its grace has passed with the handler still running, the child
    stops with no drain budget, so every job it has not finished is handed
    back in one write (the cancelled one ends ``cancelled``, the others are
    claimable at once), and exits ``HARD_CANCEL_EXIT`` without waiting for
    the stuck handler's thread; the supervisor starts a fresh process.

    A drain that runs out of budget hands back the unfinished jobs (held from
    other workers until this process ends) and ends the process at once with
    ``DRAIN_INCOMPLETE_EXIT``, abandoned handler threads with it; a second
    SIGTERM during the drain ends it at once with 143. SIGINT is ignored:
    the supervisor forwards a terminal's Ctrl-C as SIGTERM (ADR 0053).
    """
    stop = threading.Event()
    recycled = threading.Event()
    hard = HardCancels()
    config = client.config
    changes: dict[str, object] = {"ops_addr": "127.0.0.1:0", "metrics_registry": None}
    if max_jobs is not None:
        done = [0]
        lock = threading.Lock()

        def count(next_handler: Handler) -> Handler:
            def handle(ctx: JobContext, row: JobRow) -> None:
                try:
                    next_handler(ctx, row)
                finally:
                    counted()

            return handle

        def count_async(next_handler: AsyncHandler) -> AsyncHandler:
            async def handle(ctx: JobContext, row: JobRow) -> None:
                try:
                    await next_handler(ctx, row)
                finally:
                    counted()

            return handle

        def counted() -> None:
            with lock:
                done[0] += 1
                reached = done[0] >= max_jobs
            if reached:
                recycled.set()
                stop.set()
                hard.wake.set()

        with_async_form(count, count_async)
        changes["middleware"] = (count, *config.middleware)
    # Claims stop at the limit itself, so a process runs exactly max_jobs.
    child = client._derive(config.replace(**changes), max_jobs=max_jobs, hard_cancel=hard.add)
    hold = child._hold_hand_backs()
    # SIGTERM from the supervisor; SIGINT (a terminal's Ctrl-C reaches the
    # whole process group) is the supervisor's to forward, or one Ctrl-C would
    # arrive here twice and end the drain at once.
    signals = Signals(obey=(signal.SIGTERM,), ignore=(signal.SIGINT,), wakes=(stop, hard.wake))
    signals.install()
    try:
        child.start()
        status = os.environ.get(STATUS_ENV)
        address = child.ops_addr
        if status and address is not None:
            Path(status).write_text(str(address[1]))
        while not stop.is_set():
            hard.wake.wait(hard.wait_for())
            hard.wake.clear()
            if stop.is_set() or hard.due():
                break
            if max_memory_mb is not None and _rss_bytes() > max_memory_mb * 1024 * 1024:
                _log.warning(
                    "worker process %d uses more than %d MB; draining it for a fresh one",
                    os.getpid(),
                    max_memory_mb,
                    extra={"event": "process_memory_limit", "max_memory_mb": max_memory_mb},
                )
                recycled.set()
                stop.set()
        if hard.fired is not None:
            return replace_after_hard_cancel(child, hard.fired)
        hold.open()
        try:
            child.stop(config.shutdown_timeout)
        except drover.DrainIncomplete as exc:
            _log.error("%s", exc)
            # Its unfinished jobs are handed back and held until this process
            # ends: end it now, abandoned handler threads with it (ADR 0053).
            child.close()
            end_process(DRAIN_INCOMPLETE_EXIT)
    finally:
        signals.restore()
        hold.close()
        child.close()
    return RECYCLE_EXIT if recycled.is_set() else 0


# --- the supervisor ----------------------------------------------------------------------------


@dataclass
class _Child:
    slot: int
    proc: subprocess.Popen[bytes]
    status: Path
    started: float = field(default_factory=time.monotonic)

    @property
    def port(self) -> int | None:
        try:
            return int(self.status.read_text())
        except (OSError, ValueError):
            return None

    def get(self, path: str, timeout: float = 1.0) -> tuple[int, str]:
        port = self.port
        if port is None:
            return 0, "not listening yet"
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{port}{path}", timeout=timeout
            ) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode(errors="replace")
        except OSError as exc:
            return 0, str(exc)


class _Merged(Collector):
    """The children's metrics, each sample labelled with its child's slot."""

    def __init__(self, children: dict[int, _Child]) -> None:
        self._children = children

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        for slot, child in sorted(self._children.items()):
            status, text = child.get("/metrics")
            if status != 200:
                continue
            for family in text_string_to_metric_families(text):
                target = merged.get(family.name)
                if target is None:
                    target = merged[family.name] = Metric(
                        family.name, family.documentation, family.type, family.unit
                    )
                for s in family.samples:
                    target.add_sample(
                        s.name, {**s.labels, "child": str(slot)}, s.value, s.timestamp
                    )
        yield from merged.values()


class Supervisor:
    """Runs ``processes`` copies of a worker command and keeps them running until told to stop.

    Logging (on `drover.supervisor`): INFO when a process starts, is
    recycled or is asked to stop; ERROR when one exits on its own (with the
    back-off before its restart) or does not drain; CRITICAL when the
    supervisor gives up. The children inherit its standard error, so their
    own records appear there too.

    Thread model: ``run`` owns the children from the main thread; the ops
    listener reads them from its own threads (a dict read and HTTP calls to
    the children). A child that exits on its own is restarted: at once when
    it was recycled (``RECYCLE_EXIT``) or replaced after an operator's
    hard cancel (``HARD_CANCEL_EXIT``), after an exponential back-off
    (0.5 s doubling to 10 s) when it crashed. Five crashes of the children
    within 60 s make the supervisor give up: it stops the rest and exits 1
    with the reason. On SIGTERM/SIGINT every child is sent SIGTERM and
    given ``shutdown_timeout`` plus 10 s to drain before it is killed (a
    child whose budget ran out hands back and ends itself, ``DRAIN_INCOMPLETE_EXIT``).
    The exit status is 0 when every child drained, 1 otherwise, with
    ``failure`` naming each process that did not and why. A second signal
    during the drain sends every child SIGTERM again (which ends it at once),
    kills any still running ``_ABORT_GRACE`` seconds later, and sets
    ``interrupted`` (the command then exits 128 + that signal).
    """

    def __init__(
        self,
        command: list[str],
        processes: int,
        *,
        shutdown_timeout: float,
        ops_addr: str | None,
    ) -> None:
        self._command = command
        self._processes = processes
        self._shutdown_timeout = shutdown_timeout
        self._ops_addr = ops_addr
        self._children: dict[int, _Child] = {}
        self._stopping = threading.Event()
        self._crashes: list[float] = []
        self._dir = Path(tempfile.mkdtemp(prefix="drover-supervisor-"))
        self._signalled = False
        self._draining = False
        self._abort_at: float | None = None
        self.failure: str | None = None
        self.interrupted: int | None = None
        """The second signal that cut the drain short, if one did."""

    def _spawn(self, slot: int) -> _Child:
        status = self._dir / f"child-{slot}.port"
        status.unlink(missing_ok=True)
        env = {**os.environ, STATUS_ENV: str(status)}
        proc = subprocess.Popen(self._command, env=env)
        child = _Child(slot, proc, status)
        self._children[slot] = child
        _log.info(
            "started worker process %d (slot %d)",
            proc.pid,
            slot,
            extra={"event": "process_started", "child_pid": proc.pid, "slot": slot},
        )
        return child

    def ready(self) -> tuple[bool, str]:
        """True when every child answers ``/readyz`` with 200."""
        if len(self._children) < self._processes:
            return False, "not every worker process is running"
        for slot, child in sorted(self._children.items()):
            status, text = child.get("/readyz")
            if status != 200:
                return False, f"worker process {child.proc.pid} (slot {slot}): {text.strip()}"
        return True, f"ok: {self._processes} worker processes ready"

    def run(self) -> int:
        """Start the children and supervise them until SIGTERM/SIGINT or giving up."""

        def on_signal(signum: int, frame: FrameType | None) -> None:
            if self._signalled and self.interrupted is None:
                self._interrupt(signum)
            self._signalled = True
            self._stopping.set()

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        ops: OpsServer | None = None
        try:
            if self._ops_addr is not None:
                registry = CollectorRegistry(auto_describe=False)
                registry.register(_Merged(self._children))
                ops = OpsServer(
                    self._ops_addr,
                    registry=registry,
                    ready=self.ready,
                    client_id="supervisor",
                    logger=_log,
                )
                ops.start()
            for slot in range(self._processes):
                self._spawn(slot)
            backoff = _FIRST_BACKOFF
            while not self._stopping.wait(0.2):
                for slot, child in list(self._children.items()):
                    code = child.proc.poll()
                    if code is None:
                        continue
                    if code == RECYCLE_EXIT:
                        _log.info(
                            "worker process %d reached its limit and drained; replacing it",
                            child.proc.pid,
                            extra={
                                "event": "process_recycled",
                                "child_pid": child.proc.pid,
                                "slot": slot,
                            },
                        )
                        self._spawn(slot)
                        continue
                    if code == DRAIN_INCOMPLETE_EXIT:
                        # A drain it started itself (a job or memory limit, or an
                        # operator's SIGTERM to it) ran out of budget: its jobs were
                        # handed back and it ended itself. Not a crash.
                        _log.warning(
                            "worker process %d drained for a fresh one but ran out of its "
                            "drain budget; its unfinished jobs were handed back; replacing it",
                            child.proc.pid,
                            extra={
                                "event": "process_recycled",
                                "child_pid": child.proc.pid,
                                "slot": slot,
                                "drain_incomplete": True,
                            },
                        )
                        self._spawn(slot)
                        continue
                    if code == HARD_CANCEL_EXIT:
                        _log.info(
                            "worker process %d was running a job hard-cancelled by an "
                            "operator; replacing it",
                            child.proc.pid,
                            extra={
                                "event": "process_replaced_after_hard_cancel",
                                "child_pid": child.proc.pid,
                                "slot": slot,
                            },
                        )
                        self._spawn(slot)
                        continue
                    now = time.monotonic()
                    self._crashes = [t for t in self._crashes if now - t < _CRASH_WINDOW]
                    self._crashes.append(now)
                    if len(self._crashes) >= _MAX_CRASHES:
                        self.failure = (
                            f"worker processes crashed {len(self._crashes)} times within "
                            f"{_CRASH_WINDOW:.0f} s (the last, pid {child.proc.pid}, exited "
                            f"{code}); giving up"
                        )
                        _log.critical(
                            "%s",
                            self.failure,
                            extra={
                                "event": "supervisor_gave_up",
                                "child_pid": child.proc.pid,
                                "exit_code": code,
                                "crashes": len(self._crashes),
                            },
                        )
                        self._stopping.set()
                        break
                    if now - child.started > _CRASH_WINDOW:
                        backoff = _FIRST_BACKOFF  # it had been running fine
                    _log.error(
                        "worker process %d exited %s; restarting it in %.1fs",
                        child.proc.pid,
                        code,
                        backoff,
                        extra={
                            "event": "process_exited",
                            "child_pid": child.proc.pid,
                            "slot": slot,
                            "exit_code": code,
                            "restart_in": backoff,
                        },
                    )
                    if self._stopping.wait(backoff):
                        break
                    backoff = min(backoff * 2, _MAX_BACKOFF)
                    self._spawn(slot)
            return self._stop_children()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if ops is not None:
                ops.stop()
            for child in self._children.values():
                with contextlib.suppress(ProcessLookupError):
                    child.proc.kill()
            with contextlib.suppress(OSError):
                for path in self._dir.iterdir():
                    path.unlink()
                self._dir.rmdir()

    def _interrupt(self, signum: int) -> None:
        """A second signal (the signal handler, on the main thread): every process is told
        again, which ends its drain at once, and any still running soon after is killed."""
        self.interrupted = signum
        self._abort_at = time.monotonic() + _ABORT_GRACE
        if self._draining:
            for child in self._children.values():
                with contextlib.suppress(ProcessLookupError):
                    child.proc.send_signal(signal.SIGTERM)

    def _wait(self, child: _Child, deadline: float) -> int | None:
        """``child``'s exit status, killing it at ``deadline`` (or sooner after a second
        signal); ``None`` when it had to be killed."""
        while True:
            limit = deadline if self._abort_at is None else min(deadline, self._abort_at)
            remaining = limit - time.monotonic()
            if remaining <= 0:
                break
            try:
                return child.proc.wait(min(0.2, remaining))
            except subprocess.TimeoutExpired:
                continue
        child.proc.kill()
        child.proc.wait()
        return None

    def _stop_children(self) -> int:
        _log.info(
            "stopping %d worker processes; each has %gs to finish its jobs",
            len(self._children),
            self._shutdown_timeout,
            extra={"event": "supervisor_stopping", "processes": len(self._children)},
        )
        self._draining = True
        signals = 2 if self.interrupted is not None else 1
        for _ in range(signals):
            for child in self._children.values():
                with contextlib.suppress(ProcessLookupError):
                    child.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self._shutdown_timeout + 10
        problems: list[str] = []
        for child in self._children.values():
            code = self._wait(child, deadline)
            if self.interrupted is not None:
                continue  # the command's one line says it all
            if code not in (0, RECYCLE_EXIT, HARD_CANCEL_EXIT):
                problems.append(f"worker process {child.proc.pid} {_drain_outcome(code)}")
                _log.error(
                    "%s",
                    problems[-1],
                    extra={
                        "event": "process_drain_failed",
                        "child_pid": child.proc.pid,
                        "exit_code": code,
                    },
                )
        if problems and self.failure is None:
            # What the CLI prints, so an operator learns which process did not
            # drain and why without having configured logging.
            self.failure = "; ".join(problems)
        return 0 if self.failure is None else 1


def _drain_outcome(code: int | None) -> str:
    if code is None:
        return "did not stop within its drain budget + 10 s and was killed"
    if code == DRAIN_INCOMPLETE_EXIT:
        return (
            "ran out of its drain budget; the jobs it was running were handed back "
            "(their next claim is their next attempt)"
        )
    if code < 0:
        return f"was killed by signal {-code} during its drain"
    return f"ended its drain with status {code}"


def child_command(argv: list[str]) -> list[str]:
    """The command line a child runs: this process's own, marked as supervised."""
    return [sys.executable, "-m", "drover", *argv]
