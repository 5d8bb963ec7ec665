"""The shop's jobs and the workers that run them."""

from __future__ import annotations

import psycopg

import drover

workers = drover.Workers()


class SendReceipt(drover.JobArgs, kind="flask_send_receipt", queue="mail", max_attempts=5):
    """Email the receipt of an order."""

    order_id: int


def receipt_worker(database_url: str) -> None:
    """Register the receipt worker; it marks the order as receipted (what a test can see)."""

    @workers.register(args=SendReceipt)
    def send_receipt(job: drover.Job[SendReceipt]) -> None:
        with psycopg.connect(database_url) as conn:
            conn.execute(
                "UPDATE orders SET email = email || ' (receipt sent)' WHERE id = %s",
                (job.args.order_id,),
            )
