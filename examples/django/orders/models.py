from __future__ import annotations

from django.db import models


class Order(models.Model):
    item = models.CharField(max_length=200)
    shipped = models.BooleanField(default=False)

    class Meta:
        app_label = "orders"
