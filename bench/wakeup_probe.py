"""Enqueue→start latency with the worker and the producer in separate processes.

    python bench/wakeup_probe.py                       # 3 runs of 300 probes, embedded server
    python bench/wakeup_probe.py --runs 5 --no-flush
    python bench/wakeup_probe.py --close               # the producer closes its client first
    python bench/wakeup_probe.py --database URL --trace

The setup of the missed wake-up report ("one job per run waits about 955 ms"):

- an embedded PostgreSQL reached over its Unix socket (``--no-flush`` turns
  fsync, synchronous_commit and full_page_writes off, as ``bench/compare.py
  --no-flush`` does);
- per run: ``TRUNCATE drover_jobs``, then a worker process starts
  ``Client(url, Config(concurrency=10))`` and idles 2 s;
- then a producer process opens its own ``ConnectionPool(min_size=10,
  max_size=10)`` (psycopg's default: not autocommit), builds ``Client(pool)``,
  inserts one job every 50 ms (``--interval``) and ends as soon as its last
  insert returns, as a producer script does: neither ``client.close()`` nor
  ``pool.close()`` (``--close`` closes the client, then the pool).

Each job carries ``time.monotonic()`` taken just before its ``insert`` call;
the handler takes it again first thing. On Linux both read CLOCK_MONOTONIC, one
clock for every process, so the difference is the enqueue→start latency.
Reported per run and over all runs: p50 / p95 / p99 / max, which probe was the
slowest, and how many probes waited over 50 ms.

``--trace`` also records, in both processes, what each thread did when (the
listener's notifications and pings, the fetcher's wake-ups, waits and claims,
the notifier's rounds, each insert call) and prints the merged timeline of the
slow probes. The tracing wraps drover's functions from here; the library is
not changed. The producer writes everything it records as it goes, so its
process still ends right after its last insert.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import psycopg

import drover

SLOW_MS = 50.0
IDLE_BEFORE_PRODUCER = 2.0


class Probe(drover.JobArgs, kind="wakeup_probe"):
    i: int
    sent: float


# --- recording (both children) --------------------------------------------------------------

_lock = threading.Lock()
_out: IO[str] | None = None  # JSON lines: ["sent"|"returned"|"started", i, t] or ["event", ...]


def _record(*item: object) -> None:
    assert _out is not None
    line = json.dumps(item) + "\n"
    with _lock:
        _out.write(line)
        _out.flush()


def _note(what: str) -> None:
    _record("event", time.monotonic(), threading.current_thread().name, what)


def _wrap(owner: Any, name: str, describe: Callable[..., str]) -> None:
    original = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _note(f"{name} begin")
        try:
            result = original(*args, **kwargs)
        except BaseException as exc:
            _note(f"{name} raised {exc!r}")
            raise
        _note(f"{name} end {describe(result, *args)}")
        return result

    setattr(owner, name, wrapper)


def _trace_worker() -> None:
    from drover._db import held, notify
    from drover._kernel import claims as inflight
    from drover._kernel import fetcher

    _wrap(notify.Listening, "wait", lambda r, *a: f"payloads={r}")
    _wrap(notify.Listening, "ping", lambda r, *a: "")
    _wrap(notify.Listening, "__init__", lambda r, *a: "")
    _wrap(held.HeldSession, "claim", lambda r, *a: f"ids={[row.id for row in r.rows]}")

    class TracedEvent(threading.Event):
        def set(self) -> None:
            _note("wakeup.set")
            super().set()

        def wait(self, timeout: float | None = None) -> bool:
            _note(f"wakeup.wait({timeout}) begin, set={self.is_set()}")
            got = super().wait(timeout)
            _note(f"wakeup.wait end -> {got}")
            return got

        def clear(self) -> None:
            _note(f"wakeup.clear (set={self.is_set()})")
            super().clear()

    init = fetcher.Fetcher.__init__

    def traced_init(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self._wakeup = TracedEvent()

    fetcher.Fetcher.__init__ = traced_init  # type: ignore[method-assign]
    take_all = inflight.Slots.take_all

    def traced_take_all(self: Any, *args: Any, **kwargs: Any) -> int:
        taken = take_all(self, *args, **kwargs)
        _note(f"slots.take_all -> {taken}")
        return taken

    inflight.Slots.take_all = traced_take_all  # type: ignore[method-assign]


def _trace_producer() -> None:
    from drover._db import store
    from drover._runtime import notifier

    _wrap(store, "notify_queues_now", lambda r, *a: f"queues={a[1]}")
    _wrap(notifier.Notifier, "_send", lambda r, *a: "")


# --- the two children -----------------------------------------------------------------------


def _worker(url: str, jobs: int, trace: bool) -> None:
    if trace:
        _trace_worker()
    count = 0
    done = threading.Event()
    workers = drover.Workers()

    @workers.register
    def probe(job: drover.Job[Probe]) -> None:
        nonlocal count
        _record("started", job.args.i, time.monotonic())
        with _lock:
            count += 1
            if count >= jobs:
                done.set()

    client = drover.Client(url, drover.Config(workers=workers, concurrency=10))
    client.start()
    print("started", flush=True)
    try:
        if not done.wait(120 + jobs * 0.2):
            print(f"only {count} of {jobs} probes started", file=sys.stderr)
    finally:
        client.stop(10)


def _producer(url: str, jobs: int, interval: float, trace: bool, close: bool) -> None:
    if trace:
        _trace_producer()
    from psycopg_pool import ConnectionPool

    pool: ConnectionPool[Any] = ConnectionPool(url, min_size=10, max_size=10, open=True)
    client = drover.Client(pool)
    begin = time.monotonic()
    for i in range(jobs):
        delay = begin + i * interval - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        at = time.monotonic()
        _record("sent", i, at)
        row = client.insert(Probe(i=i, sent=at))
        _record("returned", i, time.monotonic())
        if trace:
            _note(f"inserted probe {i} (job {row.id}) in {(time.monotonic() - at) * 1000:.2f} ms")
    if close:
        client.close()
        pool.close()
    # Otherwise the process ends here, right after its last insert.


# --- the parent -----------------------------------------------------------------------------


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def describe(values: list[float]) -> str:
    slow = sum(1 for v in values if v > SLOW_MS)
    return (
        f"p50 {pct(values, 50):6.2f}  p95 {pct(values, 95):6.2f}  p99 {pct(values, 99):6.2f}  "
        f"max {max(values):7.2f} ms  over {SLOW_MS:g} ms: {slow}"
    )


@contextlib.contextmanager
def database(url: str | None, no_flush: bool) -> Iterator[str]:
    if url:
        yield url
        return
    from drover._db.embedded import embedded_postgres

    with embedded_postgres(tune_for_tests=no_flush) as embedded:
        yield embedded


def _read(path: Path) -> tuple[dict[str, dict[int, float]], list[tuple[float, str, str]]]:
    times: dict[str, dict[int, float]] = {"sent": {}, "returned": {}, "started": {}}
    events: list[tuple[float, str, str]] = []
    for line in path.read_text().splitlines():
        kind, *rest = json.loads(line)
        if kind == "event":
            events.append((rest[0], rest[1], rest[2]))
        else:
            times[kind][rest[0]] = rest[1]
    return times, events


def one_run(url: str, args: argparse.Namespace, tmp: Path, run: int) -> list[float]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE drover_jobs")
    worker_out, producer_out = tmp / f"worker-{run}.jsonl", tmp / f"producer-{run}.jsonl"
    common = [sys.executable, __file__, "--url", url, "--jobs", str(args.jobs)]
    common += ["--trace"] if args.trace else []
    worker = subprocess.Popen(
        [*common, "--child", "worker", "--out", str(worker_out)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert worker.stdout is not None
        line = worker.stdout.readline()
        if line.strip() != "started":
            raise SystemExit(f"worker did not start: {line!r}")
        time.sleep(IDLE_BEFORE_PRODUCER)
        producer = [*common, "--child", "producer", "--out", str(producer_out)]
        producer += ["--interval", str(args.interval)] + (["--close"] if args.close else [])
        subprocess.run(producer, check=True)
        worker.wait(timeout=120 + args.jobs * 0.2)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    w, worker_events = _read(worker_out)
    p, producer_events = _read(producer_out)
    sent, started = p["sent"], w["started"]
    latencies = {i: (started[i] - sent[i]) * 1000 for i in sent if i in started}
    if len(latencies) != args.jobs:
        raise SystemExit(f"run {run + 1}: {len(latencies)} of {args.jobs} probes measured")
    insert_ms = max((p["returned"][i] - sent[i]) * 1000 for i in p["returned"])
    values = list(latencies.values())
    worst = max(latencies, key=lambda i: latencies[i])
    print(
        f"run {run + 1}: {describe(values)}  slowest: probe {worst} of 0..{args.jobs - 1}; "
        f"longest insert call {insert_ms:.1f} ms"
    )
    if args.trace:
        events = [(t, "worker", th, what) for t, th, what in worker_events]
        events += [(t, "producer", th, what) for t, th, what in producer_events]
        events.sort()
        slow = sorted(i for i in latencies if latencies[i] > SLOW_MS)
        for i in (slow or [worst])[: args.timelines]:
            lo, hi = sent[i] - 0.06, started[i] + 0.005
            print(f"  timeline of probe {i}, {latencies[i]:.1f} ms (ms from its send):")
            for t, proc, th, what in events:
                if lo <= t <= hi:
                    print(f"  {(t - sent[i]) * 1000:9.2f}  {proc:8} {th:28} {what}")
    return values


def main(argv: list[str] | None = None) -> None:
    global _out
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--database", help="PostgreSQL URL (default: embedded throwaway server)")
    parser.add_argument(
        "--no-flush",
        action="store_true",
        help="fsync, synchronous_commit, full_page_writes off on the embedded server",
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=300, help="probes per run")
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between inserts")
    parser.add_argument(
        "--close", action="store_true", help="the producer closes its client, then its pool"
    )
    parser.add_argument(
        "--trace", action="store_true", help="print the timelines of the slow probes of each run"
    )
    parser.add_argument(
        "--timelines", type=int, default=3, help="with --trace: at most this many per run"
    )
    parser.add_argument("--child", choices=("worker", "producer"), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _out = open(args.out, "a", encoding="utf-8")  # noqa: SIM115 - open until the process ends
        if args.child == "worker":
            _worker(args.url, args.jobs, args.trace)
        else:
            _producer(args.url, args.jobs, args.interval, args.trace, args.close)
        return
    with database(args.database, args.no_flush) as url, tempfile.TemporaryDirectory() as tmp:
        drover.migrate(url)
        with psycopg.connect(url, autocommit=True) as conn:
            settings = [
                f"{name}={conn.execute(f'SHOW {name}'.encode()).fetchone()[0]}"  # type: ignore[index]
                for name in ("fsync", "synchronous_commit", "full_page_writes")
            ]
        print(
            f"{args.runs} runs x {args.jobs} probes, one per {args.interval * 1000:g} ms; "
            f"producer {'closes its client' if args.close else 'ends after its last insert'}; "
            f"server {', '.join(settings)}; drover {drover.__version__}"
        )
        every: list[float] = []
        for run in range(args.runs):
            every += one_run(url, args, Path(tmp), run)
        print(f"all {len(every)}: {describe(every)}")


if __name__ == "__main__":
    main()
