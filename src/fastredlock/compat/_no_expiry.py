"""Locks whose key has no expiry (``SET key token NX``, no ``PX``), for redis-py's ``Lock`` without ``timeout``.

redis-py stores a lock made without ``timeout`` with no TTL at all: ``TTL name`` is ``-1`` and the
key stays until someone deletes it, even if its holder died. The shim
(:mod:`fastredlock.compat.redis_py`) keeps that by default, so a mixed fleet and code that reads the
key see what they saw before; :class:`~fastredlock.compat.redis_py.RenewedLock` is the safer opt-in.

fastredlock's handles always have a TTL, so this module runs the rounds itself, through the
client's executor (the seam every front-end uses): an acquisition is one script round
(:data:`~fastredlock.protocol.scripts.ACQUIRE_NO_EXPIRY`, an acquisition for restart-aware
voting), a release fastredlock's owner-checked release, on the core that carries the acquisition
while its answers are outstanding. A :class:`Held` has no validity limit: it is held until it is
released (its ``validity`` is ``math.inf``), it is never renewed and cannot be extended.
"""
from __future__ import annotations

import math
from typing import Any, Optional, Tuple

from ..errors import LockNotOwnedError
from ..protocol.family import acquisition_step, script_step
from ..protocol.plans import left_behind
from ..protocol.replies import KIND_SCRIPT
from ..protocol.scripts import ACQUIRE_NO_EXPIRY, QUIET, RELEASE_FULL

__all__ = ["Held", "aacquire", "acquire", "arelease", "release"]


class Held:
    """A key this process set without expiry, with ``token``; ``outcomes``: the last round's answers."""

    __slots__ = ("key", "token", "carrier", "outcomes")

    #: Seconds this lock is known to be held: unbounded (only a release or a DEL ends it).
    validity = math.inf

    def __init__(self, key: bytes, token: Optional[bytes], carrier: Any = None, outcomes: Tuple[Any, ...] = ()) -> None:
        self.key = key
        self.token = token
        self.carrier = carrier
        self.outcomes = outcomes


def _step(key: bytes, token: bytes) -> tuple:
    return acquisition_step(ACQUIRE_NO_EXPIRY, [key], [token], 0)[1]


def acquire(dlm: Any, key: bytes, token: bytes) -> Held:
    """One attempt to set ``key`` to ``token`` without expiry on a quorum of ``dlm``'s masters.

    Returns a :class:`Held` whose ``token`` is ``None`` if the attempt failed (then nothing is left
    behind: a master that may have set the key is released, behind the SET on its connection).
    """
    executor = dlm.executor
    carrier, rnd = executor.script_one(_step(key, token), None, ([key], [token]))
    if rnd.ok:
        return Held(key, token, carrier)
    if left_behind(rnd):
        # Undone quietly (no turn given, nobody woken: it never held the lock), written behind its
        # SET on the same connection and not awaited, as the engine undoes its own failed attempts.
        executor.script_one(script_step(KIND_SCRIPT, RELEASE_FULL, [key], [token, QUIET], 0, False)[1], carrier)
    return Held(key, None, None, tuple(executor.outcomes(rnd)))


def release(dlm: Any, held: Held, token: bytes) -> None:
    """Delete the key where it still holds ``token``; ``LockNotOwnedError`` (with the outcomes) if a
    quorum did not hold it."""
    executor = dlm.executor
    rnd, ok = executor.release_one(held.key, token, held.carrier)
    held.carrier = None
    if not ok:
        raise LockNotOwnedError("the key does not hold this lock's token", held.key, executor.outcomes(rnd))


async def aacquire(dlm: Any, key: bytes, token: bytes) -> Held:
    """:func:`acquire` on a :class:`fastredlock.asyncio.Redlock` (its loop's core, in its turn).

    Cancelled while its round runs, the round still completes and a key it set is released.
    """
    async_executor = dlm.async_executor  # the seam between the client's handles and its event loop
    executor = dlm.executor
    step = _step(key, token)

    async def plan(loop_core: Any) -> Any:
        executor.for_acquiring(loop_core.core)
        rnd = (await loop_core.run("script", *step))[0]
        if left_behind(rnd):
            await loop_core.run("release_quiet", key, token)  # it never held the lock
        return rnd

    rnd = await async_executor.job(plan, undo=lambda rnd: rnd.ok and async_executor.release_later(key, token))
    if rnd.ok:
        return Held(key, token)
    return Held(key, None, None, tuple(executor.outcomes(rnd, False)))


async def arelease(dlm: Any, held: Held, token: bytes) -> None:
    """:func:`release` on a :class:`fastredlock.asyncio.Redlock`."""
    handle = dlm.lock(held.key)
    await handle.release(token=token)  # LockNotOwnedError with the outcomes if not held
