"""Releases nobody waits for (``release(wait=False)``): what their answers say, once they are in.

Such a release is written to every master at once and its call returns. Its round's outcomes stay
PENDING until the replies are read: by the next round on those connections (they are owed
replies, read before that round's own; see :mod:`fastredlock.protocol.link`), or, when no round
follows, by a bounded background read (the sync client's reaper thread, the asyncio client's loop).
:class:`Unwaited` keeps those rounds and hands each one back once every master answered or missed
its deadline; the handle then reports what the caller no longer hears at the call site
(:meth:`fastredlock._handle.LockBase._unwaited_done`): its ``released`` event, the wake-up
bookkeeping, and, when the answers say the lock was not held on a quorum, the ``lost`` event,
``on_lost``, a warning in the log and ``releases_not_held`` in ``Redlock.stats()``.

Nothing here does I/O or knows a front-end: the sync executor and the asyncio executor each drive
one :class:`Unwaited` (see ``Executor.release_unwaited`` and ``AsyncExecutor.release_unwaited``).
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Any, Deque, List, Optional, Set

from .protocol.outcomes import C_RELEASES_NOT_HELD, NO, PENDING

__all__ = ["Entry", "Unwaited", "REAP_EVERY", "REAP_LINGER", "found_lost"]

#: How often, in seconds, the rounds of releases not waited for are looked at while some are in
#: flight (reported when done; their connections read when idle that long).
REAP_EVERY = 0.002
#: How long, in seconds, the sync client's reaper keeps looking after the last release in flight
#: was reported, before it sleeps until the next one (a loop of lock cycles does not wake it each time).
REAP_LINGER = 0.05
#: More releases than this in flight: the next one waits for the oldest first (nothing piles up
#: behind a master that stopped answering).
MAX_IN_FLIGHT = 4096


def found_lost(outcomes: Any, n: int, quorum: int) -> bool:
    """Whether a release's answers say the lock was not held on a quorum: so many masters answered
    "not held" (the key had expired, or held another token) that no quorum can have held it.
    Masters that did not answer say nothing (their keys expire)."""
    no = 0
    for code in outcomes:
        if code == NO:
            no += 1
    return no > n - quorum


class Entry:
    """One release in flight: the handle, its round, the core whose connections owe the replies,
    and what the handle was when the release was written (it may be acquired again meanwhile)."""

    def __init__(self, lock: Any, rnd: Any, core: Any, acquired_at: float, was_lost: bool) -> None:
        self.lock = lock
        self.rnd = rnd
        #: The core whose connections owe the answers (None: the asyncio client's one core).
        self.core = core
        self.acquired_at = acquired_at
        #: The lock was known lost when released (its caller got LockLostError at once).
        self.was_lost = was_lost


class Unwaited:
    """The releases of one client written without waiting, until their answers are in.

    Thread-safe: the sync client adds from any thread, and both the thread that releases next and
    the reaper take what is done. Most releases are answered in the order they were written, so
    :meth:`done` looks at the oldest first and stops at the first still pending (a pending one is
    over by its deadline at the latest).
    """

    def __init__(self, n: int) -> None:
        self.entries: Deque[Entry] = deque()
        self._lock = threading.Lock()
        self._n = n
        #: The oldest entry when the reaper last looked (see :meth:`stuck`).
        self._seen: Any = None

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, entry: Entry) -> bool:
        """Keep ``entry``; True if it is the only one (whoever reaps may be asleep)."""
        entries = self.entries
        entries.append(entry)
        return len(entries) == 1

    def done(self, quiet: bool) -> List[Entry]:
        """Take the oldest entries whose every master answered or missed its deadline; return
        those with something to report. ``quiet``: nobody listens to events, so a release that
        every master confirmed, of a lock not known lost, with nobody woken, has nothing to report
        (the common case costs no call into the handle)."""
        out: List[Entry] = []
        entries = self.entries
        lock = self._lock
        lock.acquire()
        try:
            while entries:
                entry = entries[0]
                rnd = entry.rnd
                if PENDING in rnd.outcomes:
                    break
                entries.popleft()
                if not quiet or entry.was_lost or rnd.successes != self._n or rnd.details is not None:
                    out.append(entry)
        finally:
            lock.release()
        return out

    def stuck(self) -> Set[Any]:
        """The reaper's question, asked every REAP_EVERY seconds: the cores owing replies to
        entries that were pending already when it last asked (nobody's round read them since;
        the reaper reads them if the core is free). Empty while releases keep being answered."""
        cores: Set[Any] = set()
        lock = self._lock
        lock.acquire()
        try:
            entries = self.entries
            oldest = entries[0] if entries else None
            if oldest is not None and oldest is self._seen:
                for entry in entries:
                    if PENDING in entry.rnd.outcomes:
                        cores.add(entry.core)
            self._seen = oldest
        finally:
            lock.release()
        return cores

    def pending_cores(self) -> Set[Any]:
        """Every core owing replies to an entry (:meth:`Executor.close` reads them all)."""
        with self._lock:
            return {entry.core for entry in self.entries if PENDING in entry.rnd.outcomes}


def count_not_held(health: Any, outcomes: Any) -> None:
    """``releases_not_held`` += 1 for each master that answered a release "not held"."""
    for i, code in enumerate(outcomes):
        if code == NO:
            health.count(i, C_RELEASES_NOT_HELD)
