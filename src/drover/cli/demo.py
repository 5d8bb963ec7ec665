"""``drover demo``: a worker pool draining a few thousand sample jobs, start to finish.

Uses ``--database`` / ``DROVER_DATABASE_URL`` / ``DATABASE_URL`` when given,
otherwise a throwaway embedded PostgreSQL that is deleted on exit.
"""

from __future__ import annotations

import contextlib
import random
import signal
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from types import FrameType
from typing import TextIO

import drover
from drover._db.embedded import embedded_postgres
from drover._db.store import Store
from drover.job import TERMINAL_STATES

__all__ = ["run_demo"]

STATES = [s.value for s in drover.JobState]
TERMINAL = {s.value for s in TERMINAL_STATES}


class SendEmail(drover.JobArgs, kind="demo_send_email", queue="email"):
    to: str


class ResizeImage(drover.JobArgs, kind="demo_resize_image", queue="images"):
    image_id: int
    flaky: bool = False


class Digest(drover.JobArgs, kind="demo_digest"):
    user_id: int


class QuickRetry:
    """Retry after a fraction of a second so the demo shows retries without waiting minutes."""

    def next_retry(self, job: drover.JobRow) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=0.2 * job.attempt)


def _workers() -> drover.Workers:
    workers = drover.Workers()

    @workers.register
    def send_email(job: drover.Job[SendEmail]) -> None:
        job.context.wait(random.uniform(0, 0.002))  # noqa: S311 - simulated latency

    @workers.register
    def resize_image(job: drover.Job[ResizeImage]) -> None:
        if job.args.flaky and job.attempt == 1:
            raise RuntimeError(f"image {job.args.image_id}: storage timed out")
        job.context.wait(random.uniform(0, 0.004))  # noqa: S311 - simulated latency

    snoozed: set[int] = set()
    lock = threading.Lock()

    @workers.register
    def digest(job: drover.Job[Digest]) -> None:
        # Every 50th digest is not ready yet: snooze it once (no attempt spent).
        if job.args.user_id % 50 == 2:
            with lock:
                first_time = job.id not in snoozed
                snoozed.add(job.id)
            if first_time:
                raise drover.Snooze(0.3)

    return workers


@contextlib.contextmanager
def _database(url: str | None, out: TextIO) -> Iterator[str]:
    if url:
        yield url
        return
    print("no database URL given: starting a throwaway embedded PostgreSQL", file=out)
    with embedded_postgres() as embedded:
        yield embedded


def _progress(counts: dict[tuple[str, str], int]) -> str:
    by_state = dict.fromkeys(STATES, 0)
    for (_queue, state), n in counts.items():
        by_state[state] += n
    return "  ".join(f"{state} {by_state[state]:>5}" for state in STATES if by_state[state])


def run_demo(url: str | None, *, jobs: int, concurrency: int, out: TextIO = sys.stdout) -> int:
    """Run the demo; return the process exit code."""
    interrupted = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        interrupted.set()

    on_main = threading.current_thread() is threading.main_thread()
    previous = (
        {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        if on_main
        else {}
    )
    try:
        with _database(url, out) as database, contextlib.ExitStack() as stack:
            applied = drover.migrate(database)
            print(f"schema ready ({len(applied)} migration(s) applied)", file=out)
            # The progress lines count every job, finished ones too: a read of
            # the store's operator side on a pool of its own, which outlives
            # the client's (closed by stop) for the last count.
            store = stack.enter_context(
                contextlib.closing(Store.open(database, who="drover demo", max_size=1))
            )
            config = drover.Config(
                workers=_workers(),
                concurrency=concurrency,
                queues={"email": 4, "images": 2, "default": 1},
                retry_policy=QuickRetry(),
                poll_interval=0.2,
                shutdown_timeout=10,
            )
            client = drover.Client(database, config)
            items: list[drover.InsertItem] = []
            for i in range(jobs):
                if i % 3 == 0:
                    items.append(SendEmail(to=f"user{i}@example.com"))
                elif i % 3 == 1:
                    items.append(ResizeImage(image_id=i, flaky=i % 20 == 1))
                else:
                    items.append(Digest(user_id=i))
            started = time.monotonic()
            client.insert_many(items)
            print(f"enqueued {jobs} jobs in {time.monotonic() - started:.2f}s", file=out)
            client.start()
            started = time.monotonic()
            counts: dict[tuple[str, str], int] = {}
            live = out.isatty()
            while not interrupted.wait(0.5):
                counts = store.operator.job_counts()
                line = f"[{time.monotonic() - started:5.1f}s] {_progress(counts)}"
                # On a terminal, redraw one line; in a log, append one per tick.
                print(f"\r{line:<100}" if live else line, end="" if live else "\n", file=out)
                out.flush()
                finished = sum(n for (_, s), n in counts.items() if s in TERMINAL)
                if finished >= jobs:
                    break
            elapsed = time.monotonic() - started
            if live:
                print(file=out)
            if interrupted.is_set():
                print("interrupted: draining running jobs", file=out)
            try:
                client.stop(config.shutdown_timeout)
            except drover.DrainIncomplete as exc:
                print(f"stopped with {exc.count} job(s) handed back to the queue", file=out)
            counts = store.operator.job_counts()
            print(f"done in {elapsed:.1f}s: {_progress(counts)}", file=out)
            for (queue, state), n in sorted(counts.items()):
                print(f"  {queue:<8} {state:<10} {n:>6}", file=out)
            return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
