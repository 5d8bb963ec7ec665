"""The completion statement before and after cancel requests (ADR 0030), side by side.

    python bench/cancel_completion.py                 # embedded PostgreSQL (fsync on)
    python bench/cancel_completion.py --database URL --rounds 40 --batch 50

ADR 0030 made ``job_complete_many`` (the completer's usual batch) end a job
with a ``cancel_request`` as ``cancelled``: two CASEs on a column of the row
it already updates, and a second branch in its answer. This runs the
statement as it was before (kept below, verbatim but for its comments) and
as it is now on the same table, alternating round by round, each round
claiming ``--batch`` fresh jobs and completing them in one statement, and
reports the median time of the completion statement per job for each and
their ratio. No job has a request: the hot path, not the cancel path.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, LiteralString

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import drover
from drover._db.claims import job_claim
from drover._db.queries import expand_job_columns, expand_state_sets, query

BEFORE: LiteralString = """
WITH done AS (
    UPDATE drover_jobs j
    SET state = 'completed',
        leased_until = NULL,
        finalized_at = now(),
        result = d.result::jsonb
    FROM unnest(%(ids)s::bigint[], %(attempts)s::integer[], %(results)s::text[])
        AS d(id, attempt, result)
    WHERE j.id = ANY (%(ids)s::bigint[])
      AND j.id = d.id AND j.attempt = d.attempt AND (j.state = 'running') IS TRUE
    RETURNING j.id, j.attempt, j.has_dependents,
        (CASE WHEN j.awaited THEN pg_notify('drover_done', j.id::text) END) IS NULL AS quiet
), released AS (
    SELECT drover_release_dependents(array_agg(id)) AS n
    FROM done
    WHERE has_dependents
    HAVING count(*) > 0
)
SELECT d.id, d.attempt
FROM unnest(%(ids)s::bigint[], %(attempts)s::integer[]) AS d(id, attempt)
WHERE (SELECT count(*) FROM released) >= 0
  AND NOT EXISTS (SELECT 1 FROM done WHERE done.id = d.id AND done.attempt = d.attempt);
"""


@contextlib.contextmanager
def _database(url: str | None) -> Iterator[str]:
    if url is not None:
        yield url
        return
    from drover._db.embedded import embedded_postgres

    with embedded_postgres(tune_for_tests=False) as embedded:
        yield embedded


def _complete(conn: psycopg.Connection[Any], sql: LiteralString, rows: list[Any]) -> float:
    params = {
        "ids": "{" + ",".join(str(r.id) for r in rows) + "}",
        "attempts": "{" + ",".join(str(r.attempt) for r in rows) + "}",
        "results": "{}",
    }
    started = time.perf_counter()
    with conn.cursor() as cur:
        cur.execute(sql, params)
        refused = cur.fetchall()
    took = time.perf_counter() - started
    assert refused == [], refused
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", help="PostgreSQL URL (default: embedded throwaway server)")
    parser.add_argument("--rounds", type=int, default=40, help="rounds per statement")
    parser.add_argument("--batch", type=int, default=50, help="jobs completed per statement")
    options = parser.parse_args()
    before = expand_job_columns(expand_state_sets(BEFORE, "bench"))
    after = query("job_complete_many")
    with _database(options.database) as url:
        drover.migrate(url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("TRUNCATE drover_jobs CASCADE")
            timings: dict[str, list[float]] = {"before": [], "after": []}
            for round_ in range(options.rounds * 2 + 4):
                conn.execute(
                    "INSERT INTO drover_jobs (kind, queue, args) "
                    "SELECT 'bench_noop', 'default', '{}' FROM generate_series(1, %s)",
                    (options.batch,),
                )
                rows = job_claim(conn, "default", options.batch, 60.0)
                which = "before" if round_ % 2 == 0 else "after"
                took = _complete(conn, before if which == "before" else after, rows)
                if round_ >= 4:  # the first rounds warm the plans and the cache
                    timings[which].append(took / len(rows) * 1e6)
    medians = {k: statistics.median(v) for k, v in timings.items()}
    print(f"{options.rounds} rounds each of {options.batch} jobs, alternating")
    for which, value in medians.items():
        print(f"{which:>6}: {value:7.2f} µs per job completed (median)")
    print(f" ratio: after / before = {medians['after'] / medians['before']:.3f}")


if __name__ == "__main__":
    main()
