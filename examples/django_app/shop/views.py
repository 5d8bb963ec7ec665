"""The order endpoint: the order row and its receipt job commit together, or neither does."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from drover.contrib.django import insert
from shop.jobs import SendReceipt
from shop.models import Order


@csrf_exempt
def place_order(request: HttpRequest) -> HttpResponse:
    """POST ``email=...``: create the order, enqueue its receipt (ATOMIC_REQUESTS wraps both).

    ``fail=1`` raises after both were written, to show that the job rolls back
    with the order.
    """
    if request.method != "POST":
        return HttpResponse(status=405)
    order = Order.objects.create(email=request.POST["email"])
    job = insert(SendReceipt(order_id=order.pk))
    if request.POST.get("fail"):
        raise RuntimeError("payment declined after the order was written")
    return JsonResponse({"order": order.pk, "job": job.id})
