"""fastredlock for asyncio: :class:`Redlock` and :class:`Lock` with the sync API's shape, awaitable.

::

    from fastredlock.asyncio import Redlock

    async with Redlock(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"]) as dlm:
        async with dlm.lock("orders:42", ttl=10.0) as lock:
            ...  # lock.validity: seconds left, conservative

The same engine as the sync client (one multiplexed round per operation, the C core where it is
built), driven by the event loop: no threads, no executor. Tasks that lock at the same time share
rounds. Errors are those of :mod:`fastredlock.errors`.
"""
from ..errors import (
    LockError, LockLostError, LockNotAcquiredError, LockNotOwnedError, MasterOutcome, QuorumUnreachableError,
    ScriptsRefusedError,
)
from .client import Redlock
from .family import ReadLock, RLock, RWLock, Semaphore, WriteLock
from .lock import Lock

__all__ = ["Lock", "LockError", "LockLostError", "LockNotAcquiredError", "LockNotOwnedError", "MasterOutcome",
           "QuorumUnreachableError", "RLock", "RWLock", "ReadLock", "Redlock", "ScriptsRefusedError", "Semaphore", "WriteLock"]
