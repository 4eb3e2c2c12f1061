"""Lock events: what a client's ``on_event`` hook receives (``Redlock(..., on_event=callable)``).

Off by default, and then free: the handles look at one C field (the executor's ``on_event``) and
build nothing. With a hook, every acquisition, refusal, release, extension and loss of a lock of
that client — sync or asyncio, one lock or a batch, including the watchdog's renewals' losses —
calls ``on_event(LockEvent(...))`` on the thread (or event loop) where it happened, after the
round. The hook must be quick and must not block (it runs on the lock's hot path); an exception it
raises is logged and ignored. :mod:`fastredlock.metrics` turns the events into Prometheus and
OpenTelemetry metrics.
"""
from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["ACQUIRED", "EXTENDED", "KINDS", "LOST", "REFUSED", "RELEASED", "LockEvent"]

#: ``acquire()`` took the lock (``seconds``: the time ``acquire`` took, waiting between attempts included).
ACQUIRED = "acquired"
#: ``acquire()`` gave up: attempts, or its timeout, ran out (``seconds``: the time it took).
REFUSED = "refused"
#: The lock was released (``seconds``: how long it was held; ``ok``: a quorum confirmed it held the token).
RELEASED = "released"
#: An extension (``extend()``, or the watchdog's renewal) held (``seconds``: held so far).
EXTENDED = "extended"
#: The lock was lost while held: an extension or renewal failed or validity ran out (``seconds``: held until then).
LOST = "lost"
#: Every kind, in the order of a lock's life.
KINDS = (ACQUIRED, REFUSED, EXTENDED, RELEASED, LOST)


class LockEvent(NamedTuple):
    """One thing that happened to a lock of the client (see the module docstring)."""

    #: One of :data:`KINDS`.
    kind: str
    #: The lock's name, as given to :meth:`Redlock.lock` (or a batch's name).
    name: Any
    #: Seconds: time spent acquiring (acquired, refused) or holding (released, extended, lost).
    seconds: float
    #: Acquisition attempts made (acquired, refused; 1 for a batch); 0 for the other kinds.
    attempts: int
    #: Whether it went as asked: True for acquired and extended, False for refused and lost; for
    #: released, whether a quorum confirmed it still held the lock.
    ok: bool
