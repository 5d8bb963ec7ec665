"""The shop's one model."""

from __future__ import annotations

from django.db import models


class Order(models.Model):
    """An order; placing one sends a receipt."""

    email = models.TextField()

    def __str__(self) -> str:
        return f"order {self.pk} for {self.email}"
