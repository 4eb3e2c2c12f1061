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
from ..engine.tokens import new_token, new_tokens
from ..handles.lock import fence_key
from ..handles.lockinfo import FamilyInfo, LockInfo, family_inspection, inspection
from ..protocol.plans import may_hold
from .executor import AsyncExecutor
from .notifier import AsyncNotifier
from .family import ReadLock, RLock, Semaphore, WriteLock
from .lock import Lock, new_lock
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
        self._aexec = AsyncExecutor(self.executor, lambda: Watchdog(self))

    @property
    def async_executor(self) -> AsyncExecutor:
        """The seam between this client's handles and its event loop (not for applications)."""
        return self._aexec

    async def acquire_many(self, names: Sequence[Union[str, bytes]], ttl: float = 10.0) -> List[Optional[Lock]]:
        """Try to acquire K independent locks in one round (see :meth:`fastredlock.Redlock.acquire_many`)."""
        names, keys, ttl_ms = self._batch_args(names, ttl)
        tokens = new_tokens(len(keys))

        async def plan(lc: Any) -> List[Any]:
            rounds = await lc.run("acquire_many", keys, tokens, ttl_ms)
            failed = [j for j, rnd in enumerate(rounds) if not rnd.ok and may_hold(rnd.outcomes)]
            if failed:  # written behind the SETs, not awaited
                await lc.run("release_many_nowait", [keys[j] for j in failed], [tokens[j] for j in failed])
            return rounds

        aexec = self._aexec

        def undo(rounds: List[Any]) -> None:  # cancelled while the round ran: nobody holds these
            for j, rnd in enumerate(rounds):
                if rnd.ok:
                    aexec.release_later(keys[j], tokens[j])

        rounds = await aexec.job(plan, undo)
        return Lock.held(self, names, keys, float(ttl), ttl_ms, tokens, rounds, [None] * len(keys))

    async def release_many(self, locks: Sequence[Lock], *, wait: Optional[bool] = None) -> Optional[List[bool]]:
        """Release several held locks in one round; per lock, whether a quorum still held it
        (see :meth:`fastredlock.Redlock.release_many`; ``wait=False``: written, not waited for,
        returns None)."""
        held, keys, tokens, _carriers = Lock.release_args_of(locks)  # raises if a handle holds nothing
        if not held:
            return []
        for lock in held:
            self._aexec.unwatch(lock)
        if not (self.executor.wait_release if wait is None else wait):
            await self._aexec.release_many_unwaited(held, keys, tokens)
            return None
        rounds = None
        try:
            rounds = await self._aexec.run("release_many", keys, tokens)
        finally:
            Lock.released_all(held, rounds)
        return [bool(rnd.ok) for rnd in rounds]

    async def lock_all(self, names: Sequence[Union[str, bytes]], ttl: float = 10.0) -> Optional[List[Lock]]:
        """Acquire several names together, all or none (see :meth:`fastredlock.Redlock.lock_all`)."""
        names, keys, ttl_ms = self._batch_args(names, ttl)
        tokens = [new_token()] * len(keys)

        async def plan(lc: Any) -> Any:
            rnd = (await lc.run("acquire_all", keys, tokens[0], ttl_ms))[0]
            if not rnd.ok and may_hold(rnd.outcomes):
                await lc.run("release_many_nowait", keys, tokens)
            return rnd

        aexec = self._aexec

        def undo(rnd: Any) -> None:  # cancelled while the round ran: nobody holds these
            if rnd.ok:
                for key in keys:
                    aexec.release_later(key, tokens[0])

        rnd = await aexec.job(plan, undo)
        if not rnd.ok:
            return None
        held = Lock.held(self, names, keys, float(ttl), ttl_ms, tokens, [rnd] * len(keys), [None] * len(keys))
        return [lock for lock in held if lock is not None]  # (all of them: the round held every key)

    async def inspect(self, name: Union[str, bytes]) -> LockInfo:
        """Tell whether the lock called ``name`` is held, on which masters, by whom and for how
        long, without taking it (one round that writes nothing; see
        :meth:`fastredlock.Redlock.inspect`)."""
        key = key_of(self.prefix, name)
        rounds = await self._aexec.run("inspect", [key], [fence_key(key)])
        return inspection(name, self.masters, rounds, self.quorum, self.drift_factor)

    async def inspect_family(self, name: Union[str, bytes], kind: str, limit: int = 0) -> FamilyInfo:
        """Tell who holds a reentrant lock, read-write lock or semaphore, without taking it (one
        round of reads; see :meth:`fastredlock.Redlock.inspect_family`)."""
        rounds = await self._aexec.run("reads", self._family_reads(name, kind, limit))
        return family_inspection(name, kind, limit, self.masters, rounds, self.quorum, self.drift_factor)

    async def aclose(self) -> None:
        """Stop the watchdog, let queued work finish, close every connection. Locks still held
        stay until their TTL."""
        if self._aexec.watchdog is not None:
            await self._aexec.watchdog.stop()
        if self.executor.notifier is not None:
            await self.executor.notifier.aclose()
        await self._aexec.aclose()

    async def __aenter__(self) -> "Redlock":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # --- for the handles (not for applications) -----------------------------------------------
    def _new_notifier(self) -> AsyncNotifier:
        return AsyncNotifier(self._specs, self.connect_timeout, self.courtesy)

    def _new_watchdog(self, ref: "weakref.ref[Any]") -> Any:
        raise RuntimeError("the asyncio client's watchdog is a task (see AsyncExecutor.watch)")
