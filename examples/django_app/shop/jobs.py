"""The shop's jobs: ``DROVER["WORKERS"]`` points here."""

from __future__ import annotations

import drover

workers = drover.Workers()


class SendReceipt(drover.JobArgs, kind="send_receipt", queue="mail", max_attempts=5):
    """Email the receipt of an order."""

    order_id: int


@workers.register(args=SendReceipt)
def send_receipt(job: drover.Job[SendReceipt]) -> None:
    """Pretend to send it: mark the order as receipted (the effect a test can see)."""
    from shop.models import Order

    order = Order.objects.get(pk=job.args.order_id)
    order.email = order.email + " (receipt sent)"
    order.save(update_fields=["email"])
