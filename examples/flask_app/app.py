"""A Flask + Flask-SQLAlchemy shop: placing an order writes its row and its receipt job together.

From this directory, with ``DATABASE_URL`` set (``postgresql://...``)::

    flask --app app init-db            # drover's schema, then the shop's tables
    flask --app app run                # the web application
    drover worker worker:make_client   # the worker
"""

from __future__ import annotations

import os
from typing import Any

import click
import psycopg
from flask import Flask, abort, jsonify, request
from jobs import SendReceipt
from models import Order, db

import drover
from drover.contrib.sqlalchemy import insert


def create_app(database_url: str | None = None) -> Flask:
    """The application on ``database_url`` (default ``$DATABASE_URL``)."""
    url = database_url or os.environ["DATABASE_URL"]
    app = Flask(__name__)
    # psycopg 3 underneath (required by drover.contrib.sqlalchemy); the creator
    # keeps any libpq URL as it is (socket directories included).
    app.config["SQLALCHEMY_DATABASE_URI"] = "postgresql+psycopg://"
    app.config["SQLALCHEMY_ENGINE_OPTIONS"] = {"creator": lambda: psycopg.connect(url)}
    db.init_app(app)

    @app.cli.command("init-db")
    def init_db() -> None:
        """Create drover's tables, then the shop's (both idempotent)."""
        applied = drover.migrate(url)
        db.create_all()
        click.echo(f"drover: {len(applied)} migration(s) applied; the shop's tables are ready")

    @app.post("/orders")
    def place_order() -> Any:
        """Write the order and its receipt job in one transaction; ``fail=1`` rolls both back."""
        email = request.form.get("email") or abort(400)
        order = Order(email=email)
        db.session.add(order)
        db.session.flush()  # the order's id, still inside the transaction
        job = insert(db.session, SendReceipt(order_id=order.id))
        if request.form.get("fail"):
            db.session.rollback()
            abort(409)
        db.session.commit()
        return jsonify(order=order.id, job=job.id)

    return app
