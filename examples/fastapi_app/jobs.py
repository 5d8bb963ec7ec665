"""The shop's job and the worker that runs it (synchronous: drover runs handlers on threads)."""

from __future__ import annotations

import os

import psycopg
from models import Order
from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session

import drover
from drover.contrib.sqlalchemy import complete

workers = drover.Workers()


class SendReceipt(drover.JobArgs, kind="fastapi_send_receipt", queue="mail", max_attempts=5):
    """Email the receipt of an order."""

    order_id: int


_engine: Engine | None = None


def engine() -> Engine:
    """The worker's (synchronous) engine on ``$DATABASE_URL``, made on first use."""
    global _engine
    if _engine is None:
        url = os.environ["DATABASE_URL"]
        # The creator keeps any libpq URL as it is (socket directories included).
        _engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(url))
    return _engine


@workers.register(args=SendReceipt)
def send_receipt(job: drover.Job[SendReceipt]) -> None:
    """Pretend to send it: mark the order (the effect a test can see).

    The mark and the job's completion commit together: a run repeated after a
    crash finds the job completed, never a second mark.
    """
    with Session(engine()) as session, session.begin():
        order = session.get(Order, job.args.order_id)
        if order is None:
            raise drover.Cancel(f"order {job.args.order_id} does not exist")
        order.receipt_sent = True
        complete(session, job)
