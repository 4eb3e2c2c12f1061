"""The FastAPI app of test_asgi.py, served by uvicorn in its own process.

Environment: ``JOBS_MASTERS`` (comma-separated lock masters), ``JOBS_CORE`` (the core of this
server's client), ``JOBS_BROKER`` (a Redis URL where requests count overlaps: one shared counter
per name, so two servers' requests are compared too).
"""
from __future__ import annotations

import asyncio
import os
from contextlib import asynccontextmanager

import redis.asyncio as aioredis
from fastapi import Depends, FastAPI, Request

from fastredlock.asyncio import Redlock
from fastredlock.jobs.asgi import LockDependency


@asynccontextmanager
async def lifespan(app):
    app.state.dlm = Redlock(os.environ["JOBS_MASTERS"].split(","), core=os.environ["JOBS_CORE"],
                            restart_aware=False, retry_delay=0.01, retry_jitter=0.01,
                            io_timeout=0.25)  # a loaded test machine answers slower than 50 ms
    app.state.broker = aioredis.Redis.from_url(os.environ["JOBS_BROKER"])
    yield
    await app.state.dlm.aclose()
    await app.state.broker.aclose()


app = FastAPI(lifespan=lifespan)
waiting = LockDependency(lambda request: request.app.state.dlm, "work:{item}", ttl=1, on_held="wait", wait=10)
rejecting = LockDependency(lambda request: request.app.state.dlm, "work:{item}", ttl=1, status_code=423)


async def _work(request, item: str, seconds: float = 0.02) -> dict:
    broker = request.app.state.broker
    active = await broker.incr(f"active:{item}")
    if active > 1:
        await broker.incr(f"overlaps:{item}")
    await asyncio.sleep(seconds)
    await broker.decr(f"active:{item}")
    return {"item": item, "core": os.environ["JOBS_CORE"], "loop": type(asyncio.get_running_loop()).__module__.split(".")[0]}


@app.get("/health")
async def health() -> dict:
    return {"ok": True}


@app.post("/wait/{item}")
async def wait_for_it(item: str, request: Request, lock=Depends(waiting)) -> dict:
    assert lock.locked()
    return await _work(request, item)


@app.post("/reject/{item}")
async def reject(item: str, request: Request, lock=Depends(rejecting)) -> dict:
    return await _work(request, item, 0.3)  # long enough that a burst's requests meet


@app.post("/free/{item}")
async def free(item: str, request: Request) -> dict:
    """No lock: the negative control (its requests do overlap)."""
    return await _work(request, item, 0.3)
