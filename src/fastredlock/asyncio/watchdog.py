"""The asyncio watchdog: one task per client that renews auto-extended locks and notices lost ones.

The sync :mod:`fastredlock.handles.watchdog` on the event loop instead of a thread: every due lock is
renewed in one ``extend_many`` round, about every third of its TTL, until it is released or its
``max_hold`` has passed. The decisions are the sync watchdog's functions (:func:`~fastredlock.handles.watchdog.triage`,
:func:`~fastredlock.handles.watchdog.after_renewal`); only the waiting differs. The task starts with the first watched lock, ends when none is left, and
is cancelled by :meth:`Redlock.aclose`.
"""
from __future__ import annotations

import asyncio
import logging
from time import monotonic
from typing import TYPE_CHECKING, Dict, List, Optional, cast

from ..handles.watchdog import Watched, after_renewal, entry_of, renewal_args, triage

if TYPE_CHECKING:  # type names only
    from .client import Redlock
    from .lock import Lock

__all__ = ["Watchdog"]

log = logging.getLogger("fastredlock")


class Watchdog:
    """Renews and watches the locks of one asyncio client; see the module docstring."""

    def __init__(self, client: "Redlock") -> None:
        self._client = client
        #: Watched locks by id.
        self._locks: Dict[int, Watched] = {}
        self._task: Optional[asyncio.Task] = None
        self._wakeup: Optional[asyncio.Future] = None
        self._stopped = False

    def watch(self, lock: "Lock") -> None:
        """Start renewing (auto_extend) or watching (on_lost only) a freshly acquired lock."""
        if self._stopped:
            return
        self._locks[id(lock)] = entry_of(lock)
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
                due = [entry for entry in self._locks.values() if entry.due <= now]
                if not due:
                    self._wakeup = loop.create_future()
                    first = min(entry.due for entry in self._locks.values())
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

    async def _tick(self, due: List[Watched]) -> None:
        renew, lost = triage(due, self._locks)
        if renew:
            client = self._client
            if any(item.entry.lock._family_kind for item in renew):  # the lock family: a round per lock
                rounds = [await cast("Lock", item.entry.lock)._extend_async(item.token, item.ttl_ms) for item in renew]
            else:
                rounds = await client.async_executor.run("extend_many", *renewal_args(renew))
            lost.extend(after_renewal(renew, rounds, self._locks, client.quorum, client.retry_delay))
        for lock in lost:
            await cast("Lock", lock).lose()  # (the decisions are the sync watchdog's, for any handle)
