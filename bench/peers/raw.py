"""The raw-SQL reference: a minimal queue written directly on psycopg 3.

It uses drover's own table (``drover_jobs``, with all its indexes), so the
comparison with drover isolates what drover's client code costs. No
bookkeeping, no leases renewed, no retries, no logging, no metrics: the
practical limit of PostgreSQL and psycopg for the same rows on this machine.

- bulk enqueue: one ``COPY`` per batch, one transaction per batch, from the
  same prebuilt pydantic models drover gets, each ``model_dump_json()``-ed;
- single-row enqueue: one ``INSERT ... RETURNING id`` per job, autocommit, one
  connection per thread;
- drain: one driver thread on one connection loops on a single statement that
  completes every job the handler threads have finished since its last round
  trip and, in the same statement and transaction, claims (``FOR UPDATE SKIP
  LOCKED``) as many jobs as there is room for: ``concurrency`` running plus
  ``concurrency`` waiting in a local queue, so that a handler thread that
  finishes finds its next job in hand. ``concurrency`` threads take jobs from
  that queue and run them: one thread hand-off per job each way (a
  ``SimpleQueue``), one round trip and one commit per batch. ``raw-inline``
  (``raw_inline.py``) is the same statement without the threads; ``drain_shared``
  and ``latency_load`` keep the two-connection design of ``raw_slots.py``;
- latency: one worker thread LISTENs, claims on each notification (or after a
  1 s poll) and runs the job inline; the producer's INSERT carries ``pg_notify``.
"""

from __future__ import annotations

import json
import queue
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import psycopg
from pydantic import BaseModel

import peers
from peers import Latencies, run_threads, scalar_pair, truncate_and_vacuum, wait_for

REQUIRES = None
TABLES = ["drover_jobs", "drover_queues"]
KIND = "bench_noop"

# The reference has no priorities: every job it inserts has the default 0, and
# `priority = 0` lets the claim walk the fetch index (queue, priority,
# scheduled_at, id) in order, as drover's did before priorities.
# The picked ids go to the UPDATE as an array rather than a joined CTE: once
# psycopg prepares the statement, PostgreSQL's generic plan for the join form
# can pick a sequential scan of the whole table per claim (see sql/queries/
# kernel.sql, job_claim). The reference uses the same robust form as drover.
CLAIM = """
UPDATE drover_jobs j SET state = 'running', attempt = j.attempt + 1,
       leased_until = now() + interval '60 seconds'
WHERE j.id = ANY (ARRAY(
    SELECT id FROM drover_jobs
    WHERE state IN ('available', 'retryable', 'scheduled') AND queue = 'default'
      AND priority = 0 AND scheduled_at <= now()
    ORDER BY scheduled_at, id LIMIT %s FOR UPDATE SKIP LOCKED
))
RETURNING j.id, j.attempt, j.args::text
"""
# The same plan-proof form as drover's job_complete_many (ADR 0008, amended):
# rows by primary key, and a state test the partial lease index cannot match.
# With `j.state = 'running'` the planner may walk that index, whose dead
# entries grow with every completion; at concurrency 50 that dropped this
# reference to a few hundred jobs/s in some repetitions.
COMPLETE = """
UPDATE drover_jobs j SET state = 'completed', finalized_at = now(), leased_until = NULL
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[]) AS d(id, attempt)
WHERE j.id = ANY (%(ids)s::bigint[])
  AND j.id = d.id AND j.attempt = d.attempt AND (j.state = 'running') IS TRUE
"""
# One round trip and one commit per batch: the completion of every job finished
# since the last round trip (a data-modifying CTE runs whether or not it is
# read) and the next claim. The claim cannot pick the rows being completed:
# they are 'running'. The completion is fenced by the claimer's token in
# `leased_by` (as graphile-worker fences by `locked_by`), a scalar test per row,
# rather than by (id, attempt) pairs: the join with `unnest` of the pairs is
# rescanned for every row it updates, quadratic in the batch (100 rows at c50).
COMPLETE_AND_CLAIM = """
WITH done AS (
    UPDATE drover_jobs j SET state = 'completed', finalized_at = now(), leased_until = NULL
    WHERE j.id = ANY (%(ids)s::bigint[])
      AND (j.state = 'running') IS TRUE AND j.leased_by = %(token)s
)
UPDATE drover_jobs j SET state = 'running', attempt = j.attempt + 1,
       leased_until = now() + interval '60 seconds', leased_by = %(token)s
WHERE j.id = ANY (ARRAY(
    SELECT id FROM drover_jobs
    WHERE state IN ('available', 'retryable', 'scheduled') AND queue = 'default'
      AND priority = 0 AND scheduled_at <= now()
    ORDER BY scheduled_at, id LIMIT %(want)s FOR UPDATE SKIP LOCKED
))
RETURNING j.id, j.attempt, j.args::text
"""
INSERT = "INSERT INTO drover_jobs (kind, args) VALUES (%s, %s::jsonb) RETURNING id"
INSERT_NOTIFY = (
    "INSERT INTO drover_jobs (kind, args) VALUES (%s, %s::jsonb) "
    "RETURNING id, pg_notify('drover', queue)"
)


