# cython: annotation_typing=False
"""The lock family's sync classes: the plans of :mod:`fastredlock.handles.family` mixed with the sync
:class:`~fastredlock.Lock`, and the reentrant lock driven by the sync driver.

``dlm.rlock(name)``, ``dlm.rwlock(name)`` (``.read``, ``.write``) and ``dlm.semaphore(name, limit)``.
Each kind is a :class:`fastredlock.Lock` whose rounds are its plan's: the acquire loop with its
retries, waits and wake-ups, the validity, the lost signal, the watchdog (``auto_extend``), events and
errors are the plain lock's. :mod:`fastredlock.asyncio.family` mixes the same plans with the asyncio
handle.
"""
from __future__ import annotations

from typing import Optional

from ..errors import LockNotAcquiredError
from ..handles.family import PermitPlan, ReadPlan, RLockBase, RLockPlan, RWLock, WritePlan
from .lock import Lock, drive

__all__ = ["RLock", "RWLock", "ReadLock", "Semaphore", "WriteLock"]


class Semaphore(PermitPlan, Lock):
    """One permit of the semaphore ``name``; get one from :meth:`Redlock.semaphore`.

    The :class:`Lock` API: :meth:`acquire` takes one permit (its own token, TTL, extension,
    watchdog), :meth:`release` gives it back and wakes the semaphore's waiters. At most ``limit``
    permits are held at once, over all clients (the guide "The lock family" says why).
    Take one handle per permit holder (thread).
    """


class ReadLock(ReadPlan, Lock):
    """The read side of a :class:`RWLock` (many readers hold it at once, never with a writer)."""


class WriteLock(WritePlan, Lock):
    """The write side of a :class:`RWLock` (one writer, and no reader, holds it); while it waits
    for readers to leave, its mark keeps new readers out. A writer that gives up clears its mark."""


class _Reentry(RLockPlan, Lock):
    """One owner's hold of a reentrant lock (what :class:`RLock` keeps per thread or task)."""


class RLock(RLockBase):
    """A reentrant lock: its owner (the thread that acquired it; for asyncio, the task) may acquire
    it again while it holds it, and each acquisition needs its release; the lock is freed on the
    masters when the count reaches zero. Get one from :meth:`Redlock.rlock`.

    Every :class:`RLock` of a client for one name shares the owners' holds, so nested code that
    calls ``dlm.rlock(name)`` again re-enters. Another owner (thread, task, process) is refused as
    any other client is. The methods act for the calling owner.
    """

    _hold_class = _Reentry

    def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> bool:
        """Acquire it, or enter it once more if the caller holds it already (one round; a re-entry
        that a quorum did not confirm returns False and the count stays). See :meth:`Lock.acquire`."""
        return drive(self._client.executor, self._acquire_plan(blocking, timeout))

    def release(self) -> None:
        """Leave it once; the last release frees it on the masters (and wakes waiters). Raises as
        :meth:`Lock.release` does, and :class:`LockError` if the caller does not hold it."""
        drive(self._client.executor, self._release_plan())

    def extend(self, ttl: Optional[float] = None) -> None:
        """Reset the TTL of the caller's hold (see :meth:`Lock.extend`)."""
        self._mine().extend(ttl)

    def __enter__(self) -> "RLock":
        if not self.acquire():
            raise LockNotAcquiredError(f"could not acquire reentrant lock {self.name!r}", self.name, self.outcomes)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()
