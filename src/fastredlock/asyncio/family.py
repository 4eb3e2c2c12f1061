"""The lock family for asyncio: the plans of :mod:`fastredlock.family`, run on the client's loop.

Each kind is a :class:`fastredlock.asyncio.Lock` (acquire with its waits and wake-ups, release,
extend, the watchdog task, ``async with``) whose rounds are its plan's; the plans and their
decisions are the sync module's (:mod:`fastredlock.protocol.family` holds the rules). The owner of
an :class:`RLock` is the task that acquired it.
"""
from __future__ import annotations

import asyncio
from typing import Any, List, Optional, Tuple, Union

from ..errors import LockNotAcquiredError
from ..family import RLock as _SyncRLock, RWLock, Step, _PermitPlan, _ReadPlan, _RLockPlan, _WritePlan
from .lock import Lock

__all__ = ["RLock", "RWLock", "ReadLock", "Semaphore", "WriteLock"]


class _Planned(Lock):
    """An asyncio :class:`Lock` whose rounds are its plan's, run on the client's loop."""

    async def _attempt_planned(self, token: bytes) -> bool:  # type: ignore[override]
        aexec = self._client._aexec
        executor = self._executor

        async def plan(lc: Any) -> Tuple[bool, Any]:
            executor.for_acquiring(lc.core)
            step = self._acquire_step(token)  # type: ignore[attr-defined]
            while step is not None:
                rounds = await lc.run(step[0], *step[1])
                ok, rnd, cleanup, step = self._granted(rounds, token)  # type: ignore[attr-defined]
                for op, args in cleanup:
                    await lc.run(op, *args)
            return ok, rnd

        def undo(result: Tuple[bool, Any]) -> None:  # cancelled: the lock taken for nobody goes
            if result[0]:
                asyncio.ensure_future(self._run_step(self._release_step(token)))  # type: ignore[attr-defined]

        ok, rnd = await aexec.job(plan, undo=undo)
        if ok:
            self._valid_until = rnd.valid_until
        self._last = rnd
        return ok

    async def _release_planned(self, token: bytes, carrier: Any) -> Tuple[Any, bool]:  # type: ignore[override]
        return await self._run_step(self._release_step(token))  # type: ignore[attr-defined]

    async def _run_step(self, step: Step) -> Tuple[Any, bool]:
        """``(round, ok)`` of one plan step, in its turn on the client's loop."""
        op, args = step
        rnd = (await self._client._aexec.run(op, *args))[0]
        return rnd, bool(rnd.ok)


class Semaphore(_PermitPlan, _Planned):
    """One permit of a semaphore, for asyncio (see :class:`fastredlock.Semaphore`)."""

    def __init__(self, client: Any, name: Union[str, bytes], limit: int, ttl: float, **options: Any) -> None:
        super().__init__(client, name, ttl, **options)
        self._permit_init(limit)


class ReadLock(_ReadPlan, _Planned):
    """The read side of an :class:`RWLock`, for asyncio (see :class:`fastredlock.ReadLock`)."""

    def __init__(self, client: Any, name: Union[str, bytes], ttl: float, **options: Any) -> None:
        super().__init__(client, name, ttl, **options)
        self._rw_init()


class WriteLock(_WritePlan, _Planned):
    """The write side of an :class:`RWLock`, for asyncio (see :class:`fastredlock.WriteLock`)."""

    def __init__(self, client: Any, name: Union[str, bytes], ttl: float, **options: Any) -> None:
        super().__init__(client, name, ttl, **options)
        self._write_init()

    async def acquire(self, blocking: bool = True, timeout: Optional[float] = None, *,  # type: ignore[override]
                      token: Union[str, bytes, None] = None) -> bool:
        """As :meth:`fastredlock.WriteLock.acquire`: a writer that gives up clears its mark."""
        ok = await super().acquire(blocking, timeout, token=token)
        if not ok:
            await self._run_step(self._unmark_step())
        return ok


class _Reentry(_RLockPlan, _Planned):
    """One task's hold of a reentrant lock (see :class:`fastredlock.family._Reentry`)."""

    def __init__(self, client: Any, name: Union[str, bytes], ttl: float, **options: Any) -> None:
        super().__init__(client, name, ttl, **options)
        self._rlock_init()

    async def reenter(self) -> bool:
        """One round that counts one more entry (see :meth:`fastredlock.family._Reentry.reenter`)."""
        token = self._require_token()
        rnd, _ok = await self._run_step(self._count_step(token, self.count + 1))
        if self._entered(rnd):
            return True
        await self._run_step(self._leave_step(token, self.count, False))
        return False

    async def leave(self) -> None:
        """One round that counts one entry less (the count stays above zero)."""
        token = self._require_token()
        self.count -= 1
        rnd, ok = await self._run_step(self._leave_step(token, self.count))
        self._last = rnd
        if not ok:
            raise self._release_unconfirmed(rnd, await self._outcomes_of(rnd))


class RLock(_SyncRLock):
    """A reentrant lock for asyncio: its owner is the task that acquired it (see
    :class:`fastredlock.RLock`). The same API, awaitable; ``async with``."""

    _hold_class = _Reentry

    @staticmethod
    def _owner() -> Any:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a fastredlock.asyncio reentrant lock is owned by a task: call it from one")
        return task

    async def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> bool:  # type: ignore[override]
        """Acquire it, or enter it once more if the calling task holds it (see :meth:`fastredlock.RLock.acquire`)."""
        hold = self._hold()
        if self._held(hold):
            return await hold.reenter()
        hold = self._new_hold()
        if not await hold.acquire(blocking, timeout):
            self._last = hold
            return False
        self._took(hold)
        return True

    async def release(self) -> None:  # type: ignore[override]
        """Leave it once; the last release frees it (see :meth:`fastredlock.RLock.release`)."""
        hold = self._mine()
        if hold.count > 1:
            await hold.leave()
            return
        self._drop(hold)
        await hold.release()

    async def extend(self, ttl: Optional[float] = None) -> None:  # type: ignore[override]
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