Row = tuple[int, int, str]
# This process's claims: the completion's fence.
TOKEN = f"raw-{uuid.uuid4()}"


def _complete(conn: psycopg.Connection[tuple[object, ...]], done: list[tuple[int, int]]) -> None:
    conn.execute(COMPLETE, {"ids": [d[0] for d in done], "attempts": [d[1] for d in done]})


def complete_and_claim(
    conn: psycopg.Connection[tuple[object, ...]], done: list[tuple[int, int]], want: int
) -> list[Row]:
    """Complete ``done`` and claim up to ``want`` jobs, in one statement."""
    cur = conn.execute(
        COMPLETE_AND_CLAIM, {"ids": [d[0] for d in done], "want": want, "token": TOKEN}
    )
    rows: list[Row] = cur.fetchall()  # type: ignore[assignment]
    return rows


def setup(url: str) -> None:
    import drover

    drover.migrate(url)


def reset(url: str) -> None:
    truncate_and_vacuum(url, TABLES)


def count(url: str) -> tuple[int, int]:
    return scalar_pair(
        url, "SELECT count(*), count(*) FILTER (WHERE state = 'completed') FROM drover_jobs"
    )


def _copy(conn: psycopg.Connection[tuple[object, ...]], numbers: range) -> None:
    with (
        conn.transaction(),
        conn.cursor() as cur,
        cur.copy("COPY drover_jobs (kind, args) FROM STDIN") as copy,
    ):
        for i in numbers:
            copy.write_row((KIND, json.dumps({"n": i})))


def fill(url: str, n: int) -> None:
    with psycopg.connect(url) as conn:
        for start in range(0, n, 10_000):
            _copy(conn, range(start, min(n, start + 10_000)))


class NoopArgs(BaseModel):
    """The same pydantic model every system's bulk trial starts from."""

    n: int


def enqueue_bulk(url: str, n: int, batch: int) -> float:
    # The models are built before the clock starts, as for drover; serialising
    # them (model_dump_json) is part of the work measured, as it is for drover.
    models = [NoopArgs(n=i) for i in range(n)]
    with psycopg.connect(url) as conn:
        started = time.perf_counter()
        for start in range(0, n, batch):
            with (
                conn.transaction(),
                conn.cursor() as cur,
                cur.copy("COPY drover_jobs (kind, args) FROM STDIN") as copy,
            ):
                for model in models[start : start + batch]:
                    copy.write_row((KIND, model.model_dump_json()))
        return time.perf_counter() - started


def enqueue_single(url: str, n: int, threads: int) -> float:
    def connect() -> object:
        return psycopg.connect(url, autocommit=True)

    def work(conn: object, numbers: range) -> None:
        assert isinstance(conn, psycopg.Connection)
        with conn:
            for i in numbers:
                conn.execute(INSERT, (KIND, json.dumps({"n": i}))).fetchone()

    return run_threads(n, threads, connect, work)


