"""A complete drover worker: typed email jobs, a retry path, a middleware, SIGINT shutdown.

    DATABASE_URL=postgresql://localhost/app python examples/email/main.py

Without DATABASE_URL it starts a throwaway embedded PostgreSQL. It enqueues a
few welcome emails (one to a mailbox that fails on its first try, so the retry
path shows), runs the pool until every email is sent or until Ctrl-C /
SIGTERM, then drains: jobs still running get ``shutdown_timeout`` to finish and
are otherwise handed back to the queue for the next worker.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import drover

log = logging.getLogger("examples.email")


class SendEmail(drover.JobArgs, kind="send_email", queue="email", max_attempts=5):
    to: str
    template: str = "welcome"


class EmailWorker(drover.Worker[SendEmail]):
    """Sends one email. Must be idempotent: drover delivers at least once."""

    def __init__(self, sent: threading.Semaphore) -> None:
        self._sent = sent

    def work(self, job: drover.Job[SendEmail]) -> None:
        if job.args.to.endswith("@flaky.example") and job.attempt == 1:
            raise ConnectionError(f"SMTP server refused {job.args.to} (will retry)")
        if job.args.to.endswith("@invalid.example"):
            # Retrying cannot help: end the job cancelled, with the reason recorded.
            raise drover.Cancel(f"{job.args.to} does not accept mail")
        log.info(
            "sent %s email to %s (attempt %d, request %s)",
            job.args.template,
            job.args.to,
            job.attempt,
            job.context.values.get("request_id"),
        )
        self._sent.release()


def timing(next_handler: drover.Handler) -> drover.Handler:
    """Middleware: time every execution and tag it with an id the worker can log."""

    def handle(ctx: drover.JobContext, row: drover.JobRow) -> None:
        ctx.values["request_id"] = f"req-{row.id}-{row.attempt}"
        started = time.perf_counter()
        try:
            next_handler(ctx, row)
        finally:
            elapsed_ms = (time.perf_counter() - started) * 1000
            log.info("job %d (%s) took %.1f ms", row.id, row.kind, elapsed_ms)

    return handle


class SoonRetry:
    """Retry after one second, so the example shows the retry without a long wait."""

    def next_retry(self, job: drover.JobRow) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=1)


@contextlib.contextmanager
def database() -> Iterator[str]:
    url = os.environ.get("DATABASE_URL")
    if url:
        yield url
        return
    from drover._db.embedded import embedded_postgres

    with embedded_postgres() as embedded:
        yield embedded


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    recipients = ["ada@example.com", "grace@flaky.example", "alan@example.com"]
    sent = threading.Semaphore(0)
    workers = drover.Workers()
    workers.add(EmailWorker(sent))
    with database() as url:
        drover.migrate(url)
        config = drover.Config(
            workers=workers,
            concurrency=4,
            queues={"email": 1},
            middleware=[timing],
            retry_policy=SoonRetry(),
            poll_interval=0.5,
            shutdown_timeout=10,
        )
        client = drover.Client(url, config)
        client.insert_many([SendEmail(to=to) for to in recipients])
        client.insert(SendEmail(to="nobody@invalid.example"))

        # Stop when every deliverable email is out, or on SIGINT/SIGTERM.
        def stop_when_done() -> None:
            for _ in recipients:
                sent.acquire()
            log.info("all %d emails sent; shutting down", len(recipients))
            os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=stop_when_done, daemon=True).start()
        try:
            client.run()  # blocks until SIGINT/SIGTERM, then drains
        except drover.DrainIncomplete as exc:
            log.warning("%d job(s) were handed back to the queue: %s", exc.count, exc.job_ids)
            return 1
        log.info("worker stopped cleanly")
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
