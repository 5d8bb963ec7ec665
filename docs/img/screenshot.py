"""Regenerate docs/img/status-page.png: sample data, ``drover web`` and Chromium.

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


def main() -> None:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    assert chromium, "install Debian's chromium"
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
            with sync_playwright() as p:
                browser = p.chromium.launch(
                    executable_path=chromium, args=["--no-sandbox", "--disable-gpu"]
                )
                page = browser.new_page(viewport={"width": 1100, "height": 640})
                page.goto(address)
                page.screenshot(path=str(OUT), full_page=True)
                browser.close()
        finally:
            web.send_signal(signal.SIGTERM)
            web.communicate(timeout=10)
    print(OUT)


if __name__ == "__main__":
    main()