def _noop(args: str) -> None:
    json.loads(args)


def drain(url: str, n: int, concurrency: int) -> float:
    work: queue.SimpleQueue[Row | None] = queue.SimpleQueue()
    finished: queue.SimpleQueue[tuple[int, int]] = queue.SimpleQueue()

    def handler() -> None:
        while (job := work.get()) is not None:
            job_id, attempt, args = job
            _noop(args)
            peers.work()
            finished.put((job_id, attempt))

    def take(block: bool) -> list[tuple[int, int]]:
        done = [finished.get()] if block else []
        while True:
            try:
                done.append(finished.get_nowait())
            except queue.Empty:
                return done

    # At most `concurrency` jobs running and as many again claimed and waiting.
    room = 2 * concurrency
    threads = [threading.Thread(target=handler) for _ in range(concurrency)]
    with psycopg.connect(url, autocommit=True) as conn:
        for t in threads:
            t.start()
        started = time.perf_counter()
        held = claimed = completed = 0
        while completed < n:
            done = take(block=False)
            want = min(room - held + len(done), n - claimed)
            if not done and want == 0:
                done = take(block=True)
                want = min(room - held + len(done), n - claimed)
            rows = complete_and_claim(conn, done, want)
            for row in rows:
                work.put(row)
            held += len(rows) - len(done)
            claimed += len(rows)
            completed += len(done)
            if not rows and held == 0 and claimed < n:
                break  # nothing left to claim: another worker took it
        elapsed = time.perf_counter() - started
        for _ in threads:
            work.put(None)
        for t in threads:
            t.join()
        return elapsed


def latency(url: str, n: int, rate: float) -> list[float]:
    recorder = Latencies(n)
    stop = threading.Event()
    listening = threading.Event()

    def worker() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("LISTEN drover")
            listening.set()
            while not stop.is_set():
                rows = conn.execute(CLAIM, (10,)).fetchall()
                for _, _, args in rows:
                    job = json.loads(args)
                    recorder.record(job["i"], job["sent"])
                if rows:
                    _complete(conn, [(r[0], r[1]) for r in rows])
                    continue
                for _ in conn.notifies(timeout=1.0, stop_after=1):
                    pass

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    wait_for(listening, "raw worker LISTEN")
    try:
        with psycopg.connect(url, autocommit=True) as producer:

            def send(i: int, sent: float) -> None:
                args = json.dumps({"i": i, "sent": sent})
                producer.execute(INSERT_NOTIFY, (KIND, args)).fetchone()

            return recorder.drive(rate, send)
    finally:
        stop.set()
        thread.join(5)


WORK_LEFT = (
    "SELECT EXISTS (SELECT 1 FROM drover_jobs "
    "WHERE state IN ('available', 'retryable', 'scheduled', 'running'))"
)


def drain_shared(url: str, concurrency: int) -> tuple[float, float]:
    """One of several processes draining one table; returns its (start, end) wall times.

    Claims until a claim comes back empty, writes every completion it holds,
    then waits until no job waits or runs anywhere (the other processes'
    last completions), polling every 20 ms, the same stop rule as drover's.
    """
    finished: queue.SimpleQueue[tuple[int, int] | None] = queue.SimpleQueue()
    slots = threading.Condition()
    free = concurrency

    def execute(job_id: int, attempt: int, args: str) -> None:
        nonlocal free
        _noop(args)
        finished.put((job_id, attempt))
        with slots:
            free += 1
            slots.notify()

    def complete(conn: psycopg.Connection[tuple[object, ...]]) -> None:
        while True:
            item = finished.get()
            done = [] if item is None else [item]
            stop = item is None
            while True:
                try:
                    more = finished.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                else:
                    done.append(more)
            if done:
                _complete(conn, done)
            if stop:
                return

    with (
        psycopg.connect(url, autocommit=True) as fetch_conn,
        psycopg.connect(url, autocommit=True) as complete_conn,
        ThreadPoolExecutor(concurrency) as pool,
    ):
        completer = threading.Thread(target=complete, args=(complete_conn,))
        started = time.time()
        completer.start()
        while True:
            with slots:
                while free == 0:
                    slots.wait()
                want = free
            rows = fetch_conn.execute(CLAIM, (want,)).fetchall()
            if not rows:
                break
            with slots:
                free -= len(rows)
            for job_id, attempt, args in rows:
                pool.submit(execute, job_id, attempt, args)
        pool.shutdown(wait=True)
        finished.put(None)
        completer.join()
        while fetch_conn.execute(WORK_LEFT).fetchone() == (True,):
            time.sleep(0.02)
        return started, time.time()


