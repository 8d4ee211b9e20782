"""An order service: FastAPI + SQLAlchemy 2 (AsyncSession, asyncpg dialect) + taskq.

POST /orders inserts an order and enqueues its shipping task in the *same* AsyncSession: the
task exists if and only if the order committed. `?fail=true` raises after both, to show the
rollback taking the task with it.

    export DATABASE_URL=postgresql+asyncpg://user@localhost/app     # the service's engine
    export TASKQ_DSN=postgresql://user@localhost/app                 # the worker's
    taskq migrate && python -c "import asyncio, service; asyncio.run(service.create_tables())"
    uvicorn service:api --port 8000                                  # the web service
    taskq worker --app service:tasks                                 # a worker
    curl -X POST 'localhost:8000/orders?item=book'
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException
from sqlalchemy import String
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

import taskq

engine = create_async_engine(os.environ.get("DATABASE_URL", "postgresql+asyncpg:///app"))
Sessions = async_sessionmaker(engine, expire_on_commit=False)

tasks = taskq.App()


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    item: Mapped[str] = mapped_column(String(200))
    shipped: Mapped[bool] = mapped_column(default=False)


@tasks.task("order.ship", max_retry_count=5)
async def ship(ctx: taskq.TaskContext, payload: Any) -> None:
    async with Sessions() as session, session.begin():
        order = await session.get(Order, payload["order_id"])
        if order is None:
            raise taskq.Permanent(f"order {payload['order_id']} does not exist")
        order.shipped = True


async def create_tables() -> None:
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)


async def session() -> AsyncIterator[AsyncSession]:
    async with Sessions() as s:
        yield s


api = FastAPI()


@api.post("/orders")
async def create_order(
    item: str, db: Annotated[AsyncSession, Depends(session)], fail: bool = False
) -> dict[str, int]:
    async with db.begin():
        order = Order(item=item)
        db.add(order)
        await db.flush()  # the order's id
        # Same session, same transaction: no commit here, no second connection.
        task_id: int = await tasks.enqueue(db, "order.ship", {"order_id": order.id})
        if fail:
            raise HTTPException(500, "payment declined")  # rolls back order and task
    return {"order_id": order.id, "task_id": task_id}
