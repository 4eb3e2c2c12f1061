"""The lock family for asyncio: the plans of :mod:`fastredlock.handles.family`, mixed with the asyncio handle.

Each kind is a :class:`fastredlock.asyncio.Lock` (acquire with its waits and wake-ups, release,
extend, the watchdog task, ``async with``) whose rounds are its plan's; the plans, their decisions
and the reentrant lock's owner logic are :mod:`fastredlock.handles.family`'s (the rules are
:mod:`fastredlock.protocol.family`'s). The owner of an :class:`RLock` is the task that acquired it.
"""
from __future__ import annotations

import asyncio
from typing import Any, List, Optional

from ..errors import LockNotAcquiredError
from ..handles.family import RLockBase, RWLock, PermitPlan, ReadPlan, RLockPlan, WritePlan
from .lock import Lock, drive

__all__ = ["RLock", "RWLock", "ReadLock", "Semaphore", "WriteLock"]


class Semaphore(PermitPlan, Lock):
    """One permit of a semaphore, for asyncio (see :class:`fastredlock.Semaphore`)."""


class ReadLock(ReadPlan, Lock):
    """The read side of an :class:`RWLock`, for asyncio (see :class:`fastredlock.ReadLock`)."""


class WriteLock(WritePlan, Lock):
    """The write side of an :class:`RWLock`, for asyncio (see :class:`fastredlock.WriteLock`)."""


class _Reentry(RLockPlan, Lock):
    """One task's hold of a reentrant lock (the asyncio twin of the sync front-end's ``fastredlock.sync.family._Reentry``)."""


class RLock(RLockBase):
    """A reentrant lock for asyncio: its owner is the task that acquired it (see
    :class:`fastredlock.RLock`). The same API, awaitable; ``async with``."""

    _hold_class = _Reentry

    @staticmethod
    def _owner() -> Any:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a fastredlock.asyncio reentrant lock is owned by a task: call it from one")
        return task

    async def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> bool:
        """Acquire it, or enter it once more if the calling task holds it (see :meth:`fastredlock.RLock.acquire`)."""
        return await drive(self._client.async_executor, self._acquire_plan(blocking, timeout))

    async def release(self) -> None:
        """Leave it once; the last release frees it (see :meth:`fastredlock.RLock.release`).
        Cancelled meanwhile, the release still goes out (see :meth:`fastredlock.asyncio.Lock.release`)."""
        await drive(self._client.async_executor, self._release_plan())

    async def extend(self, ttl: Optional[float] = None) -> None:
        """Reset the TTL of the calling task's hold (see :meth:`fastredlock.asyncio.Lock.extend`)."""
        await self._mine().extend(ttl)

    async def settled_outcomes(self) -> List[Any]:
        """:attr:`outcomes` once the stragglers' answers are in (see :meth:`fastredlock.asyncio.Lock.settled_outcomes`)."""
        hold = self._hold() or getattr(self, "_last", None)
        return await hold.settled_outcomes() if hold is not None else []

    async def __aenter__(self) -> "RLock":
        if not await self.acquire():
            raise LockNotAcquiredError(f"could not acquire reentrant lock {self.name!r}", self.name, self.outcomes)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.release()

    def __enter__(self) -> "RLock":
        raise TypeError("use 'async with' with a fastredlock.asyncio reentrant lock")
