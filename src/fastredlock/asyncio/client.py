"""``Redlock`` for asyncio: the sync client's options and answers, awaitable, on one event loop.

A client belongs to the event loop that first uses it (one client per loop; using it from another
raises ``RuntimeError``). Its rounds run on that loop through the readiness callbacks of the raw
sockets (:mod:`._loop_io`), one at a time, carrying every request tasks made meanwhile
(:mod:`._executor`). Options are those of :class:`fastredlock.Redlock` (``auto_pipeline`` is
accepted and ignored: tasks always ride together).
"""
from __future__ import annotations

import weakref
from typing import Any, Callable, Iterable, List, Optional, Sequence, Union

from ..handles.client import RedlockBase
from ..engine.checks import key_of
from ..handles.lock import fence_key
from ..handles.lockinfo import FamilyInfo, LockInfo, family_inspection, inspection
from ..handles.batch import acquire_many_plan, lock_all_plan, release_many_plan
from .executor import AsyncExecutor
from .notifier import AsyncNotifier
from .family import ReadLock, RLock, Semaphore, WriteLock
from .lock import Lock, drive, new_lock
from .watchdog import Watchdog

__all__ = ["Redlock"]


class Redlock(RedlockBase):
    """A Redlock client for asyncio over N independent Redis masters.

    Takes the options of :class:`fastredlock.Redlock`. Close it with ``await dlm.aclose()`` or use
    ``async with Redlock(...) as dlm``.

    ``same_server_ok=True`` accepts several dbs of one server as masters (refused by default):
    each db votes, so mutual exclusion holds as on that one server, but it is a single point of
    failure (see :class:`fastredlock.Redlock`).
    """

    _family = (RLock, Semaphore, ReadLock, WriteLock)
    _new_lock = staticmethod(new_lock)

    def __init__(self, masters: Iterable[Any], **options: Any) -> None:
        super().__init__(masters, **options)
        self._async_executor = AsyncExecutor(self.executor, lambda: Watchdog(self))

    @property
    def async_executor(self) -> AsyncExecutor:
        """The seam between this client's handles and its event loop (not for applications)."""
        return self._async_executor

    async def acquire_many(self, names: Sequence[Union[str, bytes]], ttl: float = 10.0) -> List[Optional[Lock]]:
        """Try to acquire K independent locks in one round (see :meth:`fastredlock.Redlock.acquire_many`)."""
        return await drive(self._async_executor, acquire_many_plan(Lock, self, names, ttl))

    async def release_many(self, locks: Sequence[Lock], *, wait: Optional[bool] = None) -> Optional[List[bool]]:
        """Release several held locks in one round; per lock, whether a quorum still held it
        (see :meth:`fastredlock.Redlock.release_many`; ``wait=False``: written, not waited for,
        returns None)."""
        return await drive(self._async_executor, release_many_plan(Lock, self, locks, wait))

    async def lock_all(self, names: Sequence[Union[str, bytes]], ttl: float = 10.0) -> Optional[List[Lock]]:
        """Acquire several names together, all or none (see :meth:`fastredlock.Redlock.lock_all`)."""
        return await drive(self._async_executor, lock_all_plan(Lock, self, names, ttl))

    async def inspect(self, name: Union[str, bytes]) -> LockInfo:
        """Tell whether the lock called ``name`` is held, on which masters, by whom and for how
        long, without taking it (one round that writes nothing; see
        :meth:`fastredlock.Redlock.inspect`)."""
        key = key_of(self.prefix, name)
        rounds = await self._async_executor.run("inspect", [key], [fence_key(key)])
        return inspection(name, self.masters, rounds, self.quorum, self.drift_factor)

    async def inspect_family(self, name: Union[str, bytes], kind: str, limit: int = 0) -> FamilyInfo:
        """Tell who holds a reentrant lock, read-write lock or semaphore, without taking it (one
        round of reads; see :meth:`fastredlock.Redlock.inspect_family`)."""
        rounds = await self._async_executor.run("reads", self._family_reads(name, kind, limit))
        return family_inspection(name, kind, limit, self.masters, rounds, self.quorum, self.drift_factor)

    async def aclose(self) -> None:
        """Stop the watchdog, let queued work finish, close every connection. Locks still held
        stay until their TTL."""
        if self._async_executor.watchdog is not None:
            await self._async_executor.watchdog.stop()
        if self.executor.notifier is not None:
            await self.executor.notifier.aclose()
        await self._async_executor.aclose()

    async def __aenter__(self) -> "Redlock":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # --- for the handles (not for applications) -----------------------------------------------
    def _new_notifier(self) -> AsyncNotifier:
        return AsyncNotifier(self._specs, self.connect_timeout, self.courtesy)

    def _new_watchdog(self, ref: "weakref.ref[Any]") -> Any:
        raise RuntimeError("the asyncio client's watchdog is a task (see AsyncExecutor.watch)")
