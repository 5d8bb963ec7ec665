"""The shop's table, shared by the web application and the worker."""

from __future__ import annotations

from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    """The models' base class."""


class Order(Base):
    """An order; placing one sends a receipt."""

    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str]
    receipt_sent: Mapped[bool] = mapped_column(default=False)
