"""What one claim statement costs with limits declared, next to the plain claim.

    python bench/partition_claim.py                 # embedded PostgreSQL, 5 reps
    python bench/partition_claim.py --quick         # a smoke run
    python bench/partition_claim.py --database URL --claims 400 --batch 50 --json out.json

Each scenario has a scratch database of its own on one server, filled with
the same --jobs no-op jobs (kind ``bench_noop``, args ``{"p": i % 1000}``)
and differing only in the limits declared:

- ``plain``: no limit, the plain claim (``job_claim``);
- ``other-kind``: a concurrency limit on a kind the queue does not hold (every
  claim takes the limited path, no limit applies to a candidate);
- ``kind-conc``: ``concurrency=1,000,000`` on the kind (applies, never binds);
- ``kind-rate``: ``rate=1,000,000`` per second on the kind;
- ``queue-conc``: ``concurrency=1,000,000`` on the queue;
- ``partitions``: ``concurrency=1, partition_by="p"`` on the kind: 1,000 keys,
  each claim of --batch jobs meets --batch distinct ones.

With ``--baseline 0008`` every limited scenario also runs, interleaved, on a
database whose ``drover_claim_limited`` is migration 0008's (before 0012 made
it cheaper), shown as ``<scenario>@0008``.

The limited scenarios call the limited claim directly (``expect_limits``, as
a client does once it has seen limits). Every repetition refills every
database, then runs --claims rounds; each round claims --batch jobs in every
scenario, in an order rotated every round, and completes them (untimed) so
that the running rows stay those of one batch, as in a drain. Timed per claim:
the round trip from Python (``wall``), and the server's own execution time
from ``EXPLAIN (ANALYZE, FORMAT JSON)`` of the same statement on every
--explain-every'th round (``server``). Reported: per scenario the median per
claim, and the ratio to ``plain`` per repetition and its median. See
docs/benchmarks.md, "Flow control".
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

import drover
from drover._db.claims import job_claim_limited
from drover._db.floors import level_params
from drover._db.limits import limit_declare
from drover._db.queries import query
from drover.limits import Limit, LimitKey

LEASE = 60.0
MIGRATIONS = Path(__file__).resolve().parents[1] / "sql" / "migrations"
KIND = "bench_noop"
SCENARIOS: dict[str, list[tuple[LimitKey, Limit]]] = {
    "plain": [],
    "other-kind": [(LimitKey("kind", "bench_other"), Limit(concurrency=5))],
    "kind-conc": [(LimitKey("kind", KIND), Limit(concurrency=1_000_000))],
    "kind-rate": [(LimitKey("kind", KIND), Limit(rate=1_000_000))],
    "queue-conc": [(LimitKey("queue", "default"), Limit(concurrency=1_000_000))],
    "partitions": [
        (LimitKey("kind", KIND, "p"), Limit(concurrency=1, partition_by="p")),
    ],
}


def baseline_function(number: str) -> str:
    """``drover_claim_limited`` as migration ``number`` (e.g. 0008) created it."""
    (path,) = MIGRATIONS.glob(f"{number}_*.sql")
    text = path.read_text()
    start = text.index("CREATE FUNCTION drover_claim_limited(")
    return "CREATE OR REPLACE " + text[start:].removeprefix("CREATE ")


@contextlib.contextmanager
def pg_server(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    from drover._db.embedded import embedded_postgres

    with embedded_postgres(tune_for_tests=False) as embedded:
        yield embedded


@contextlib.contextmanager
def scratch(server_url: str, tag: str) -> Iterator[str]:
    name = f"drover_claimbench_{os.getpid()}_{tag.replace('-', '_')}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(server_url, dbname=name)
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def fill(url: str, n: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE drover_jobs, drover_limit_starts CASCADE")
        with conn.cursor() as cur, cur.copy("COPY drover_jobs (kind, args) FROM STDIN") as copy:
            for i in range(n):
                copy.write_row((KIND, json.dumps({"p": i % 1000})))
        conn.execute("VACUUM ANALYZE drover_jobs")
        conn.execute("VACUUM ANALYZE drover_limit_starts")


def complete(conn: psycopg.Connection[Any], ids: list[int]) -> None:
    conn.execute(
        "UPDATE drover_jobs SET state = 'completed', leased_until = NULL, finalized_at = now() "
        "WHERE id = ANY (%s)",
        (ids,),
    )


def explain_ms(conn: psycopg.Connection[Any], limited: bool, batch: int) -> tuple[float, int]:
    """Server execution time of one claim, and the ids it claimed (then completed)."""
    params = {
        "queue": "default",
        "limit": batch,
        "lease_seconds": LEASE,
        "holder": None,
        # job_claim carries completions (none here); the limited claim ignores these.
        "done_ids": "{}",
        "done_attempts": "{}",
        **level_params(None),
    }
    text = query("job_claim_limited" if limited else "job_claim")
    with psycopg.ClientCursor(conn) as cur:
        cur.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {text}", params)
        row = cur.fetchone()
    assert row is not None
    plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
    ids = [
        int(r[0])
        for r in conn.execute(
            "SELECT id FROM drover_jobs WHERE state = 'running' ORDER BY id"
        ).fetchall()
    ]
    complete(conn, ids)
    return float(plan[0]["Execution Time"]), len(ids)


def one_rep(
    conns: dict[str, psycopg.Connection[Any]], claims: int, batch: int, explain_every: int
) -> dict[str, dict[str, list[float]]]:
    names = list(conns)
    out: dict[str, dict[str, list[float]]] = {n: {"wall": [], "server": []} for n in names}
    for i in range(claims):
        order = names[i % len(names) :] + names[: i % len(names)]
        for name in order:
            conn = conns[name]
            limited = not name.startswith("plain")
            if explain_every and i % explain_every == explain_every - 1:
                ms, got = explain_ms(conn, limited, batch)
                if got != batch:
                    raise SystemExit(f"{name}: EXPLAIN claim took {got} of {batch}")
                out[name]["server"].append(ms)
                continue
            started = time.perf_counter()
            rows, _, through = job_claim_limited(
                conn, "default", batch, LEASE, expect_limits=limited
            )
            out[name]["wall"].append((time.perf_counter() - started) * 1000)
            if len(rows) != batch or through != limited:
                raise SystemExit(f"{name}: claimed {len(rows)} of {batch} (limited {through})")
            complete(conn, [r.id for r in rows])
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--database", help="PostgreSQL URL (default: embedded throwaway server)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="a smoke run: few jobs and claims")
    parser.add_argument("--jobs", type=int, default=30_000, help="jobs filled per scenario")
    parser.add_argument("--claims", type=int, default=300, help="claims per scenario per rep")
    parser.add_argument("--batch", type=int, default=50, help="jobs per claim")
    parser.add_argument("--explain-every", type=int, default=5, help="0: no EXPLAIN rounds")
    parser.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help="comma-separated; plain is always run"
    )
    parser.add_argument(
        "--baseline",
        metavar="NNNN",
        help="also run each limited scenario with the claim function of that migration",
    )
    parser.add_argument("--json", help="also write every number to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs, args.claims = min(args.jobs, 2_000), min(args.claims, 20)
    if args.jobs < args.claims * args.batch:
        raise SystemExit(f"--jobs {args.jobs} < --claims x --batch: the queue would run dry")
    wanted = ["plain"] + [s for s in args.scenarios.split(",") if s and s != "plain"]
    unknown = [s for s in wanted if s not in SCENARIOS]
    if unknown:
        raise SystemExit(f"unknown scenario(s) {unknown}; choose from {list(SCENARIOS)}")
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    baseline = baseline_function(args.baseline) if args.baseline else None
    databases = list(wanted)
    if baseline:
        databases += [f"{s}@{args.baseline}" for s in wanted if s != "plain"]

    reps: list[dict[str, dict[str, list[float]]]] = []
    with pg_server(args.database) as url, contextlib.ExitStack() as stack:
        urls = {
            name: stack.enter_context(scratch(url, name.replace("@", "_at_"))) for name in databases
        }
        conns: dict[str, psycopg.Connection[Any]] = {}
        for name, db in urls.items():
            drover.migrate(db)
            conn = stack.enter_context(psycopg.connect(db, autocommit=True))
            if "@" in name and baseline:
                conn.execute(baseline.encode())
            limit_declare(conn, SCENARIOS[name.partition("@")[0]])
            conns[name] = conn
        print(
            f"jobs {args.jobs} per scenario, {args.claims} claims of {args.batch} per rep, "
            f"reps {args.reps}, EXPLAIN every {args.explain_every or 'never'}"
        )
        for rep in range(args.reps):
            for db in urls.values():
                fill(db, args.jobs)
            result = one_rep(conns, args.claims, args.batch, args.explain_every)
            reps.append(result)
            base = statistics.median(result["plain"]["wall"])
            shown = "  ".join(
                f"{n} {statistics.median(v['wall']) / base:.2f}x" for n, v in result.items()
            )
            print(f"rep {rep + 1}: plain {base:.3f} ms/claim  {shown}")

    summary: dict[str, dict[str, Any]] = {}
    for name in databases:
        walls = [statistics.median(r[name]["wall"]) for r in reps]
        ratios = [
            statistics.median(r[name]["wall"]) / statistics.median(r["plain"]["wall"]) for r in reps
        ]
        servers = [statistics.median(r[name]["server"]) for r in reps if r[name]["server"]]
        server_ratios = [
            statistics.median(r[name]["server"]) / statistics.median(r["plain"]["server"])
            for r in reps
            if r[name]["server"] and r["plain"]["server"]
        ]
        summary[name] = {
            "wall_ms": statistics.median(walls),
            "wall_ratio": statistics.median(ratios),
            "wall_ratios": ratios,
            "server_ms": statistics.median(servers) if servers else None,
            "server_ratio": statistics.median(server_ratios) if server_ratios else None,
            "server_ratios": server_ratios,
        }
    print(f"\nmedian of {args.reps} reps · claim of {args.batch} jobs\n")
    print("| scenario | wall ms/claim | x plain [per rep] | server ms/claim | x plain [per rep] |")
    print("|---|---|---|---|---|")
    for name, s in summary.items():
        wr = s["wall_ratios"]
        sr = s["server_ratios"]
        server = "—" if s["server_ms"] is None else f"{s['server_ms']:.3f}"
        sratio = (
            "—"
            if s["server_ratio"] is None
            else f"{s['server_ratio']:.2f} [{min(sr):.2f}-{max(sr):.2f}]"
        )
        print(
            f"| {name} | {s['wall_ms']:.3f} | {s['wall_ratio']:.2f} "
            f"[{min(wr):.2f}-{max(wr):.2f}] | {server} | {sratio} |"
        )
    if args.json:
        payload = {"args": vars(args), "summary": summary, "reps": reps}
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
