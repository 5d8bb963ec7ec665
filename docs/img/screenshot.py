"""Regenerate docs/img/status-page.png and limits-page.png: sample data, ``drover web``, Chromium.

Run from the repository root: ``.venv/bin/python docs/img/screenshot.py`` (needs Debian's chromium).
"""

from __future__ import annotations

import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import psycopg

import drover
from drover._db.embedded import embedded_postgres

OUT = Path(__file__).resolve().parent / "status-page.png"
LIMITS_OUT = Path(__file__).resolve().parent / "limits-page.png"


def seed(url: str) -> None:
    rng = random.Random(7)  # noqa: S311 - sample data
    with psycopg.connect(url, autocommit=True) as conn:
        for minute in range(60):
            for queue, rate in (("email", 40), ("reports", 8), ("billing", 4)):
                done = int(rate * (0.6 + 0.4 * rng.random()) * (1.6 if 20 < minute < 28 else 1))
                conn.execute(
                    "INSERT INTO drover_jobs (kind, queue, state, attempt, finalized_at, errors) "
                    "SELECT %s, %s, 'completed', 1, now() - make_interval(mins => %s) "
                    "+ random() * interval '50 seconds', CASE WHEN random() < 0.1 THEN "
                    "jsonb_build_array(jsonb_build_object('attempt', 1, 'at', "
                    "(now() - make_interval(mins => %s))::text, 'error', 'TimeoutError')) "
                    "ELSE '[]'::jsonb END FROM generate_series(1, %s)",
                    (f"{queue}_job", queue, minute, minute, done),
                )
                # Run times: a few hundred milliseconds, a long tail for reports.
                conn.execute(
                    "UPDATE drover_jobs SET attempted_at = finalized_at - make_interval("
                    "secs => %s * (0.2 + random() * random() * 3)) "
                    "WHERE kind = %s AND attempted_at IS NULL",
                    (5 if queue == "reports" else 1, f"{queue}_job"),
                )
        for i in range(9):
            conn.execute(
                "INSERT INTO drover_jobs (kind, queue, state, attempt, max_attempts, finalized_at, "
                "errors) VALUES ('send_email', 'email', 'dead', 5, 5, "
                "now() - make_interval(mins => %s), jsonb_build_array(jsonb_build_object("
                "'attempt', 5, 'at', now()::text, 'error', 'SMTPError: 550 mailbox unavailable')))",
                (i * 6 + 1,),
            )
        conn.execute(
            "INSERT INTO drover_jobs (kind, queue, state, scheduled_at) SELECT 'send_email', "
            "'email', 'available', now() - interval '4 seconds' FROM generate_series(1, 37)"
        )
        conn.execute(
            "INSERT INTO drover_jobs (kind, queue, state, scheduled_at) SELECT 'monthly_report', "
            "'reports', 'scheduled', now() + interval '2 hours' FROM generate_series(1, 12)"
        )
        # Two live worker processes, both on email: reports has waiting jobs and
        # nobody consuming it, which the overview flags.
        for n, pid in ((1, 4811), (2, 4812)):
            conn.execute(
                "INSERT INTO drover_clients (id, client_id, host, pid, version, queues, "
                "concurrency, running, expires_at) VALUES (%s, %s, %s, %s, %s, "
                "ARRAY['email', 'billing'], 20, %s, now() + interval '1 day')",
                (f"shot-{n}", f"a1b2c{n}", f"worker-{n}", pid, drover.__version__, 7 + n),
            )
    with drover.Inspector(url) as inspector:
        inspector.pause_queue("billing")


def seed_limits(url: str) -> None:
    """Limits as code declares them (what a starting client writes), in use, and overrides."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO drover_limits (scope, target, partition_by, declared_concurrency, "
            "declared_rate, declared_per, declared_at) VALUES "
            "('kind', 'render_pdf', '', 5, NULL, NULL, now()), "
            "('kind', 'sync_tenant', 'tenant_id', 1, NULL, NULL, now()), "
            "('kind', 'call_partner', '', NULL, 20, interval '1 second', now()), "
            "('kind', 'call_partner', 'account', 2, 600, interval '1 minute', now()), "
            "('queue', 'reports', '', 3, NULL, NULL, now())"
        )
        running = [("render_pdf", "{}")] * 7
        running += [("sync_tenant", f'{{"tenant_id": {t}}}') for t in (7, 12, 31, 40)]
        running += [("call_partner", f'{{"account": "{a}"}}') for a in ("acme", "acme", "globex")]
        for kind, args in running:
            conn.execute(
                "INSERT INTO drover_jobs (kind, queue, args, state, attempt, attempted_at, "
                "leased_until) VALUES (%s, 'default', %s::jsonb, 'running', 1, now(), "
                "now() + interval '1 hour')",
                (kind, args),
            )
        # Starts the claims recorded: 14 in the last second for the whole kind,
        # per account over the minute.
        conn.execute(
            "INSERT INTO drover_limit_starts (limit_id, part, started_at, starts) "
            "SELECT id, part, now(), n FROM drover_limits, (VALUES "
            "  ('', '', 14), ('account', '\"acme\"', 380), ('account', '\"globex\"', 95)"
            ") AS s(by, part, n) WHERE target = 'call_partner' AND partition_by = s.by"
        )
    with drover.Inspector(url) as inspector:
        inspector.set_limit("kind:render_pdf", concurrency=8)  # an operator raised it
        inspector.set_limit("queue:exports", rate=100, per="minute")  # no code declares it


def _shoot(address: str, path: str, out: Path, width: int, height: int) -> None:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    assert chromium, "install Debian's chromium"
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=chromium, args=["--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page(viewport={"width": width, "height": height})
        page.goto(address.rstrip("/") + path)
        page.screenshot(path=str(out), full_page=True)
        browser.close()


def main() -> None:
    with embedded_postgres() as url:
        drover.migrate(url)
        seed(url)
        web = subprocess.Popen(
            [sys.executable, "-m", "drover", "web", "--listen", "127.0.0.1:0", "--refresh", "0",
             "--database", url],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert web.stdout is not None
            address = web.stdout.readline().strip()
            _shoot(address, "/", OUT, 1100, 640)
            seed_limits(url)  # after the overview's shot, which stays as it was
            _shoot(address, "/limits", LIMITS_OUT, 1100, 400)
        finally:
            web.send_signal(signal.SIGTERM)
            web.communicate(timeout=10)
    print(OUT, LIMITS_OUT)


if __name__ == "__main__":
    main()
