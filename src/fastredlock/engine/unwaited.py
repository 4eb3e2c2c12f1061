"""Releases nobody waits for (``release(wait=False)``): what their answers say, once they are in.

Such a release is written to every master at once and its call returns. Its round's outcomes stay
PENDING until the replies are read: by the next round on those connections (they are owed
replies, read before that round's own; see :mod:`fastredlock.protocol.link`), or, when no round
follows, by a bounded background read (the sync client's reaper thread, the asyncio client's loop).
:class:`Unwaited` keeps those rounds and hands each one back once every master answered or missed
its deadline: the executor calls the entry's ``on_done(entry)``, given by whoever wrote the release
(a handle: :meth:`fastredlock.handles.lock.LockBase._unwaited_done` reports what the caller no
longer hears at the call site: its ``released`` event, the wake-up
bookkeeping, and, when the answers say the lock was not held on a quorum, the ``lost`` event,
``on_lost``, a warning in the log and ``releases_not_held`` in ``Redlock.stats()``.

Nothing here does I/O or knows a front-end: the sync executor and the asyncio executor each drive
one :class:`Unwaited` (see ``Executor.release_unwaited`` and ``AsyncExecutor.release_unwaited``).
"""
from __future__ import annotations

import threading
from typing import Any, List, Set

from ..protocol.outcomes import C_RELEASES_NOT_HELD, NO, PENDING

try:  # the shadow module says whether this file runs compiled (it is absent from a pure install)
    import cython
    _COMPILED = cython.compiled
except ImportError:  # pragma: no cover - pure install without Cython
    _COMPILED = False

_PENDING = PENDING  # a C int when compiled

__all__ = ["Entry", "Unwaited", "REAP_EVERY", "REAP_LINGER", "REAP_SLOWEST", "found_lost", "new_entry"]

#: How often, in seconds, the rounds of releases not waited for are looked at while some are in
#: flight (reported when done; their connections read when idle that long).
REAP_EVERY = 0.002
#: How long, in seconds, the sync client's reaper keeps looking after the last release in flight
#: was reported, before it sleeps until the next one (a loop of lock cycles does not wake it each time).
REAP_LINGER = 0.05
#: The longest pause, in seconds, of the sync client's reaper between two looks. While the client
#: keeps cycling (each look finds that rounds since the last one read the answers: the oldest
#: release in flight is another), nothing is owed for long and the reaper doubles its pause up to
#: this: a loop of lock cycles wakes it ~50 times a second, not 500. A look that finds nothing
#: moved, or replies read, goes back to REAP_EVERY: what a client that went idle still owes is read
#: within about two of these pauses.
REAP_SLOWEST = 0.02
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
    """One release in flight: who to tell once its answers are in, its round, the core whose
    connections owe the replies, and what the handle was when the release was written (it may be
    acquired again meanwhile). Made by :func:`new_entry`."""

    #: Called with this entry once its answers are in (the writer's report; the executor knows
    #: nothing else of the handle).
    on_done: Any
    rnd: Any
    #: The core whose connections owe the answers (None: the asyncio client's one core).
    core: Any
    acquired_at: float
    #: The lock was known lost when released (its caller got LockLostError at once).
    was_lost: bool


def new_entry(on_done: Any, rnd: Any, core: Any, acquired_at: float, was_lost: bool) -> Entry:
    """An :class:`Entry`, made in one C call when compiled (no ``__init__`` argument parsing)."""
    entry = Entry.__new__(Entry)
    entry.on_done = on_done
    entry.rnd = rnd
    entry.core = core
    entry.acquired_at = acquired_at
    entry.was_lost = was_lost
    return entry


class Unwaited:
    """The releases of one client written without waiting, until their answers are in.

    Thread-safe: the sync client adds from any thread, and both the thread that releases next and
    the reaper take what is done. Compiled, each method runs under the GIL without releasing it
    (no Python call inside), so no lock is taken; interpreted, a lock guards them (as
    :class:`~fastredlock.protocol.health.Health` does). Most releases are answered in the order
    they were written, so :meth:`done` looks at the oldest first and stops at the first still
    pending (a pending one is over by its deadline at the latest).
    """

    def __init__(self, n: int) -> None:
        self.entries: List[Entry] = []
        self._lock = None if _COMPILED else threading.Lock()
        self._n = n
        #: The oldest entry when the reaper last looked (see :meth:`stuck`).
        self._seen: Any = None
        #: Whether the oldest entry was another at the reaper's last look than at the one before
        #: (rounds read the answers meanwhile: the client is busy; see :meth:`stuck`).
        self.moved = False
        #: How often the reaper looked (:meth:`stuck` calls): a loop of lock cycles keeps it rare.
        self.looks = 0

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
        (the common case costs no call of ``on_done``)."""
        lock = self._lock
        if lock is not None:
            with lock:
                return self._done(quiet)
        return self._done(quiet)

    def _done(self, quiet: bool) -> List[Entry]:
        out: List[Entry] = []
        entries = self.entries
        n = self._n
        taken = 0
        for entry in entries:
            rnd = entry.rnd
            if _PENDING in rnd.outcomes:
                break
            taken += 1
            if not quiet or entry.was_lost or rnd.successes != n or rnd.details is not None:
                out.append(entry)
        if taken:
            del entries[:taken]
        return out

    def stuck(self) -> Set[Any]:
        """The reaper's question, asked every REAP_EVERY seconds: the cores owing replies to
        entries that were pending already when it last asked (nobody's round read them since;
        the reaper reads them if the core is free). Empty while releases keep being answered
        (then :attr:`moved` is True)."""
        lock = self._lock
        if lock is not None:
            with lock:
                return self._stuck()
        return self._stuck()

    def _stuck(self) -> Set[Any]:
        self.looks += 1
        cores: Set[Any] = set()
        entries = self.entries
        oldest = entries[0] if entries else None
        if oldest is not None and oldest is self._seen:
            for entry in entries:
                if _PENDING in entry.rnd.outcomes:
                    cores.add(entry.core)
        self.moved = oldest is not None and oldest is not self._seen
        self._seen = oldest
        return cores

    def pending_cores(self) -> Set[Any]:
        """Every core owing replies to an entry (:meth:`Executor.close` reads them all)."""
        return {entry.core for entry in list(self.entries) if _PENDING in entry.rnd.outcomes}


def count_not_held(health: Any, outcomes: Any) -> None:
    """``releases_not_held`` += 1 for each master that answered a release "not held"."""
    for i, code in enumerate(outcomes):
        if code == NO:
            health.count(i, C_RELEASES_NOT_HELD)
