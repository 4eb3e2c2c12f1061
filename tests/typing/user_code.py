"""User code as it calls the public API: checked by ``mypy --strict`` (test_typing.py), never run."""
from __future__ import annotations

from typing import List, Optional

import fastredlock
import fastredlock.asyncio
from fastredlock import Lock, LockError, LockNotAcquiredError, LockNotOwnedError, Redlock

MASTERS = ["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"]


def sync_user() -> Optional[float]:
    dlm = Redlock(MASTERS, retry_delay=0.2, retry_jitter=0.2, io_timeout=0.05)
    with dlm.lock("orders:42", ttl=10.0) as held:
        left: float = held.validity
    lock: Lock = dlm.lock("orders:42", ttl=10.0)
    acquired: bool = lock.acquire(blocking=True, timeout=2.0)
    if acquired:
        try:
            lock.extend()
        except LockNotOwnedError as exc:
            outcomes: List[object] = list(exc.outcomes or [])
            print(outcomes)
        finally:
            lock.release()
    try:
        dlm.lock("orders:43", ttl=1.0).acquire(blocking=False)
    except (LockNotAcquiredError, LockError):
        pass
    core: str = fastredlock.CORE
    print(core)
    dlm.close()
    return left


async def async_user() -> bool:
    dlm = fastredlock.asyncio.Redlock(MASTERS, retry_delay=0.2)
    async with dlm.lock("orders:42", ttl=10.0) as held:
        print(held.validity)
    lock = dlm.lock("orders:42", ttl=10.0)
    acquired: bool = await lock.acquire(timeout=2.0)
    if acquired:
        await lock.extend()
        await lock.release()
    await dlm.aclose()
    return acquired
