"""How fast an operator's cancel of a running job takes effect (ADR 0030).

    python bench/cancel_delivery.py                   # embedded PostgreSQL
    python bench/cancel_delivery.py --database URL --trials 20

Three figures, each over ``--trials`` cancels of a job whose handler waits on
its cancellation signal:

- ``notification``: from the call to ``Inspector.cancel_job`` to the moment the
  handler's ``job.context`` is set, on a client that listens (the default);
- ``heartbeat``: the same on a client with ``notify=False``, which learns from
  its heartbeat (every second here: a 3 s lease), each request made at a
  random point of the heartbeat's interval;
- ``hard``: from the call (``hard=True``, 1 s grace) to the job's row being
  ``cancelled``, when the handler ignores the signal and the supervised worker
  process (``drover worker --processes 1 --max-jobs-per-child N``) is replaced;
  the grace is included.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import drover


class Waits(drover.JobArgs, kind="bench_cancel_waits"):
    """Waits on its cancellation signal."""


class Ignores(drover.JobArgs, kind="bench_cancel_ignores"):
    """Never returns (the hard cancel's case)."""


workers = drover.Workers()
_started = threading.Event()
_seen: dict[int, float] = {}
_seen_event = threading.Event()


@workers.register
def waits(job: drover.Job[Waits]) -> None:
    _started.set()
    job.context.wait()
    _seen[job.id] = time.monotonic()
    _seen_event.set()


@workers.register
def ignores(job: drover.Job[Ignores]) -> None:
    threading.Event().wait()


def _config(notify: bool) -> drover.Config:
    return drover.Config(
        workers=workers, concurrency=2, lease_duration=3, poll_interval=0.05, notify=notify
    )


def make_client() -> drover.Client:
    """The APP of the supervised worker (``--hard``)."""
    return drover.Client(os.environ["DATABASE_URL"], _config(True))


@contextlib.contextmanager
def _database(url: str | None) -> Iterator[str]:
    if url is not None:
        yield url
        return
    from drover._db.embedded import embedded_postgres

    with embedded_postgres(tune_for_tests=False) as embedded:
        yield embedded


def _soft(url: str, notify: bool, trials: int) -> list[float]:
    latencies = []
    with drover.Client(url, _config(notify)) as client, drover.Inspector(url) as inspector:
        for _ in range(trials):
            _started.clear()
            _seen_event.clear()
            job = client.insert(Waits())
            if not _started.wait(30):
                raise RuntimeError("the job never started")
            # A trial ends at a heartbeat; without a random pause the next
            # request would always come just after one.
            time.sleep(random.uniform(0, 1.0))  # noqa: S311 - not a secret
            asked = time.monotonic()
            inspector.cancel_job(job.id)
            if not _seen_event.wait(30):
                raise RuntimeError("the handler never saw the cancel")
            latencies.append(_seen[job.id] - asked)
    return latencies


def _hard(url: str, trials: int) -> list[float]:
    env = {**os.environ, "DATABASE_URL": url}
    env.pop("DROVER_DATABASE_URL", None)
    command = [sys.executable, "-m", "drover", "worker", "cancel_delivery:make_client"]
    command += ["--processes", "1", "--max-jobs-per-child", "1000000"]
    supervisor = subprocess.Popen(
        command, cwd=Path(__file__).resolve().parent, env=env, stderr=subprocess.DEVNULL
    )
    took = []
    try:
        with contextlib.closing(drover.Client(url)) as producer, drover.Inspector(url) as inspector:
            for _ in range(trials):
                job = producer.insert(Ignores())
                while inspector.get_job(job.id).state is not drover.JobState.RUNNING:
                    time.sleep(0.01)
                asked = time.monotonic()
                inspector.cancel_job(job.id, hard=True, grace=1)
                while inspector.get_job(job.id).state is not drover.JobState.CANCELLED:
                    time.sleep(0.01)
                took.append(time.monotonic() - asked)
    finally:
        supervisor.send_signal(signal.SIGTERM)
        supervisor.wait(60)
    return took


def _report(name: str, values: list[float]) -> None:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    print(
        f"{name:>12}: p50 {statistics.median(ordered) * 1000:8.1f} ms   "
        f"p95 {p95 * 1000:8.1f} ms   max {ordered[-1] * 1000:8.1f} ms   ({len(values)} trials)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", help="PostgreSQL URL (default: embedded throwaway server)")
    parser.add_argument("--trials", type=int, default=20)
    options = parser.parse_args()
    with _database(options.database) as url:
        drover.migrate(url)
        _report("notification", _soft(url, True, options.trials))
        _report("heartbeat", _soft(url, False, options.trials))
        _report("hard (1 s)", _hard(url, max(3, options.trials // 4)))


if __name__ == "__main__":
    main()
