"""The sync client's watchdog thread: one per client, keeping auto-extended locks alive.

Its decisions (what is due, what a renewal round means) are :mod:`fastredlock.handles.watchdog`'s,
shared with the asyncio watchdog task; this module is the thread that runs them. The thread starts on
the first watched lock and exits after a few idle seconds.
"""
from __future__ import annotations

import logging
import threading
from time import monotonic
from typing import TYPE_CHECKING, Callable, Dict, List, cast

from ..handles.watchdog import IDLE_EXIT, Renewal, Watched, after_renewal, entry_of, renewal_args, triage

if TYPE_CHECKING:  # type names only
    from ..handles.lock import LockBase as Lock
    from .client import Redlock
    from .lock import Lock as SyncLock

log = logging.getLogger("fastredlock")


class Watchdog:
    """Renews and watches the locks of one client; see the module docstring.

    Reads the client (a weak reference: the thread does not keep it alive) only for its public
    settings and its executor; reads and changes the locks only through their methods for it
    (:meth:`Lock.watch_info`, :meth:`Lock.renewed`, :meth:`Lock.lose`).
    """

    def __init__(self, client_ref: Callable[[], "Redlock | None"]) -> None:
        self._client_ref = client_ref
        self._cond = threading.Condition()
        #: Watched locks by id.
        self._locks: Dict[int, Watched] = {}
        self._thread: threading.Thread | None = None
        self._stopped = False

    # --- registration (called through the executor by Lock) ---------------------------------
    def watch(self, lock: "Lock") -> None:
        """Start renewing (auto_extend) or watching (on_lost only) a freshly acquired lock."""
        entry = entry_of(lock)
        with self._cond:
            if self._stopped:
                return
            self._locks[id(lock)] = entry
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="fastredlock-watchdog", daemon=True)
                self._thread.start()
            self._cond.notify()

    def unwatch(self, lock: "Lock") -> None:
        """Stop renewing a lock (it is being released or was lost)."""
        with self._cond:
            self._locks.pop(id(lock), None)

    def stop(self) -> None:
        """Stop the thread; locks stop being renewed (and expire at their TTL)."""
        with self._cond:
            self._stopped = True
            self._locks.clear()
            self._cond.notify()

    # --- the thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        idle_since = None
        while True:
            with self._cond:
                if self._stopped:
                    self._thread = None
                    return
                now = monotonic()
                if not self._locks:
                    idle_since = idle_since or now
                    if now - idle_since >= IDLE_EXIT:
                        self._thread = None
                        return
                    self._cond.wait(IDLE_EXIT)
                    continue
                idle_since = None
                due = [entry for entry in self._locks.values() if entry.due <= now]
                if not due:
                    self._cond.wait(min(entry.due for entry in self._locks.values()) - now)
                    continue
            try:
                self._tick(due)
            except Exception:  # pragma: no cover - keep watching the other locks
                log.exception("fastredlock: watchdog tick failed")

    def _tick(self, due: List[Watched]) -> None:
        with self._cond:
            renew, lost = triage(due, self._locks)
        if renew:
            lost.extend(self._renew(renew))
        for lock in lost:
            cast("SyncLock", lock).lose()  # this thread watches the sync client's handles

    def _renew(self, items: List[Renewal]) -> List["Lock"]:
        """Extend all due locks in one round; return those that are now lost."""
        client = self._client_ref()
        if client is None:
            return []
        executor = client.executor
        with executor.core(carrying=[item.carrier for item in items]) as core:
            if any(item.entry.lock._family_kind for item in items):  # the lock family: a round per lock
                rounds = [cast("SyncLock", item.entry.lock)._extend_round(core, item.token, item.ttl_ms)
                          for item in items]
            else:
                rounds = core.extend_many(*renewal_args(items))
        with self._cond:
            return after_renewal(items, rounds, self._locks, client.quorum, client.retry_delay)

