"""The asyncio watchdog: one task per client that renews auto-extended locks and notices lost ones.

The sync :mod:`fastredlock.watchdog` on the event loop instead of a thread: every due lock is
renewed in one ``extend_many`` round, about every third of its TTL, until it is released or its
``max_hold`` has passed; :func:`~fastredlock.protocol.plans.renewal_verdict` decides between
renewed, retry and lost. The task starts with the first watched lock, ends when none is left, and
is cancelled by :meth:`Redlock.aclose`.
"""
from __future__ import annotations

import asyncio
import logging
from time import monotonic
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from ..protocol.plans import RENEWED, RETRY, renewal_verdict
from ..watchdog import RENEW_FRACTION

if TYPE_CHECKING:  # type names only
    from .client import Redlock
    from .lock import Lock

__all__ = ["Watchdog"]

log = logging.getLogger("fastredlock")


class Watchdog:
    """Renews and watches the locks of one asyncio client; see the module docstring."""

    def __init__(self, client: "Redlock") -> None:
        self._client = client
        #: Watched locks by id: ``[lock, when to look at it next, when renewal stops (max_hold)]``.
        self._locks: Dict[int, List[Any]] = {}
        self._task: Optional[asyncio.Task] = None
        self._wakeup: Optional[asyncio.Future] = None
        self._stopped = False

    def watch(self, lock: "Lock") -> None:
        """Start renewing (auto_extend) or watching (on_lost only) a freshly acquired lock."""
        if self._stopped:
            return
        _token, valid_until, acquired_at, _ttl_ms, _carrier = lock.watch_info()
        due = monotonic() + lock.ttl * RENEW_FRACTION if lock.auto_extend else valid_until
        stop = acquired_at + lock.max_hold if lock.max_hold is not None else float("inf")
        self._locks[id(lock)] = [lock, due, stop]
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        self._wake()

    def unwatch(self, lock: "Lock") -> None:
        """Stop renewing a lock (it is being released or was lost)."""
        self._locks.pop(id(lock), None)

    async def stop(self) -> None:
        """Stop the task; locks stop being renewed (and expire at their TTL)."""
        self._stopped = True
        self._locks.clear()
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    def _wake(self) -> None:
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._locks and not self._stopped:
                now = monotonic()
                due = [entry for entry in self._locks.values() if entry[1] <= now]
                if not due:
                    self._wakeup = loop.create_future()
                    first = min(entry[1] for entry in self._locks.values())
                    try:
                        await asyncio.wait_for(self._wakeup, max(0.0, first - now))
                    except asyncio.TimeoutError:
                        pass
                    continue
                try:
                    await self._tick(due)
                except Exception:  # pragma: no cover - keep watching the other locks
                    log.exception("fastredlock: watchdog tick failed")
        finally:
            if self._task is asyncio.current_task():
                self._task = None

    async def _tick(self, due: List[List[Any]]) -> None:
        now = monotonic()
        renew: List[tuple] = []
        lost: List["Lock"] = []
        for entry in due:
            lock = entry[0]
            token, valid_until, _acquired_at, ttl_ms, _carrier = lock.watch_info()
            if token is None:
                self.unwatch(lock)
            elif now >= valid_until:
                lost.append(lock)  # validity ran out before it could be renewed
            elif lock.auto_extend and now < entry[2]:
                renew.append((entry, token, ttl_ms))
            else:
                entry[1] = valid_until  # watch only: wake when validity ends
        if renew:
            lost.extend(await self._renew(renew))
        for lock in lost:
            await lock.lose()

    async def _renew(self, items: List[tuple]) -> List["Lock"]:
        """Extend all due locks in one round; return those that are now lost."""
        client = self._client
        rounds = await client._aexec.run(
            "extend_many", [entry[0].key for entry, _, _ in items], [token for _, token, _ in items],
            [ttl_ms for _, _, ttl_ms in items],
        )
        lost = []
        for (entry, token, _), rnd in zip(items, rounds):
            lock = entry[0]
            if self._locks.get(id(lock)) is not entry:
                continue  # released while the round was in flight
            valid_until = lock.renewed(token, rnd)
            if valid_until is None:
                continue  # released (and maybe acquired again) while the round was in flight
            now = monotonic()
            verdict = renewal_verdict(rnd, client.quorum, valid_until, now)
            if verdict == RENEWED:
                entry[1] = rnd.started + lock.ttl * RENEW_FRACTION
            elif verdict == RETRY:
                entry[1] = min(now + client.retry_delay, valid_until)
            else:
                lost.append(lock)
        return lost
