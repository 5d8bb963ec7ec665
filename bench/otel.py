"""What OpenTelemetry tracing costs an insert, off and on, measured side by side in one run.

    python bench/otel.py                       # embedded PostgreSQL, commits not waiting for disk
    python bench/otel.py --flush               # fsync'd commits, as in production
    python bench/otel.py --jobs 2000 --batch 10000 --reps 5 --database URL

Each repetition starts from an empty table and runs the trials interleaved in
blocks of --block inserts (the order rotating from block to block), on one
client per trial (each its own pool) in one thread:

- ``bare``: the client's writer called directly on the prepared job: the
  insert without the insert middleware step of the funnel in front of it
  (ADR 0047; what every insert was before ADR 0042);
- ``off``: ``client.insert`` on a client without ``TracingMiddleware``;
- ``noop``: with ``TracingMiddleware`` and no OpenTelemetry SDK (no-op spans,
  nothing stored);
- ``sdk``: with ``TracingMiddleware`` on an SDK ``TracerProvider`` with no
  exporter (spans are made and dropped, the context is stored).

Then ``insert_many`` of --batch jobs once per trial and repetition (``off``,
``sdk``): a traced batch stores a context per job and so takes the staging
COPY rather than the direct one. Reported: medians over the repetitions, and
each trial's ratio to ``bare`` (inserts) or ``off`` (batches).

Last, without the database: the Python cost of one insert span (the
middleware's ``around_insert`` entered and exited around nothing, the
context stamped into one job) and of one execution span (around a handler
that does nothing), no-op and SDK, as the best of five timings (the figure
least disturbed by a busy machine).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
import timeit
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import psycopg
from opentelemetry.sdk.trace import TracerProvider
from psycopg.conninfo import make_conninfo

import drover
from drover._insert.encode import encode_insert
from drover._insert.funnel import prepare_one
from drover.contrib.otel import TracingMiddleware


class Ping(drover.JobArgs, kind="otelbench_ping"):
    n: int


@contextlib.contextmanager
def server(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    from drover._db.embedded import embedded_postgres

    with embedded_postgres(tune_for_tests=False) as embedded:
        yield embedded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000, help="single inserts per trial")
    parser.add_argument("--batch", type=int, default=10000, help="jobs per insert_many")
    parser.add_argument("--block", type=int, default=100)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--database", default=None, help="a PostgreSQL URL (default: embedded)")
    parser.add_argument("--flush", action="store_true", help="commits wait for the disk")
    options = parser.parse_args()
    with server(options.database) as server_url:
        # Without --flush the disk's latency, the same for every trial, does
        # not drown the Python cost this measures.
        url = (
            server_url
            if options.flush
            else make_conninfo(server_url, options="-c synchronous_commit=off")
        )
        drover.migrate(url)
        tracing = {
            "off": drover.Config(),
            "noop": drover.Config(middleware=[TracingMiddleware()]),
            "sdk": drover.Config(middleware=[TracingMiddleware(TracerProvider())]),
        }
        clients = {name: drover.Client(url, config) for name, config in tracing.items()}
        calls: dict[str, Callable[[int], object]] = {
            "bare": lambda n: clients["off"]._write(prepare_one(Ping(n=n), None, "insert")),
            **{name: (lambda n, c=client: c.insert(Ping(n=n))) for name, client in clients.items()},
        }
        rates: dict[str, list[float]] = {name: [] for name in calls}
        batches: dict[str, list[float]] = {"off": [], "sdk": []}
        ratios: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(options.reps):
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("TRUNCATE drover_jobs CASCADE")
            spent = dict.fromkeys(calls, 0.0)
            names = list(calls)
            for block, start in enumerate(range(0, options.jobs, options.block)):
                for name in names[block % len(names) :] + names[: block % len(names)]:
                    call = calls[name]
                    began = time.perf_counter()
                    for n in range(start, min(start + options.block, options.jobs)):
                        call(n)
                    spent[name] += time.perf_counter() - began
            for name in calls:
                rates[name].append(options.jobs / spent[name])
                ratios[name].append(spent["bare"] / spent[name])
            for name in batches:
                items = [Ping(n=n) for n in range(options.batch)]
                began = time.perf_counter()
                clients[name].insert_many(items)
                batches[name].append(time.perf_counter() - began)
        for client in clients.values():
            client.close()
    print(f"single inserts, {options.jobs} per trial, {options.reps} repetitions:")
    for name in calls:
        print(
            f"  {name:5} {statistics.median(rates[name]):8.0f}/s  "
            f"x{statistics.median(ratios[name]):.3f} of bare"
        )
    off = statistics.median(batches["off"])
    for name, times in batches.items():
        median = statistics.median(times)
        print(
            f"  insert_many {options.batch} {name:4} {median * 1000:7.1f} ms  x{median / off:.2f}"
        )


def spans() -> None:
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    now = datetime.now(UTC)
    row = drover.JobRow(
        id=1,
        kind="otelbench_ping",
        queue="default",
        args={"n": 1},
        state=drover.JobState.RUNNING,
        attempt=1,
        max_attempts=25,
        errors=(),
        scheduled_at=now,
        leased_until=None,
        created_at=now,
        finalized_at=None,
        unique_key=None,
        priority=0,
        meta={"traceparent": traceparent},
    )
    context = drover.JobContext()
    params = encode_insert(Ping(n=1), None)

    def handler(ctx: drover.JobContext, row: drover.JobRow) -> None:
        return None

    print("per span, best of 5 (no database):")
    for name, middleware in (
        ("noop", TracingMiddleware()),
        ("sdk", TracingMiddleware(TracerProvider())),
    ):

        def insert_span(m: TracingMiddleware = middleware) -> None:
            with m.around_insert(drover.InsertBatch("insert", [params])):
                pass

        traced = middleware(handler)
        n = 20000
        insert = min(timeit.repeat(insert_span, number=n, repeat=5)) / n
        execute = min(timeit.repeat(lambda h=traced: h(context, row), number=n, repeat=5)) / n
        print(f"  {name:4} insert {insert * 1e6:5.1f} us   execution {execute * 1e6:5.1f} us")


if __name__ == "__main__":
    main()
    spans()
