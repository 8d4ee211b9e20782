from __future__ import annotations

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from orders.models import Order
from orders.tasks import app
from taskq.integrations.django import enqueue


class PaymentDeclined(Exception):
    pass


@csrf_exempt
@require_POST
def create_order(request: HttpRequest) -> JsonResponse:
    try:
        with transaction.atomic():
            order = Order.objects.create(item=request.GET.get("item", "book"))
            # Django's connection, this atomic() block: the task commits with the order.
            task_id = enqueue(app, "order.ship", {"order_id": order.pk})
            if request.GET.get("fail") == "true":
                raise PaymentDeclined  # rolls back order and task
    except PaymentDeclined:
        return JsonResponse({"detail": "payment declined"}, status=500)
    return JsonResponse({"order_id": order.pk, "task_id": task_id})
