"""A FastAPI shop on async SQLAlchemy: placing an order writes its row and its receipt job together.

From this directory, with ``DATABASE_URL`` set (``postgresql://...``)::

    python init_db.py                  # drover's schema, then the shop's tables
    uvicorn app:app                    # the web application
    drover worker worker:make_client   # the worker
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

import psycopg
from fastapi import Depends, FastAPI, HTTPException, Request
from jobs import SendReceipt
from models import Order
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine

import drover


class PlaceOrder(BaseModel):
    """The request body of ``POST /orders``; ``fail`` makes the endpoint roll back."""

    email: str
    fail: bool = False


async def get_session(request: Request) -> AsyncIterator[AsyncSession]:
    """The request's session (a dependency; module level, so FastAPI can resolve its hints)."""
    async with request.app.state.sessions() as session:
        yield session


def create_app(database_url: str | None = None) -> FastAPI:
    """The application on ``database_url`` (default ``$DATABASE_URL``)."""
    url = database_url or os.environ["DATABASE_URL"]

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # psycopg 3 underneath (postgresql+psycopg); the creator keeps any
        # libpq URL as it is (socket directories included).
        engine = create_async_engine(
            "postgresql+psycopg://", async_creator=lambda: psycopg.AsyncConnection.connect(url)
        )
        app.state.sessions = async_sessionmaker(engine, expire_on_commit=False)
        # One drover client for the application: it only inserts.
        async with drover.AsyncClient(url) as client:
            app.state.drover = client
            yield
        await engine.dispose()

    app = FastAPI(lifespan=lifespan)

    @app.post("/orders")
    async def place_order(
        body: PlaceOrder, request: Request, db: Annotated[AsyncSession, Depends(get_session)]
    ) -> dict[str, int]:
        """Write the order and its receipt job in one transaction; ``fail`` rolls both back."""
        client: drover.AsyncClient = request.app.state.drover
        async with db.begin():
            order = Order(email=body.email)
            db.add(order)
            await db.flush()  # the order's id, still inside the transaction
            job = await client.insert_tx(db, SendReceipt(order_id=order.id))
            if body.fail:
                # Raised inside begin(): the order and the job roll back together.
                raise HTTPException(status_code=409, detail="declined")
        return {"order": order.id, "job": job.id}

    return app


def __getattr__(name: str) -> FastAPI:
    # ``uvicorn app:app`` builds the application on first access, so importing
    # this module (tests, create_app) needs no DATABASE_URL.
    if name == "app":
        return create_app()
    raise AttributeError(name)
