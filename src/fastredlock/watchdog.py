"""The watchdog: one thread per client that keeps auto-extended locks alive and notices lost ones.

Not a thread or timer per lock: every tick, the locks that are due are renewed together, one
pipelined round (``extend_many``) for all of them. A lock is renewed about every third of its TTL,
until it is released or its ``max_hold`` has passed. A renewal that cannot reach a quorum is retried
while the lock still has validity; once a quorum is impossible (the masters said the key is not
ours) or validity has run out, the lock is lost: released everywhere, ``on_lost`` called.
Locks with only ``on_lost`` (no auto-extend) are watched for their validity running out.

The thread starts on the first watched lock and exits after a few idle seconds.
"""
from __future__ import annotations

import logging
import threading
import weakref
from time import monotonic
from typing import TYPE_CHECKING, Dict, List, Tuple

from . import _outcomes as oc

if TYPE_CHECKING:
    from .client import Redlock
    from .lock import Lock

log = logging.getLogger("fastredlock")

#: Renew when this fraction of the TTL has passed since the last successful renewal.
RENEW_FRACTION = 1.0 / 3.0
#: How long the thread waits with nothing to watch before it exits.
IDLE_EXIT = 5.0
#: Outcomes after which a failed renewal is worth retrying (the master may still hold the key).
_TRANSIENT = frozenset({oc.TIMEOUT, oc.CONN_ERROR, oc.ERROR_REPLY, oc.PROTOCOL_ERROR, oc.PENDING, oc.SKIPPED})


class Watchdog:
    """Renews and watches the locks of one client; see the module docstring."""

    def __init__(self, client: "Redlock") -> None:
        self._client_ref = weakref.ref(client)
        self._cond = threading.Condition()
        self._locks: Dict[int, "Lock"] = {}
        self._thread: threading.Thread | None = None
        self._stopped = False

    # --- registration (called by Lock) ------------------------------------------------------
    def watch(self, lock: "Lock") -> None:
        """Start renewing (auto_extend) or watching (on_lost only) a freshly acquired lock."""
        lock._next_due = self._first_due(lock)
        with self._cond:
            if self._stopped:
                return
            self._locks[id(lock)] = lock
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

    def _first_due(self, lock: "Lock") -> float:
        if lock.auto_extend:
            return monotonic() + lock.ttl * RENEW_FRACTION
        return lock._valid_until

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
                due = [lk for lk in self._locks.values() if lk._next_due <= now]
                if not due:
                    self._cond.wait(min(lk._next_due for lk in self._locks.values()) - now)
                    continue
            try:
                self._tick(due)
            except Exception:  # pragma: no cover - keep watching the other locks
                log.exception("fastredlock: watchdog tick failed")

    def _tick(self, due: List["Lock"]) -> None:
        now = monotonic()
        renew: List[Tuple["Lock", bytes]] = []
        lost: List["Lock"] = []
        for lock in due:
            token = lock.token
            if token is None:
                self.unwatch(lock)
            elif now >= lock._valid_until:
                lost.append(lock)  # validity ran out before it could be renewed
            elif lock.auto_extend and (lock.max_hold is None or now - lock._acquired_at < lock.max_hold):
                renew.append((lock, token))
            else:
                lock._next_due = lock._valid_until  # watch only: wake when validity ends
        if renew:
            lost.extend(self._renew(renew))
        for lock in lost:
            lock._lose()

    def _renew(self, items: List[Tuple["Lock", bytes]]) -> List["Lock"]:
        """Extend all due locks in one round; return those that are now lost."""
        client = self._client_ref()
        if client is None:
            return []
        core = client._checkout_for([lock for lock, _ in items])
        clean = False
        try:
            rounds = core.extend_many(
                [lock.key for lock, _ in items], [token for _, token in items], [lock._ttl_ms for lock, _ in items]
            )
            clean = True
        finally:
            client._checkin(core, clean)
        lost = []
        with self._cond:
            for (lock, token), rnd in zip(items, rounds):
                if id(lock) not in self._locks or lock.token != token:
                    continue  # released while the round was in flight
                lock._last = rnd
                if rnd.ok:
                    lock._valid_until = rnd.started + rnd.elapsed + rnd.validity
                    lock._next_due = rnd.started + lock.ttl * RENEW_FRACTION
                    continue
                maybe = rnd.successes + sum(1 for c in rnd.outcomes if c in _TRANSIENT)
                if maybe >= client.quorum and monotonic() < lock._valid_until:
                    # some masters did not answer: try again soon, while the lock is still valid
                    lock._next_due = min(monotonic() + client.retry_delay, lock._valid_until)
                else:
                    lost.append(lock)
        return lost
