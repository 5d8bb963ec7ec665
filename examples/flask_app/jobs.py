"""The shop's jobs and the workers that run them, with the application's models."""

from __future__ import annotations

from models import Order, db

import drover
from drover.contrib.sqlalchemy import complete

workers = drover.Workers()


class SendReceipt(drover.JobArgs, kind="flask_send_receipt", queue="mail", max_attempts=5):
    """Email the receipt of an order."""

    order_id: int


@workers.register(args=SendReceipt)
def send_receipt(job: drover.Job[SendReceipt]) -> None:
    """Pretend to send it: mark the order (the effect a test can see).

    Runs inside the application context the worker's `app_context` middleware
    pushes, so ``db.session`` is this job's own session, removed when the job
    ends. The mark and the job's completion commit together: a run repeated
    after a crash finds the job completed, never a second mark.
    """
    order = db.session.get(Order, job.args.order_id)
    if order is None:
        raise drover.Cancel(f"order {job.args.order_id} does not exist")
    order.receipt_sent = True
    complete(db.session, job)
    db.session.commit()