CLAIM_QUEUE = CLAIM.replace("queue = 'default'", "queue = %s")
INSERT_PROBE = (
    "INSERT INTO drover_jobs (kind, queue, args) VALUES (%s, 'probe', %s::jsonb) "
    "RETURNING id, pg_notify('drover', 'probe')"
)
BACKLOG_LEFT = "SELECT count(*) FROM drover_jobs WHERE queue = 'default' AND state = 'available'"


def latency_load(url: str, n: int, rate: float, concurrency: int) -> tuple[list[float], int]:
    """Enqueue→start of probe jobs while a pool of ``concurrency`` drains the filled backlog.

    The probes go to queue ``probe``, which every claim round tries first; the
    backlog is queue ``default``. Returns the latencies and how many backlog
    jobs were still waiting when the last probe had started (0 means the load
    ran out before the measurement ended).
    """
    recorder = Latencies(n)
    finished: queue.SimpleQueue[tuple[int, int] | None] = queue.SimpleQueue()
    slots = threading.Condition()
    free = concurrency
    stop = threading.Event()

    def execute(job_id: int, attempt: int, args: str) -> None:
        nonlocal free
        job = json.loads(args)
        if "sent" in job:
            recorder.record(job["i"], job["sent"])
        finished.put((job_id, attempt))
        with slots:
            free += 1
            slots.notify()

    def complete(conn: psycopg.Connection[tuple[object, ...]]) -> None:
        while True:
            item = finished.get()
            done = [] if item is None else [item]
            end = item is None
            while True:
                try:
                    more = finished.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    end = True
                else:
                    done.append(more)
            if done:
                _complete(conn, done)
            if end:
                return

    def fetch(conn: psycopg.Connection[tuple[object, ...]], pool: ThreadPoolExecutor) -> None:
        nonlocal free
        while not stop.is_set():
            with slots:
                while free == 0 and not stop.is_set():
                    slots.wait(0.1)
                want = free
            if want == 0:
                continue
            rows = conn.execute(CLAIM_QUEUE, ("probe", want)).fetchall()
            if len(rows) < want:
                rows += conn.execute(CLAIM_QUEUE, ("default", want - len(rows))).fetchall()
            if not rows:
                time.sleep(0.001)
                continue
            with slots:
                free -= len(rows)
            for job_id, attempt, args in rows:
                pool.submit(execute, job_id, attempt, args)

    with (
        psycopg.connect(url, autocommit=True) as fetch_conn,
        psycopg.connect(url, autocommit=True) as complete_conn,
        psycopg.connect(url, autocommit=True) as producer,
        ThreadPoolExecutor(concurrency) as pool,
    ):
        completer = threading.Thread(target=complete, args=(complete_conn,))
        fetcher = threading.Thread(target=fetch, args=(fetch_conn, pool))
        completer.start()
        fetcher.start()
        try:

            def send(i: int, sent: float) -> None:
                args = json.dumps({"i": i, "sent": sent})
                producer.execute(INSERT_PROBE, (KIND, args)).fetchone()

            values = recorder.drive(rate, send)
            left = producer.execute(BACKLOG_LEFT).fetchone()
        finally:
            stop.set()
            fetcher.join()
            pool.shutdown(wait=True)
            finished.put(None)
            completer.join()
        return values, int(left[0]) if left else 0
