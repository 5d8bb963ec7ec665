"""The shop's jobs: ``DROVER["WORKERS"]`` points here."""

from __future__ import annotations

import drover

workers = drover.Workers()


class SendReceipt(drover.JobArgs, kind="send_receipt", queue="mail", max_attempts=5):
    """Email the receipt of an order."""

    order_id: int


@workers.register(args=SendReceipt)
def send_receipt(job: drover.Job[SendReceipt]) -> None:
    """Pretend to send it: mark the order as receipted (the effect a test can see).

    The mark and the job's completion commit in one transaction
    (``drover.contrib.django.complete``): a re-run after a crash finds the job
    already completed, never a doubled mark.
    """
    from django.db import transaction

    from drover.contrib.django import complete
    from shop.models import Order

    with transaction.atomic():
        order = Order.objects.select_for_update().get(pk=job.args.order_id)
        order.email = order.email + " (receipt sent)"
        order.save(update_fields=["email"])
        complete(job)
